#!/usr/bin/env python3
"""CORS from a real browser: headless Chromium, driven by selenium through chromedriver.

Usage: cors_browser.py --endpoint URL run '{"bucket": NAME}'

Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. Prints one JSON document.

The page is served by this script on another port of 127.0.0.1 (so another origin than the
gateway's). boto3 sets the bucket's CORS rules to allow that origin, then the page
- uploads with a presigned PUT (a preflight: its Content-Type is not a simple one) and reads
  the ETag the rules expose,
- downloads with a presigned GET,
- lists with a fetch signed in the Authorization header (a preflight for the x-amz-* and
  Authorization headers),
and the same GET is tried from an origin the rules do not name (the page loaded as
`localhost`) and, after DeleteBucketCors, from the allowed one: the browser must refuse both.
Result: {"allowed": {...}, "other_origin": {...}, "after_delete": {...}}, each step with its
status and body or the error the browser raised.
"""

import http.server
import os
import tempfile
import threading

import boto3
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config

from headless import browser, main

BODY = "uploaded by headless Chromium\n"

STEPS_JS = """
const [steps, done] = arguments;
(async () => {
  const out = {};
  for (const s of steps) {
    try {
      const r = await fetch(s.url, {method: s.method, headers: s.headers || {}, body: s.body, cache: 'no-store'});
      out[s.name] = {status: r.status, etag: r.headers.get('ETag'), text: await r.text()};
    } catch (e) {
      out[s.name] = {error: String(e)};
    }
  }
  done(out);
})();
"""


class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        page = b"<!doctype html><title>cors test page</title><p>holt CORS test</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args):
        pass


def run(endpoint, args):
    bucket = args["bucket"]
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                                    retries={"max_attempts": 1}))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    allowed = f"http://127.0.0.1:{port}"
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [{
        "AllowedOrigins": [allowed],
        "AllowedMethods": ["GET", "PUT", "HEAD"],
        "AllowedHeaders": ["*"],
        "ExposeHeaders": ["ETag"],
        "MaxAgeSeconds": 60,
    }]})

    key = "from-browser/hello.txt"
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=600)
    get_url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=600)
    list_url = f"{endpoint}/{bucket}?list-type=2&prefix=from-browser%2F"
    signed = AWSRequest(method="GET", url=list_url)
    creds = boto3.session.Session().get_credentials()
    S3SigV4Auth(creds, "s3", "us-east-1").add_auth(signed)
    # The browser sets Host itself; the rest of what was signed goes with the fetch.
    list_headers = {k: v for k, v in signed.headers.items() if k.lower() != "host"}

    result = {}
    with tempfile.TemporaryDirectory() as profile:
        driver = browser(profile)
        try:
            driver.get(f"{allowed}/")
            result["allowed"] = driver.execute_async_script(STEPS_JS, [
                {"name": "put", "method": "PUT", "url": put_url, "body": BODY,
                 "headers": {"Content-Type": "application/octet-stream"}},
                {"name": "get", "method": "GET", "url": get_url},
                {"name": "list", "method": "GET", "url": list_url, "headers": list_headers},
            ])
            driver.get(f"http://localhost:{port}/")
            result["other_origin"] = driver.execute_async_script(STEPS_JS, [
                {"name": "get", "method": "GET", "url": get_url},
            ])
            s3.delete_bucket_cors(Bucket=bucket)
            driver.get(f"{allowed}/")
            result["after_delete"] = driver.execute_async_script(STEPS_JS, [
                {"name": "get", "method": "GET", "url": get_url},
            ])
            shots = os.environ.get("HOLT_SCREENSHOT_DIR")
            if shots:
                os.makedirs(shots, exist_ok=True)
                driver.save_screenshot(os.path.join(shots, "cors-page.png"))
        finally:
            driver.quit()
            server.shutdown()
    stored = s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
    result["stored"] = stored
    result["body"] = BODY
    return result


if __name__ == "__main__":
    main(__doc__, run)
