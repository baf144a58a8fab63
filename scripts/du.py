#!/usr/bin/env python3
"""du for S3 prefixes on a holt gateway: objects and bytes under s3://BUCKET/PREFIX and under
each "directory" below it, from the gateway's usage extension (GET /BUCKET?usage), which
answers from the counts its index keeps instead of listing the objects.

    scripts/du.py s3://photos/2026/               # the prefix and each directory below it
    scripts/du.py --summarize s3://photos/2026/   # the prefix's total only
    scripts/du.py --bytes s3://photos/            # exact byte counts

Endpoint: --endpoint, else $AWS_ENDPOINT_URL, else http://127.0.0.1:9000. Credentials:
$AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY (else $HOLT_ACCESS_KEY, $HOLT_SECRET_KEY).
Region: --region, else $AWS_REGION, else us-east-1. HOLT_DU_INSECURE=1 skips verifying an
HTTPS endpoint's certificate (a test gateway's own). Python's standard library only: requests
are signed with AWS Signature Version 4 here.
"""

import argparse
import datetime
import hashlib
import hmac
import os
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def quote(s: str) -> str:
    """Percent-encoding as SigV4 canonicalises query strings: unreserved characters only."""
    return urllib.parse.quote(s, safe="-_.~")


def signed_get(endpoint, region, access_key, secret_key, path, params):
    """GET endpoint+path?params signed with SigV4; returns the response body."""
    url = urllib.parse.urlsplit(endpoint)
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    query = "&".join(f"{quote(k)}={quote(v)}" for k, v in sorted(params.items()))
    host = url.netloc
    headers = {"host": host, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": amz_date}
    signed = ";".join(sorted(headers))
    canonical = "\n".join(
        [
            "GET",
            urllib.parse.quote(path, safe="/-_.~"),
            query,
            "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)),
            signed,
            EMPTY_SHA256,
        ]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = ("AWS4" + secret_key).encode()
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    request = urllib.request.Request(
        f"{url.scheme}://{host}{urllib.parse.quote(path, safe='/-_.~')}?{query}",
        headers={
            "x-amz-content-sha256": EMPTY_SHA256,
            "x-amz-date": amz_date,
            "Authorization": f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
            f"SignedHeaders={signed}, Signature={signature}",
        },
    )
    context = None
    if url.scheme == "https" and os.environ.get("HOLT_DU_INSECURE") == "1":
        context = ssl._create_unverified_context()
    with urllib.request.urlopen(request, context=context, timeout=60) as response:
        return response.read()


def text(elem, name, default=""):
    found = elem.find(name)
    return found.text or default if found is not None else default


def human(n: int) -> str:
    size = float(n)
    for unit in ("B", "K", "M", "G", "T", "P"):
        if size < 1024 or unit == "P":
            return f"{size:.0f}{unit}" if unit == "B" or size >= 10 else f"{size:.1f}{unit}"
        size /= 1024
    return f"{n}B"


def main() -> int:
    parser = argparse.ArgumentParser(description="Objects and bytes under S3 prefixes on a holt gateway.")
    parser.add_argument("target", help="s3://BUCKET[/PREFIX]")
    parser.add_argument("--endpoint", default=os.environ.get("AWS_ENDPOINT_URL", "http://127.0.0.1:9000"))
    parser.add_argument("--region", default=os.environ.get("AWS_REGION", "us-east-1"))
    parser.add_argument("--delimiter", default="/", help="what separates directories (default /)")
    parser.add_argument("-s", "--summarize", action="store_true", help="the prefix's total only")
    parser.add_argument("-b", "--bytes", action="store_true", help="exact byte counts")
    args = parser.parse_args()

    if not args.target.startswith("s3://"):
        parser.error("the target is s3://BUCKET[/PREFIX]")
    bucket, _, prefix = args.target[len("s3://") :].partition("/")
    if not bucket:
        parser.error("the target names no bucket")
    access_key = os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("HOLT_ACCESS_KEY")
    secret_key = os.environ.get("AWS_SECRET_ACCESS_KEY") or os.environ.get("HOLT_SECRET_KEY")
    if not access_key or not secret_key:
        print("du.py: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", file=sys.stderr)
        return 2
    size = (lambda n: str(n)) if args.bytes else human

    params = {"usage": "", "prefix": prefix, "encoding-type": "url"}
    if not args.summarize:
        params["delimiter"] = args.delimiter
    rows = []
    total = None
    while True:
        try:
            body = signed_get(args.endpoint, args.region, access_key, secret_key, f"/{bucket}", params)
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")
            code = ET.fromstring(detail).findtext("Code") if detail.startswith("<") else detail
            print(f"du.py: {args.target}: HTTP {e.code} {code}", file=sys.stderr)
            return 1
        except OSError as e:
            print(f"du.py: {args.endpoint}: {e}", file=sys.stderr)
            return 1
        doc = ET.fromstring(body)
        for elem in doc.iter():
            elem.tag = elem.tag.rpartition("}")[2]
        if total is None:
            uploads = doc.find("UploadsInProgress")
            total = (
                int(text(doc, "Objects", "0")),
                int(text(doc, "Bytes", "0")),
                int(text(uploads, "Uploads", "0")) if uploads is not None else 0,
                int(text(uploads, "Bytes", "0")) if uploads is not None else 0,
            )
        for cp in doc.findall("CommonPrefixes"):
            name = urllib.parse.unquote(text(cp, "Prefix"))
            rows.append((int(text(cp, "Bytes", "0")), int(text(cp, "Objects", "0")), name))
        token = text(doc, "NextContinuationToken")
        if text(doc, "IsTruncated") != "true" or not token:
            break
        params["continuation-token"] = token

    for nbytes, objects, name in rows:
        print(f"{size(nbytes):>8}  {objects:>12} objects  s3://{bucket}/{name}")
    objects, nbytes, uploads, upload_bytes = total
    print(f"{size(nbytes):>8}  {objects:>12} objects  s3://{bucket}/{prefix}")
    if uploads:
        print(f"{size(upload_bytes):>8}  {uploads:>12} uploads in progress (parts so far)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
