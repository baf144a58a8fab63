#!/usr/bin/env bash
# The upstream-mode section of scripts/bench.sh, by hand, into this folder: MinIO loaded with
# 1M objects directly, the gateway attaching the bucket (import timed from CreateBucket to
# holt_upstream_import_done), the background fill of the imported records' headers timed
# to its log line (WAIT_FILL=0 skips the wait: the points then run during the fill), then
# HEAD, a 1,000-entry delimiter page and PUT against MinIO and through the gateway,
# alternating, at 1 and 64 connections. KEEP=1 keeps MinIO's data for a rerun (REUSE=1).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
OBJECTS=${OBJECTS:-1000000}
SECONDS_PER=${SECONDS_PER:-8}
REPS=${REPS:-3}
BIN=$ROOT/benches/target/release
DATA=${DATA:-/tmp/upstream-1m}
RAW=$HERE/${RAW_NAME:-raw.jsonl}
: > "$RAW"
if [[ ${REUSE:-0} -eq 1 && -d "$DATA/minio" ]]; then rm -rf "$DATA/gateway"
else rm -rf "$DATA"; mkdir -p "$DATA/minio"; fi
PORT=$((20000 + RANDOM % 20000))
MINIO_ROOT_USER=benchadmin MINIO_ROOT_PASSWORD=bench-secret-key MINIO_BROWSER=off \
    "$ROOT/.cache/bin/minio" server "$DATA/minio" --address "127.0.0.1:$PORT" > "$DATA/minio.log" 2>&1 &
MINIO_PID=$!
trap 'kill $MINIO_PID ${GW_PID:-} 2>/dev/null || true' EXIT
until grep -q "API:" "$DATA/minio.log"; do sleep 0.5; done; sleep 1
MINIO_EP="http://127.0.0.1:$PORT"
tag() { sed "s/^{/{\"objects\":$OBJECTS,\"server\":\"$1\",/"; }
if [[ ${REUSE:-0} -ne 1 ]]; then
    t0=$(date +%s)
    "$BIN/s3load" --endpoint "$MINIO_EP" --bucket bench --op prepare --objects "$OBJECTS" \
        --connections 64 --access-key benchadmin --secret-key bench-secret-key | tag minio >> "$RAW"
    echo "loaded MinIO in $(( $(date +%s) - t0 )) s"
fi
"$ROOT/target/release/holt-gateway" --data-dir "$DATA/gateway" --listen 127.0.0.1:0 --durability sync \
    --upstream "$MINIO_EP" --upstream-access-key benchadmin --upstream-secret-key bench-secret-key \
    --upstream-reconcile-secs 0 > "$DATA/gateway.log" 2>&1 &
GW_PID=$!
until grep -q "listening on http://" "$DATA/gateway.log"; do sleep 0.2; done
GW_EP=$(grep -o 'listening on http://[0-9.:]*' "$DATA/gateway.log" | head -1 | sed 's/listening on //')
t0=$(date +%s%N)
"$BIN/s3load" --endpoint "$GW_EP" --bucket bench --op prepare --objects 0 \
    --access-key holtadmin --secret-key holtadmin-secret-key > /dev/null
until curl -s "$GW_EP/metrics" | grep -q '^holt_upstream_import_done{bucket="bench"} 1'; do sleep 0.5; done
ms=$((($(date +%s%N) - t0) / 1000000))
echo "{\"op\":\"import\",\"seconds\":$((ms / 1000)).$(printf %03d $((ms % 1000)))}" | tag holt-gateway >> "$RAW"
echo "imported in $ms ms"
curl -s "$GW_EP/metrics" | grep '^holt_upstream_import' > "$HERE/import-metrics.txt" || true
if [[ ${WAIT_FILL:-1} -eq 1 ]]; then
    until grep -q "imported records' headers fetched" "$DATA/gateway.log"; do sleep 0.5; done
    ms=$((($(date +%s%N) - t0) / 1000000))
    echo "{\"op\":\"import_and_header_fill\",\"seconds\":$((ms / 1000)).$(printf %03d $((ms % 1000)))}" | tag holt-gateway >> "$RAW"
    echo "import and header fill done in $ms ms"
fi
for ((rep = 1; rep <= REPS; rep++)); do
    for op in head list put; do
        case $op in head) pool=100000 ;; *) pool=2000 ;; esac
        for c in 1 64; do
            for target in minio holt-gateway; do
                if [[ $target == minio ]]; then ep=$MINIO_EP; pid=$MINIO_PID; ak=benchadmin; sk=bench-secret-key
                else ep=$GW_EP; pid=$GW_PID; ak=holtadmin; sk=holtadmin-secret-key; fi
                "$BIN/s3load" --endpoint "$ep" --bucket bench --op "$op" --connections "$c" \
                    --duration-s "$SECONDS_PER" --objects "$OBJECTS" --pool "$pool" \
                    --server-pid "$pid" --access-key "$ak" --secret-key "$sk" | tag "$target" >> "$RAW"
            done
        done
    done
done
kill "$GW_PID" "$MINIO_PID" 2>/dev/null || true
wait "$GW_PID" "$MINIO_PID" 2>/dev/null || true
[[ ${KEEP:-0} -eq 1 ]] || rm -rf "$DATA"
