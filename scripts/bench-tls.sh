#!/usr/bin/env bash
# The cost of TLS: HeadObject and GetObject (1 KiB) at 64 keep-alive connections, over HTTPS
# against HTTP on the same gateway process (two listeners), runs alternating, medians of the
# repetitions. MinIO over HTTPS joins the run when a `minio` binary is on PATH or built by
# scripts/bench.sh. Loopback only; prints one JSON line per run and a summary table.
set -euo pipefail
usage() {
    cat <<'EOF'
usage: scripts/bench-tls.sh [--objects N] [--seconds S] [--reps R] [--connections C] [--no-build]
  --objects N      objects loaded (default 100000)
  --seconds S      seconds per run (default 8)
  --reps R         repetitions of each (operation, scheme) pair (default 3)
  --connections C  keep-alive connections (default 64)
  --no-build       use the binaries already built
EOF
}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OBJECTS=100000 SECONDS_PER_RUN=8 REPS=3 CONNECTIONS=64 BUILD=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        --objects) OBJECTS="$2"; shift 2 ;;
        --seconds) SECONDS_PER_RUN="$2"; shift 2 ;;
        --reps) REPS="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done
if [[ $BUILD -eq 1 ]]; then
    (cd "$ROOT" && cargo build --release -p gateway)
    (cd "$ROOT/benches" && cargo build --release --bin s3load)
fi
GW_BIN="$ROOT/target/release/holt-gateway"
LOAD="$ROOT/benches/target/release/s3load"
WORK="$(mktemp -d /tmp/holt-bench-tls.XXXXXX)"
RAW="$WORK/runs.jsonl"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

# A CA and a server certificate for 127.0.0.1, as docs/configuration.md shows.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=bench CA" \
    -keyout "$WORK/ca.key" -out "$WORK/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
    -keyout "$WORK/key.pem" -out "$WORK/req.csr" 2>/dev/null
printf "subjectAltName=DNS:localhost,IP:127.0.0.1\n" > "$WORK/san.ext"
openssl x509 -req -in "$WORK/req.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -CAcreateserial \
    -days 2 -extfile "$WORK/san.ext" -out "$WORK/cert.pem" 2>/dev/null

wait_for() { # file pattern seconds
    for _ in $(seq 1 $((10 * $3))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
    echo "timed out waiting for '$2' in $1" >&2; return 1
}

mkdir -p "$WORK/gw"
HOLT_ACCESS_KEY=benchadmin HOLT_SECRET_KEY=bench-secret-key "$GW_BIN" --data-dir "$WORK/gw" \
    --listen 127.0.0.1:0 --listen-tls 127.0.0.1:0 --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" \
    > "$WORK/gateway.log" 2>&1 &
GW_PID=$!
PIDS+=("$GW_PID")
wait_for "$WORK/gateway.log" "listening on https://" 30
HTTP=$(grep -o 'listening on http://[0-9.:]*' "$WORK/gateway.log" | head -1 | sed 's/listening on //')
HTTPS=$(grep -o 'listening on https://[0-9.:]*' "$WORK/gateway.log" | head -1 | sed 's/listening on //')
KEYS=(--access-key benchadmin --secret-key bench-secret-key)
"$LOAD" --endpoint "$HTTP" --bucket bench --op prepare --connections 16 --objects "$OBJECTS" "${KEYS[@]}" > /dev/null

MINIO_BIN="$(command -v minio || true)"
[[ -z "$MINIO_BIN" && -x "$(go env GOPATH 2>/dev/null)/bin/minio" ]] && MINIO_BIN="$(go env GOPATH)/bin/minio"
MINIO=""
if [[ -n "$MINIO_BIN" ]]; then
    # MinIO serves TLS from public.crt and private.key in its certs directory.
    mkdir -p "$WORK/minio-certs" "$WORK/minio"
    cp "$WORK/cert.pem" "$WORK/minio-certs/public.crt"; cp "$WORK/key.pem" "$WORK/minio-certs/private.key"
    PORT=$((20000 + RANDOM % 20000))
    MINIO_ROOT_USER=benchadmin MINIO_ROOT_PASSWORD=bench-secret-key MINIO_BROWSER=off "$MINIO_BIN" server \
        "$WORK/minio" --certs-dir "$WORK/minio-certs" --address "127.0.0.1:$PORT" \
        --console-address "127.0.0.1:$((PORT + 1))" > "$WORK/minio.log" 2>&1 &
    PIDS+=("$!")
    if wait_for "$WORK/minio.log" "API:" 60; then
        MINIO="https://127.0.0.1:$PORT"
        "$LOAD" --endpoint "$MINIO" --ca "$WORK/ca.pem" --bucket bench --op prepare --connections 16 \
            --objects "$OBJECTS" "${KEYS[@]}" > /dev/null
    fi
else
    echo "MinIO not available: measured without it" >&2
fi

run() { # label endpoint op
    "$LOAD" --endpoint "$2" --ca "$WORK/ca.pem" --bucket bench --op "$3" --connections "$CONNECTIONS" \
        --duration-s "$SECONDS_PER_RUN" --objects "$OBJECTS" --server-pid "$4" "${KEYS[@]}" \
        | python3 -c 'import json,sys; r=json.load(sys.stdin); r.update(server=sys.argv[1], op=sys.argv[2]); print(json.dumps(r))' "$1" "$3" \
        | tee -a "$RAW"
}
for ((rep = 1; rep <= REPS; rep++)); do
    for op in head get; do
        # The order flips every repetition, so neither scheme always runs first.
        if ((rep % 2)); then order=(http https); else order=(https http); fi
        for scheme in "${order[@]}"; do
            if [[ $scheme == http ]]; then run holt-http "$HTTP" "$op" "$GW_PID"; else run holt-https "$HTTPS" "$op" "$GW_PID"; fi
        done
        [[ -n "$MINIO" ]] && run minio-https "$MINIO" "$op" "${PIDS[1]}"
    done
done
python3 - "$RAW" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(server, op, field):
    xs = [r[field] for r in rows if r["server"] == server and r["op"] == op and field in r]
    return statistics.median(xs) if xs else None
print("\n| operation | server | req/s (median) | p50 µs | p99 µs |")
print("|---|---|---|---|---|")
for op in ("head", "get"):
    for server in ("holt-http", "holt-https", "minio-https"):
        rps = med(server, op, "req_per_s")
        if rps is None:
            continue
        print(f"| {op} | {server} | {rps:,.0f} | {med(server, op, 'p50_us'):,.0f} | {med(server, op, 'p99_us'):,.0f} |")
    h, s = med("holt-http", op, "req_per_s"), med("holt-https", op, "req_per_s")
    if h and s:
        print(f"| {op} | https ÷ http | {s / h:.2f} | | |")
PY
