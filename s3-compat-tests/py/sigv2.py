#!/usr/bin/env python3
"""boto3 with Signature Version 2, for the compat suite's SigV2 scenarios.

Usage: sigv2.py --endpoint URL OP 'JSON-ARGS'

Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. Prints one JSON document.

Operations:
  presign  {"method", "params", "expires"}: a presigned URL from a client built with boto3's
           defaults (no signature_version), as a new user writes it -> {"url"}
  session  {"bucket"}: with signature_version "s3" (botocore's SigV2 header signer), a
           sequence of calls that exercise the string to sign: put with metadata and a
           content type, head, get with a response-content-type override, copy, a
           delimiter listing, a multipart upload, tagging-free deletes -> {"steps": [...]}
"""

import hashlib
import json
import sys

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError


def client(endpoint, **config):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1}, **config),
    )


def presign(endpoint, args):
    s3 = client(endpoint)
    url = s3.generate_presigned_url(args["method"], Params=args["params"], ExpiresIn=args.get("expires", 600))
    return {"url": url}


def session(endpoint, args):
    s3 = client(endpoint, signature_version="s3", s3={"addressing_style": "path"})
    bucket = args["bucket"]
    steps = []

    def step(name, fn):
        try:
            steps.append({"step": name, "result": fn()})
        except ClientError as e:
            steps.append({"step": name, "error": e.response["Error"].get("Code")})

    body = b"signed with version 2\n" * 64
    step("create_bucket", lambda: s3.create_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"])
    step("put_object", lambda: s3.put_object(
        Bucket=bucket, Key="dir/a b+c.txt", Body=body, ContentType="text/plain",
        Metadata={"owner": "sigv2"})["ETag"])
    step("head_object", lambda: s3.head_object(Bucket=bucket, Key="dir/a b+c.txt")["Metadata"])
    step("get_object", lambda: hashlib.md5(s3.get_object(
        Bucket=bucket, Key="dir/a b+c.txt", ResponseContentType="application/x-test")["Body"].read()).hexdigest())
    step("get_content_type", lambda: s3.get_object(
        Bucket=bucket, Key="dir/a b+c.txt", ResponseContentType="application/x-test")["ContentType"])
    step("copy_object", lambda: s3.copy_object(
        Bucket=bucket, Key="dir/copy.txt", CopySource={"Bucket": bucket, "Key": "dir/a b+c.txt"})
        ["CopyObjectResult"]["ETag"])
    step("list", lambda: [p["Prefix"] for p in s3.list_objects_v2(
        Bucket=bucket, Delimiter="/").get("CommonPrefixes", [])])
    step("list_dir", lambda: [o["Key"] for o in s3.list_objects_v2(
        Bucket=bucket, Prefix="dir/").get("Contents", [])])

    def multipart():
        up = s3.create_multipart_upload(Bucket=bucket, Key="big.bin")
        part = s3.upload_part(Bucket=bucket, Key="big.bin", UploadId=up["UploadId"], PartNumber=1, Body=body)
        done = s3.complete_multipart_upload(
            Bucket=bucket, Key="big.bin", UploadId=up["UploadId"],
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
        return done["ETag"]

    step("multipart", multipart)
    step("delete_objects", lambda: len(s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "dir/copy.txt"}, {"Key": "big.bin"}]})["Deleted"]))
    step("delete_object", lambda: s3.delete_object(
        Bucket=bucket, Key="dir/a b+c.txt")["ResponseMetadata"]["HTTPStatusCode"])
    return {"steps": steps, "body_md5": hashlib.md5(body).hexdigest()}


def main():
    if len(sys.argv) != 5 or sys.argv[1] != "--endpoint":
        sys.exit(__doc__)
    endpoint, op, args = sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    ops = {"presign": presign, "session": session}
    if op not in ops:
        sys.exit(f"unknown op {op}")
    print(json.dumps(ops[op](endpoint, args)))


if __name__ == "__main__":
    main()
