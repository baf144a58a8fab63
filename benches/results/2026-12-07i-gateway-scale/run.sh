#!/usr/bin/env bash
# The gateway-at-scale section of scripts/bench.sh, by hand, into this folder: for each
# size, a fresh gateway (--durability sync, default budget) loaded through PutObject over 64
# connections, then rounds of HeadObject, GetObject and a delimiter page after a random
# object at 64 connections, 8 s each (pool of up to 1M keys).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=$ROOT/benches/target/release
DATA=${DATA:-/tmp/gateway-scale}
RAW=$HERE/raw.jsonl
: > "$RAW"
for size in ${SIZES:-1000000 10000000}; do
    rm -rf "$DATA"; mkdir -p "$DATA"
    "$ROOT/target/release/holt-gateway" --data-dir "$DATA/gw" --listen 127.0.0.1:0 --durability sync \
        > "$DATA/gateway.log" 2>&1 &
    PID=$!
    until grep -q "listening on http://" "$DATA/gateway.log"; do sleep 0.2; done
    ADDR=$(grep -o 'listening on http://[0-9.:]*' "$DATA/gateway.log" | head -1 | sed 's/listening on //')
    row() { sed "/\"objects\":/! s/^{/{\"objects\":$size,/; s/^{/{\"server\":\"holt-gateway\",\"scale\":true,/"; }
    "$BIN/s3load" --endpoint "$ADDR" --bucket bench --op prepare --objects "$size" --connections 64 \
        --server-pid "$PID" --access-key holtadmin --secret-key holtadmin-secret-key | row >> "$RAW"
    pool=$((size < 1000000 ? size : 1000000))
    for rep in 1 2 3; do
        for op in head get list-random; do
            "$BIN/s3load" --endpoint "$ADDR" --bucket bench --op "$op" --connections 64 --duration-s 8 \
                --objects "$size" --pool "$pool" --server-pid "$PID" \
                --access-key holtadmin --secret-key holtadmin-secret-key | row >> "$RAW"
        done
    done
    echo "{\"server\":\"holt-gateway\",\"objects\":$size,\"scale\":true,\"op\":\"disk\",\"bytes\":$(du -s --block-size=1 "$DATA" | cut -f1)}" >> "$RAW"
    kill "$PID"; wait "$PID" || true
    rm -rf "$DATA"
done
