#!/usr/bin/env python3
"""The web console in a real browser: headless Chromium, driven by selenium.

Usage: console_browser.py --endpoint URL run '{"bucket": NAME, "big_bytes": N}'

Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (typed into the sign-in form;
boto3 uses them too, to set up and to check). Prints one JSON document:
{"bad_sign_in": error text, "buckets": [...], "root_rows": [...], "docs_rows": [...],
 "uploaded_rows": [...], "details": {name: value}, "downloaded_md5": hex, "small_md5": hex,
 "heads": {key: {"size", "etag"}},
 "shown_usage": {"root"|"docs": {"total": [objects, bytes], "prefixes": {prefix: [objects, bytes]},
                                 "bars": [[name, bytes, share drawn], ...]}},
 "api_usage": {"root"|"docs": the same "total" and "prefixes" from GET /bucket?usage}}
Screenshots go to $HOLT_SCREENSHOT_DIR when it is set.
"""

import hashlib
import os
import tempfile
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

import boto3
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from headless import browser, main

SMALL = b"hello from the console test\n"


def rows(driver):
    """The listing's rows: ("prefix", prefix) or ("object", key, size)."""
    out = []
    for tr in driver.find_elements(By.CSS_SELECTOR, "#listing tbody tr"):
        if tr.get_attribute("class") == "prefix":
            out.append(["prefix", tr.get_attribute("data-prefix")])
        else:
            out.append(["object", tr.get_attribute("data-key"), int(tr.get_attribute("data-size"))])
    return out


def shown_usage(driver):
    """What the page shows of the usage extension: the prefix's total, each directory row's
    objects and bytes, and the chart's bars."""
    summary = driver.find_element(By.ID, "usage")
    prefixes = {}
    for tr in driver.find_elements(By.CSS_SELECTOR, "#listing tbody tr.prefix"):
        prefixes[tr.get_attribute("data-prefix")] = [int(tr.get_attribute("data-objects")),
                                                     int(tr.get_attribute("data-bytes"))]
    # Each bar: its name, bytes, and the share of its track it fills as drawn (2 decimals).
    bars = [[b.get_attribute("data-name"), int(b.get_attribute("data-bytes")),
             round(b.find_element(By.CSS_SELECTOR, ".fill").size["width"]
                   / b.find_element(By.CSS_SELECTOR, ".track").size["width"], 2)]
            for b in driver.find_elements(By.CSS_SELECTOR, "#chart .bar")]
    return {"total": [int(summary.get_attribute("data-objects")), int(summary.get_attribute("data-bytes"))],
            "prefixes": prefixes, "bars": bars}


def api_usage(session, endpoint, bucket, prefix):
    """GET /bucket?usage&prefix=..&delimiter=/ signed with botocore's SigV4."""
    query = urllib.parse.urlencode({"usage": "", "prefix": prefix, "delimiter": "/"})
    request = AWSRequest(method="GET", url=f"{endpoint}/{bucket}?{query}")
    S3SigV4Auth(session.get_credentials(), "s3", "us-east-1").add_auth(request)
    prepared = urllib.request.Request(request.url, headers=dict(request.headers.items()))
    with urllib.request.urlopen(prepared) as resp:
        doc = ET.fromstring(resp.read())
    for elem in doc.iter():
        elem.tag = elem.tag.rpartition("}")[2]
    prefixes = {cp.findtext("Prefix"): [int(cp.findtext("Objects")), int(cp.findtext("Bytes"))]
                for cp in doc.findall("CommonPrefixes")}
    return {"total": [int(doc.findtext("Objects")), int(doc.findtext("Bytes"))], "prefixes": prefixes}


def rows_when(wait, ready):
    """The listing's rows, once `ready(rows)` holds."""
    def check(driver):
        found = rows(driver)
        return found if ready(found) else None
    return wait.until(check)


