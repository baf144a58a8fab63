#!/usr/bin/env python3
"""boto3 driver for the compat suite: one operation per invocation, result as JSON on stdout.

Usage: s3ops.py --endpoint URL OP 'JSON-ARGS'

The Rust tests make every assertion; this script only calls boto3 and reports what boto3
returned. Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.

On an S3 error it prints {"error": {"Code", "Message", "HTTPStatusCode"}} and exits 3; any other
exception exits 4 with a traceback on stderr.

Operations:
  call       {"method": NAME, "kwargs": {...}}: any S3 client method; streaming bodies are
             replaced by {"Body_len", "Body_md5"}
  upload     {"bucket", "key", "file", "extra": {...}, "multipart_mib": N}: managed upload
             (multipart above N MiB, parts of N MiB)
  download   {"bucket", "key", "file"}: managed download
  paginate   {"method": "list_objects_v2"|"list_objects", "kwargs": {...}, "page_size": N}
             -> {"keys", "prefixes", "pages", "tokens"}
  presign    {"method", "params", "expires"} -> {"url"}
  seed       {"bucket", "keys": [...], "threads": N}: PUT each key with body = key bytes
  verify     {"bucket", "expected": {key: md5hex}} -> {"checked", "missing", "mismatched"}
  inventory  {"bucket", "prefix"} -> {"objects": [[key, etag, size], ...]}: every object
             listed (ListObjectsV2, pages of 1000)
  snowball   {"bucket", "prefix", "count"}: one PUT of a tar holding `count` objects named
             PREFIX{i%50:02}/{i%7}/obj-{i:06} with body = name, which MinIO extracts
             (x-amz-meta-snowball-auto-extract); only MinIO understands it
  load       {"bucket", "prefix", "count", "threads", "size"}: PUT keys until done or the
             server goes away; prints one line "ACK <key> <md5>" per acknowledged PUT (flushed
             before the next request is sent) and a final JSON line
"""

import base64
import datetime
import hashlib
import io
import json
import sys
import tarfile
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor

import boto3
import botocore
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError


def make_client(endpoint, retries=3, checksums="when_supported"):
    config = Config(
        request_checksum_calculation=checksums,
        region_name="us-east-1",
        signature_version="s3v4",
        s3={"addressing_style": "path"},
        retries={"max_attempts": retries, "mode": "standard"},
        connect_timeout=10,
        read_timeout=120,
        max_pool_connections=32,
    )
    return boto3.client("s3", endpoint_url=endpoint, config=config)


