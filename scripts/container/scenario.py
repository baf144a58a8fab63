"""What scripts/container.sh checks through the container's published port, with boto3.

  scenario.py write ENDPOINT BUCKET   multipart upload and listings after aws-cli's writes
  scenario.py verify ENDPOINT BUCKET  every object written before a restart, byte for byte

Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. Exits non-zero with a
message on the first difference.
"""

import hashlib
import sys

import boto3
from botocore.config import Config

# Keys aws-cli writes (scripts/container.sh), and their bodies: the key itself, repeated.
CLI_KEYS = ["top.txt", "logs/2025/c.txt", "logs/2026/a.txt", "logs/2026/b.txt"]
MULTIPART_KEY = "big/multipart.bin"
PART = 5 << 20


def body_of(key):
    return (key + "\n").encode() * 100


def multipart_body():
    return b"".join(hashlib.sha256(str(i).encode()).digest() * 2048 for i in range((2 * PART + 4096) // 65536 + 1))


def client(endpoint):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        config=Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"}))


def check(cond, what):
    if not cond:
        sys.exit(f"scenario: {what}")


def listing(s3, bucket, prefix, delimiter="/"):
    out = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, Delimiter=delimiter)
    keys = [o["Key"] for o in out.get("Contents", [])]
    prefixes = [p["Prefix"] for p in out.get("CommonPrefixes", [])]
    return keys, prefixes


def write(s3, bucket):
    data = multipart_body()
    up = s3.create_multipart_upload(Bucket=bucket, Key=MULTIPART_KEY)
    parts = []
    for number, start in enumerate(range(0, len(data), PART), start=1):
        r = s3.upload_part(Bucket=bucket, Key=MULTIPART_KEY, UploadId=up["UploadId"],
                           PartNumber=number, Body=data[start:start + PART])
        parts.append({"PartNumber": number, "ETag": r["ETag"]})
    check(len(parts) == 3, f"{len(parts)} parts")
    s3.complete_multipart_upload(Bucket=bucket, Key=MULTIPART_KEY, UploadId=up["UploadId"],
                                 MultipartUpload={"Parts": parts})
    check(s3.head_object(Bucket=bucket, Key=MULTIPART_KEY)["ETag"].endswith('-3"'), "multipart ETag")
    verify(s3, bucket)
    print(f"scenario: multipart upload of {len(data)} bytes in 3 parts, listings as expected")


def verify(s3, bucket):
    keys, prefixes = listing(s3, bucket, "")
    check(keys == ["top.txt"] and prefixes == ["big/", "logs/"], f"root listing {keys} {prefixes}")
    keys, prefixes = listing(s3, bucket, "logs/")
    check(keys == [] and prefixes == ["logs/2025/", "logs/2026/"], f"logs/ listing {keys} {prefixes}")
    keys, _ = listing(s3, bucket, "", delimiter="")
    check(keys == sorted(CLI_KEYS + [MULTIPART_KEY]), f"all keys {keys}")
    for key in CLI_KEYS:
        got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        check(got == body_of(key), f"{key}: {len(got)} bytes differ")
    got = s3.get_object(Bucket=bucket, Key=MULTIPART_KEY)["Body"].read()
    check(hashlib.sha256(got).digest() == hashlib.sha256(multipart_body()).digest(), "multipart body differs")
    ranged = s3.get_object(Bucket=bucket, Key=MULTIPART_KEY, Range=f"bytes={PART - 10}-{PART + 9}")["Body"].read()
    check(ranged == multipart_body()[PART - 10:PART + 10], "a range across parts differs")


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("write", "verify"):
        sys.exit(__doc__)
    s3 = client(sys.argv[2])
    if sys.argv[1] == "write":
        write(s3, sys.argv[3])
    else:
        verify(s3, sys.argv[3])
        print(f"scenario: all {len(CLI_KEYS) + 1} objects read back byte for byte")


if __name__ == "__main__":
    main()