def run(endpoint, args):
    bucket = args["bucket"]
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
    s3.create_bucket(Bucket=bucket)
    for key, body in [("top.txt", b"top\n"), ("docs/a.txt", b"a" * 1000), ("docs/sub/b.txt", b"b")]:
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    shots = os.environ.get("HOLT_SCREENSHOT_DIR")
    if shots:
        os.makedirs(shots, exist_ok=True)

    def shot(driver, name):
        if shots:
            driver.save_screenshot(os.path.join(shots, f"console-{name}.png"))

    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        small = os.path.join(tmp, "hello.txt")
        with open(small, "wb") as f:
            f.write(SMALL)
        big = os.path.join(tmp, "big.bin")
        with open(big, "wb") as f:
            chunk = hashlib.sha256(b"seed").digest() * 32768  # 1 MiB
            left = args["big_bytes"]
            while left > 0:
                f.write(chunk[:left])
                left -= len(chunk)
        driver = browser(os.path.join(tmp, "profile"))
        # The listing is re-rendered as the page loads: a row may go stale while read.
        wait = WebDriverWait(driver, 60, ignored_exceptions=(StaleElementReferenceException,))
        try:
            driver.get(f"{endpoint}/console")
            # A wrong secret is refused with the gateway's error.
            driver.find_element(By.ID, "access-key").send_keys(os.environ["AWS_ACCESS_KEY_ID"])
            driver.find_element(By.ID, "secret-key").send_keys("wrong-secret")
            driver.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()
            wait.until(lambda d: d.find_element(By.ID, "sign-in-error").text)
            result["bad_sign_in"] = driver.find_element(By.ID, "sign-in-error").text
            secret = driver.find_element(By.ID, "secret-key")
            secret.clear()
            secret.send_keys(os.environ["AWS_SECRET_ACCESS_KEY"])
            driver.find_element(By.CSS_SELECTOR, "#sign-in-form button").click()
            wait.until(EC.visibility_of_element_located((By.ID, "app")))
            # The page renders the bucket list and the first bucket's listing as it signs in:
            # every read and click is retried until it meets no element replaced meanwhile.
            result["buckets"] = wait.until(
                lambda d: [a.text for a in d.find_elements(By.CSS_SELECTOR, "#bucket-list a")])
            wait.until(lambda d: d.find_element(By.CSS_SELECTOR, f'#bucket-list a[data-bucket="{bucket}"]').click()
                       or True)
            result["root_rows"] = rows_when(wait, lambda r: len(r) == 2)
            wait.until(lambda d: d.find_element(By.ID, "usage").get_attribute("data-bytes"))
            result["shown_usage"] = {"root": shown_usage(driver)}
            shot(driver, "root")
            wait.until(lambda d: d.find_element(By.CSS_SELECTOR, 'tr.prefix[data-prefix="docs/"] a').click() or True)
            result["docs_rows"] = rows_when(wait, lambda r: ["prefix", "docs/sub/"] in r)
            # Upload both files into docs/ (the big one as a multipart upload).
            driver.find_element(By.ID, "upload-input").send_keys(small + "\n" + big)
            wait.until(lambda d: "uploaded" in d.find_element(By.ID, "progress-text").text
                       or d.find_element(By.ID, "status").text)
            result["upload_status"] = driver.find_element(By.ID, "status").text
            result["uploaded_rows"] = rows_when(
                wait, lambda r: any(x[1] == "docs/big.bin" for x in r if x[0] == "object"))
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, '#chart .bar[data-name="docs/big.bin"]'))
            result["shown_usage"]["docs"] = shown_usage(driver)
            shot(driver, "uploaded")
            wait.until(lambda d: d.find_element(By.CSS_SELECTOR, 'tr.object[data-key="docs/hello.txt"] td a').click()
                       or True)
            wait.until(EC.visibility_of_element_located((By.ID, "details")))
            wait.until(lambda d: d.find_element(By.ID, "download").get_attribute("href").startswith("http"))
            terms = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#details-list dt")]
            values = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#details-list dd")]
            result["details"] = dict(zip(terms, values))
            shot(driver, "details")
            url = driver.find_element(By.ID, "download").get_attribute("href")
            with urllib.request.urlopen(url) as resp:
                result["downloaded_md5"] = hashlib.md5(resp.read()).hexdigest()
        finally:
            driver.quit()
    result["small_md5"] = hashlib.md5(SMALL).hexdigest()
    session = boto3.session.Session()
    result["api_usage"] = {"root": api_usage(session, endpoint, bucket, ""),
                           "docs": api_usage(session, endpoint, bucket, "docs/")}
    result["heads"] = {}
    for key in ["docs/hello.txt", "docs/big.bin"]:
        head = s3.head_object(Bucket=bucket, Key=key)
        result["heads"][key] = {"size": head["ContentLength"], "etag": head["ETag"]}
    return result


if __name__ == "__main__":
    main(__doc__, run)