def jsonable(value):
    """Turn a boto3 response into plain JSON (datetimes to ISO strings, bodies to md5/len)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "ResponseMetadata":
                out["HTTPStatusCode"] = v.get("HTTPStatusCode")
                continue
            if k == "Body" and hasattr(v, "read"):
                data = v.read()
                out["Body_len"] = len(data)
                out["Body_md5"] = hashlib.md5(data).hexdigest()
                continue
            out[k] = jsonable(v)
        return out
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def op_call(s3, args):
    method = getattr(s3, args["method"])
    return jsonable(method(**args.get("kwargs", {})))


def op_upload(s3, args):
    mib = args.get("multipart_mib", 8)
    config = TransferConfig(multipart_threshold=mib * 1024 * 1024, multipart_chunksize=mib * 1024 * 1024)
    s3.upload_file(args["file"], args["bucket"], args["key"], ExtraArgs=args.get("extra", {}), Config=config)
    return {"uploaded": args["key"]}


def op_download(s3, args):
    s3.download_file(args["bucket"], args["key"], args["file"])
    return {"downloaded": args["key"]}


def op_paginate(s3, args):
    paginator = s3.get_paginator(args["method"])
    page_size = args.get("page_size")
    config = {"PageSize": page_size} if page_size else {}
    keys, prefixes, tokens, pages = [], [], [], 0
    for page in paginator.paginate(**args.get("kwargs", {}), PaginationConfig=config):
        pages += 1
        keys.extend(obj["Key"] for obj in page.get("Contents", []))
        prefixes.extend(p["Prefix"] for p in page.get("CommonPrefixes", []))
        for name in ("NextContinuationToken", "NextMarker"):
            if page.get(name):
                tokens.append(page[name])
    return {"keys": keys, "prefixes": prefixes, "pages": pages, "tokens": tokens}


def op_presign(s3, args):
    url = s3.generate_presigned_url(args["method"], Params=args["params"], ExpiresIn=args.get("expires", 300))
    return {"url": url}


def op_seed(s3, args):
    bucket = args["bucket"]
    size = args.get("size")

    def put(key):
        # The body is the key, or the key repeated to `size` bytes.
        body = key.encode() if size is None else (key.encode() * (size // len(key) + 1))[:size]
        s3.put_object(Bucket=bucket, Key=key, Body=body)

    with ThreadPoolExecutor(max_workers=args.get("threads", 16)) as pool:
        # list() re-raises the first failure.
        list(pool.map(put, args["keys"]))
    return {"created": len(args["keys"])}


def op_verify(s3, args):
    bucket = args["bucket"]
    missing, mismatched = [], []

    def check(item):
        key, md5 = item
        try:
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as e:
            missing.append([key, e.response.get("Error", {}).get("Code")])
            return
        actual = hashlib.md5(body).hexdigest()
        if actual != md5:
            mismatched.append([key, actual, md5])

    with ThreadPoolExecutor(max_workers=args.get("threads", 16)) as pool:
        list(pool.map(check, args["expected"].items()))
    return {"checked": len(args["expected"]), "missing": missing, "mismatched": mismatched}


def op_inventory(s3, args):
    objects = []
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=args["bucket"], Prefix=args.get("prefix", "")):
        for o in page.get("Contents", []):
            objects.append([o["Key"], o["ETag"], o["Size"]])
    return {"objects": objects}


def snowball_key(prefix, i):
    return "%s%02d/%d/obj-%06d" % (prefix, i % 50, i % 7, i)


def op_snowball(s3, args):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(args["count"]):
            name = snowball_key(args.get("prefix", ""), i)
            body = name.encode()
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    s3.put_object(
        Bucket=args["bucket"],
        Key="snowball.tar",
        Body=buf.getvalue(),
        Metadata={"snowball-auto-extract": "true"},
    )
    return {"created": args["count"]}


def op_load(endpoint, args):
    # No retries: a request that fails because the server died must not be re-sent to the
    # restarted server and acknowledged later.
    # Every other thread sends no checksum, as clients other than the AWS SDKs do: a gateway
    # in front of an upstream commits such a record without waiting for its fsync.
    clients = [make_client(endpoint, retries=1, checksums=c) for c in ("when_supported", "when_required")]
    bucket, prefix, size = args["bucket"], args["prefix"], args.get("size", 1024)
    lock = threading.Lock()
    next_index = [0]
    acked = [0]
    errors = []

    def worker(s3):
        while True:
            with lock:
                if errors or next_index[0] >= args["count"]:
                    return
                index = next_index[0]
                next_index[0] += 1
            key = "%s%06d" % (prefix, index)
            body = (key.encode() * (size // len(key) + 1))[:size]
            try:
                s3.put_object(Bucket=bucket, Key=key, Body=body)
            except Exception as e:  # the server going away is the expected end
                with lock:
                    errors.append(repr(e))
                return
            with lock:
                acked[0] += 1
                sys.stdout.write("ACK %s %s\n" % (key, hashlib.md5(body).hexdigest()))
                sys.stdout.flush()

    threads = [threading.Thread(target=worker, args=(clients[i % 2],)) for i in range(args.get("threads", 8))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"acked": acked[0], "errors": errors[:3]}


OPS = {
    "call": op_call,
    "inventory": op_inventory,
    "snowball": op_snowball,
    "upload": op_upload,
    "download": op_download,
    "paginate": op_paginate,
    "presign": op_presign,
    "seed": op_seed,
    "verify": op_verify,
}


def main(argv):
    if len(argv) != 5 or argv[1] != "--endpoint":
        sys.stderr.write(__doc__)
        return 2
    endpoint, op, raw = argv[2], argv[3], argv[4]
    args = json.loads(raw)
    try:
        if op == "load":
            result = op_load(endpoint, args)
        elif op in OPS:
            result = OPS[op](make_client(endpoint), args)
        else:
            sys.stderr.write("unknown op %r\n" % op)
            return 2
    except ClientError as e:
        error = e.response.get("Error", {})
        print(json.dumps({"error": {
            "Code": error.get("Code"),
            "Message": error.get("Message"),
            "HTTPStatusCode": e.response.get("ResponseMetadata", {}).get("HTTPStatusCode"),
        }}))
        return 3
    except (botocore.exceptions.BotoCoreError, OSError):
        traceback.print_exc()
        return 4
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
