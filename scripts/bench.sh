#!/usr/bin/env bash
# Side-by-side benchmarks: holt-core against embedded engines (process per engine, medians of
# repetitions, ratios to holt-core) and the gateway against MinIO and a bare axum server.
# Writes benches/RESULTS.md, benches/results/ (raw numbers) and benches/results/headline.png.
# Method and targets: shared PERFORMANCE.md. Everything runs on loopback, bounded in time.
set -euo pipefail

usage() {
    cat <<'USAGE'
usage: scripts/bench.sh [options]

  --keys N          keys in the engine data set (default 1000000; 10000000 for the large run)
  --quick           5x fewer operations per phase, 1 repetition, 1 s per fsync level (CI-sized)
  --reps R          repetitions per engine (default 3; medians are quoted)
  --engines LIST    comma-separated engines (default: all; see below)
  --skip-engines    do not run the engine comparison
  --skip-gateway    do not run the gateway comparison
  --objects N       objects loaded into each S3 server (default 100000)
  --gw-seconds S    seconds per gateway load point (default 8)
  --gw-reps R       repetitions of every gateway load point (default 3; medians are quoted)
  --beyond LIST     key counts of the beyond-memory section (default 10000000; the full run is
                    10000000,100000000: the 100M size takes about an hour). For each size:
                    holt-core, LMDB and RocksDB with a cache budget of 1/8 of holt-core's data
                    (engine_bench phases, one repetition), and point gets side by side
                    (paired_get: cold with the page cache dropped and a 16 MiB budget, and
                    with the files in the page cache and a budget of 1/8 of the data), and
                    async overwrites with the checkpoint after beside RocksDB's (paired_get
                    --op overwrite, the same warm regime)
  --skip-beyond     do not run the beyond-memory section
  --upstream-objects N  objects in MinIO for the upstream-mode section (default 1000000): MinIO
                    loaded directly, the gateway started with --upstream in front of it and
                    the bucket attached (import time measured), then head, list (1,000-entry
                    delimiter pages), get and put against MinIO and through the gateway
  --skip-upstream   do not run the upstream-mode section
  --gw-scale LIST   object counts of the gateway-at-scale section (default: not run; the
                    issue's run is 1000000,10000000). For each size: a fresh gateway with its
                    default 1 GiB budget is loaded through PutObject (timed), then HeadObject,
                    GetObject and a 1,000-entry delimiter page after a random object
                    (`list-random`) over up to 1,000,000 random objects of the whole set, at
                    64 connections, --gw-reps times; peak RSS and bytes on disk recorded
  --no-build        use the binaries already built
  -h, --help        this text

engines: holt-core (durable, async log), holt-core-mem (in memory, reads only), btreemap
         (std BTreeMap, in memory, reads only), holt-0.9.2,
         lmdb, redb, rocksdb, sqlite, fjall
Builds run under `nice -n 19` so they only take idle CPU.
USAGE
}

ORIG_ARGS="$*"
KEYS=1000000
QUICK=0
REPS=3
ENGINES="holt-core,holt-core-mem,btreemap,holt-0.9.2,lmdb,redb,rocksdb,sqlite,fjall"
RUN_ENGINES=1
RUN_GATEWAY=1
OBJECTS=100000
GW_SECONDS=8
GW_REPS=3
BUILD=1
BEYOND="10000000"
RUN_BEYOND=1
UPSTREAM_OBJECTS=1000000
RUN_UPSTREAM=1
GW_SCALE=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --keys) KEYS="$2"; shift 2 ;;
        --quick) QUICK=1; REPS=1; shift ;;
        --reps) REPS="$2"; shift 2 ;;
        --engines) ENGINES="$2"; shift 2 ;;
        --skip-engines) RUN_ENGINES=0; shift ;;
        --skip-gateway) RUN_GATEWAY=0; shift ;;
        --objects) OBJECTS="$2"; shift 2 ;;
        --gw-seconds) GW_SECONDS="$2"; shift 2 ;;
        --gw-reps) GW_REPS="$2"; shift 2 ;;
        --beyond) BEYOND="$2"; shift 2 ;;
        --skip-beyond) RUN_BEYOND=0; shift ;;
        --upstream-objects) UPSTREAM_OBJECTS="$2"; shift 2 ;;
        --skip-upstream) RUN_UPSTREAM=0; shift ;;
        --gw-scale) GW_SCALE="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCHES="$ROOT/benches"
OUT="$BENCHES/results"
RUN_DIR="$BENCHES/target/bench-run"
DATA_DIR="${TMPDIR:-/tmp}/holt-bench-data"
mkdir -p "$OUT" "$RUN_DIR"
log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# --- system packages: RocksDB from Debian (the bundled C++ build takes ~25 min), and libclang
# for the crate's generated bindings.
need_pkgs=()
dpkg -s librocksdb-dev >/dev/null 2>&1 || need_pkgs+=(librocksdb-dev)
dpkg -s libclang-dev >/dev/null 2>&1 || need_pkgs+=(libclang-dev)
if [[ ${#need_pkgs[@]} -gt 0 ]]; then
    log "installing ${need_pkgs[*]}"
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${need_pkgs[@]}"
fi

if [[ $BUILD -eq 1 ]]; then
    log "building benches (release)"
    (cd "$BENCHES" && nice -n 19 cargo build --release --bins)
fi
BIN="$BENCHES/target/release"

# --- engine comparison ------------------------------------------------------------------
ENGINE_CMD="$BIN/bench_driver --keys $KEYS --reps $REPS --engines $ENGINES --out $RUN_DIR/engines --data-dir $DATA_DIR"
[[ $QUICK -eq 1 ]] && ENGINE_CMD+=" --quick"
if [[ $RUN_ENGINES -eq 0 ]]; then
    ENGINE_CMD="(not run by this invocation: the engine figures in benches/results are from an earlier run, see the notes)"
else
    rm -rf "$RUN_DIR/engines"
    log "engine comparison: $ENGINE_CMD"
    $ENGINE_CMD
    cp "$RUN_DIR/engines/raw.jsonl" "$OUT/engines-raw.jsonl"
    cp "$RUN_DIR/engines/tables.md" "$OUT/engines-tables.md"
    cp "$RUN_DIR/engines/headline.csv" "$OUT/engines-headline.csv"
fi

# --- listings side by side: holt-core and LMDB in one process, in alternating rounds, so a
# slow spell of this machine falls on both (benches/src/bin/paired_list.rs) ------------------
PAIRED_CMD="(not run by this invocation)"
if [[ $RUN_ENGINES -eq 1 && ",$ENGINES," == *",holt-core,"* && ",$ENGINES," == *",lmdb,"* ]]; then
    PAIRED_CMD="$BIN/paired_list --keys $KEYS --engines holt-core,lmdb --dir $DATA_DIR/paired"
    [[ $QUICK -eq 1 ]] && PAIRED_CMD+=" --quick"
    : > "$RUN_DIR/paired.jsonl"
    for ((rep = 1; rep <= REPS; rep++)); do
        log "paired listings, run $rep of $REPS: $PAIRED_CMD"
        $PAIRED_CMD | sed "s/^{/{\"run\":$rep,/" >> "$RUN_DIR/paired.jsonl"
    done
    cp "$RUN_DIR/paired.jsonl" "$OUT/paired-list-raw.jsonl"
fi

# --- usage: keys and bytes under a prefix of KEYS keys, holt-core's Db::usage against
# counting them with a scan in holt-core and in LMDB (benches/src/bin/usage_bench.rs) -------
if [[ $RUN_ENGINES -eq 1 && ",$ENGINES," == *",holt-core,"* && ",$ENGINES," == *",lmdb,"* ]]; then
    USAGE_CMD="$BIN/usage_bench --keys $KEYS --reps $((REPS < 3 ? 3 : REPS)) --dir $DATA_DIR/usage"
    log "usage against a scan: $USAGE_CMD"
    $USAGE_CMD > "$OUT/usage.json" || log "usage_bench failed"
fi

# --- beyond memory: metadata larger than the cache budget ---------------------------------
# Bytes of holt-core's data per key measured at 1M (148 MB on disk): the budget for 1/8 of it.
BEYOND_CMDS=()
if [[ $RUN_BEYOND -eq 1 ]]; then
    IFS=',' read -r -a beyond_sizes <<< "$BEYOND"
    for size in "${beyond_sizes[@]}"; do
        budget_mb=$(( size * 148 / 8 / 1000000 ))
        dir="$RUN_DIR/beyond-$size"
        rm -rf "$dir"
        cmd="$BIN/bench_driver --keys $size --reps 1 --engines holt-core,lmdb,rocksdb --cache-mb $budget_mb --out $dir --data-dir $DATA_DIR/beyond --timeout-s 7200"
        BEYOND_CMDS+=("$cmd")
        log "beyond memory, $size keys: $cmd"
        $cmd || echo "- bench_driver at $size keys failed" >> "$RUN_DIR/beyond-notes.md"
        cp "$dir/raw.jsonl" "$OUT/beyond-$size-engines-raw.jsonl" 2>/dev/null || true
        cp "$dir/tables.md" "$OUT/beyond-$size-engines-tables.md" 2>/dev/null || true
        for peer in lmdb rocksdb; do
            cmd="$BIN/paired_get --keys $size --engines holt-core,$peer --pairs 3 --dir $DATA_DIR/paired-get-$size"
            BEYOND_CMDS+=("$cmd")
            log "beyond memory, paired gets: $cmd"
            $cmd > "$OUT/beyond-$size-paired-get-$peer.jsonl" ||
                echo "- paired_get holt-core,$peer at $size keys failed" >> "$RUN_DIR/beyond-notes.md"
        done
        # Async overwrites with the checkpoint (flush) after, RocksDB beside: the databases
        # the gets used, changed by it (the last paired run here). Twelve rounds cover a cycle
        # of holt-core's delta chains (the round that rewrites full chains whole with the
        # rest): read `mean_over_rounds_us`, not the median round.
        cmd="$BIN/paired_get --keys $size --engines holt-core,rocksdb --pairs 12 --gets 100000 --op overwrite --reuse --dir $DATA_DIR/paired-get-$size"
        BEYOND_CMDS+=("$cmd")
        log "beyond memory, paired overwrites: $cmd"
        $cmd > "$OUT/beyond-$size-paired-overwrite-rocksdb.jsonl" ||
            echo "- paired_get --op overwrite at $size keys failed" >> "$RUN_DIR/beyond-notes.md"
        rm -rf "$DATA_DIR/beyond" "$DATA_DIR/paired-get-$size"
    done
fi

# MinIO, the pinned build scripts/install-clients.sh makes (the compat suite's), else go install.
MINIO_BIN="$ROOT/.cache/bin/minio"
if [[ ! -x "$MINIO_BIN" ]] && command -v go >/dev/null && [[ $RUN_GATEWAY -eq 1 || $RUN_UPSTREAM -eq 1 ]]; then
    log "building MinIO (scripts/install-clients.sh)"
    nice -n 19 "$ROOT/scripts/install-clients.sh" >&2 || log "MinIO did not build"
fi

# --- gateway comparison -----------------------------------------------------------------
# Each server is started on a free loopback port, loaded with the same objects through the S3
# API, then measured at 1/16/64 connections per operation; it is stopped afterwards.
GW_RAW="$RUN_DIR/gateway.jsonl"
GW_NOTES="$RUN_DIR/gateway-notes.md"
: > "$GW_NOTES"

wait_for_line() { # file pattern seconds
    local i
    for ((i = 0; i < $3 * 10; i++)); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# Labels s3load's JSON rows with the server and the data set's size.
tag_rows() { # server
    sed "/\"objects\":/! s/^{/{\"objects\":$OBJECTS,/; s/^{/{\"server\":\"$1\",/"
}

load_server() { # name endpoint pid access secret
    local name=$1 endpoint=$2 pid=$3 ak=$4 sk=$5
    log "$name: loading $OBJECTS objects"
    "$BIN/s3load" --endpoint "$endpoint" --bucket bench --op prepare --objects "$OBJECTS" --connections 64 \
        --access-key "$ak" --secret-key "$sk" | tag_rows "$name" >> "$GW_RAW"
    local rep pool
    # Reads replay pre-signed requests for this many random objects (the working set); writes
    # replay 2,000 new keys, lists 2,000 pages.
    local read_pool=$((OBJECTS < 100000 ? OBJECTS : 100000))
    for ((rep = 1; rep <= GW_REPS; rep++)); do
        for op in head list get put mixed; do
            case $op in head | get | mixed) pool=$read_pool ;; *) pool=2000 ;; esac
            for c in 1 16 64; do
                "$BIN/s3load" --endpoint "$endpoint" --bucket bench --op "$op" --connections "$c" \
                    --duration-s "$GW_SECONDS" --objects "$OBJECTS" --pool "$pool" --server-pid "$pid" \
                    --access-key "$ak" --secret-key "$sk" | tag_rows "$name" >> "$GW_RAW" \
                    || echo "- $name $op x$c (repetition $rep): s3load failed" >> "$GW_NOTES"
            done
        done
    done
}

stop_pid() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

if [[ $RUN_GATEWAY -eq 1 ]]; then
    : > "$GW_RAW"
    # holt-gateway
    GW_BIN="$ROOT/target/release/holt-gateway"
    if [[ $BUILD -eq 1 ]]; then
        (cd "$ROOT" && nice -n 19 cargo build --release -p gateway) || echo "- holt-gateway did not build" >> "$GW_NOTES"
    fi
    if [[ -x "$GW_BIN" ]]; then
        rm -rf "$DATA_DIR/gateway"; mkdir -p "$DATA_DIR/gateway"
        "$GW_BIN" --data-dir "$DATA_DIR/gateway" --listen 127.0.0.1:0 --durability sync \
            > "$RUN_DIR/gateway.log" 2>&1 &
        GW_PID=$!
        if wait_for_line "$RUN_DIR/gateway.log" "listening on http://" 30; then
            ADDR=$(grep -o 'listening on http://[0-9.:]*' "$RUN_DIR/gateway.log" | head -1 | sed 's/listening on //')
            load_server holt-gateway "$ADDR" "$GW_PID" holtadmin holtadmin-secret-key \
                || echo "- holt-gateway: load run failed" >> "$GW_NOTES"
        else
            echo "- holt-gateway did not start (see benches/target/bench-run/gateway.log)" >> "$GW_NOTES"
        fi
        stop_pid "$GW_PID"
    else
        echo "- holt-gateway binary not available: gateway not measured" >> "$GW_NOTES"
    fi

    if [[ -x "$MINIO_BIN" ]]; then
        rm -rf "$DATA_DIR/minio"; mkdir -p "$DATA_DIR/minio"
        PORT=$((20000 + RANDOM % 20000))
        MINIO_ROOT_USER=benchadmin MINIO_ROOT_PASSWORD=bench-secret-key MINIO_BROWSER=off \
            "$MINIO_BIN" server "$DATA_DIR/minio" --address "127.0.0.1:$PORT" --console-address "127.0.0.1:$((PORT + 1))" \
            > "$RUN_DIR/minio.log" 2>&1 &
        MINIO_PID=$!
        if wait_for_line "$RUN_DIR/minio.log" "API:" 60; then
            sleep 1
            load_server minio "http://127.0.0.1:$PORT" "$MINIO_PID" benchadmin bench-secret-key \
                || echo "- minio: load run failed" >> "$GW_NOTES"
        else
            echo "- MinIO did not start (see benches/target/bench-run/minio.log)" >> "$GW_NOTES"
        fi
        stop_pid "$MINIO_PID"
    else
        echo "- MinIO not available: not measured" >> "$GW_NOTES"
    fi

    # The bare axum ceiling, answering each operation with the gateway's mean response size.
    for op in head list get; do
        BYTES=$(python3 - "$GW_RAW" "$op" <<'PY'
import json, sys
sizes = [r.get("mean_response_bytes", 0) for r in map(json.loads, open(sys.argv[1]))
         if r.get("server") == "holt-gateway" and r.get("op") == sys.argv[2]]
print(int(max(sizes)) if sizes else {"list": 150000, "get": 1024}.get(sys.argv[2], 0))
PY
)
        "$BIN/bare_axum" --listen 127.0.0.1:0 --body-bytes "$BYTES" > "$RUN_DIR/axum.log" 2>&1 &
        AX_PID=$!
        if wait_for_line "$RUN_DIR/axum.log" "listening on http://" 10; then
            ADDR=$(grep -o 'http://[0-9.:]*' "$RUN_DIR/axum.log" | head -1)
            for ((rep = 1; rep <= GW_REPS; rep++)); do
                for c in 1 16 64; do
                    "$BIN/s3load" --endpoint "$ADDR" --bucket bench --op "$op" --connections "$c" \
                        --duration-s "$GW_SECONDS" --server-pid "$AX_PID" \
                        | tag_rows bare-axum | sed "s/^{/{\"body_bytes\":$BYTES,/" >> "$GW_RAW" || true
                done
            done
        fi
        stop_pid "$AX_PID"
    done
    # One file holds every data set's rows: this run's replace the rows of its size only.
    python3 - "$OUT/gateway-raw.jsonl" "$GW_RAW" "$OBJECTS" <<'PY'
import json, os, sys
kept = []
if os.path.exists(sys.argv[1]):
    kept = [l for l in open(sys.argv[1]) if l.strip() and json.loads(l).get("objects") != int(sys.argv[3])]
with open(sys.argv[1], "w") as f:
    f.writelines(kept + [l for l in open(sys.argv[2]) if l.strip()])
PY
    if [[ -s "$GW_NOTES" ]]; then
        cp "$GW_NOTES" "$OUT/gateway-failures-$OBJECTS.md"
    else
        rm -f "$OUT/gateway-failures-$OBJECTS.md"
    fi
fi

# --- the gateway at scale: its own figures at each size, same client, same pool size --------
if [[ -n "$GW_SCALE" ]]; then
    GW_BIN="$ROOT/target/release/holt-gateway"
    if [[ $BUILD -eq 1 ]]; then
        (cd "$ROOT" && nice -n 19 cargo build --release -p gateway) || log "holt-gateway did not build"
    fi
    SCALE_RAW="$RUN_DIR/gateway-scale.jsonl"
    : > "$SCALE_RAW"
    IFS=',' read -r -a scale_sizes <<< "$GW_SCALE"
    for size in "${scale_sizes[@]}"; do
        rm -rf "$DATA_DIR/gateway-scale"; mkdir -p "$DATA_DIR/gateway-scale"
        "$GW_BIN" --data-dir "$DATA_DIR/gateway-scale" --listen 127.0.0.1:0 --durability sync \
            > "$RUN_DIR/gateway-scale.log" 2>&1 &
        SC_PID=$!
        if ! wait_for_line "$RUN_DIR/gateway-scale.log" "listening on http://" 30; then
            log "holt-gateway did not start at $size objects (see $RUN_DIR/gateway-scale.log)"
            stop_pid "$SC_PID"
            continue
        fi
        ADDR=$(grep -o 'listening on http://[0-9.:]*' "$RUN_DIR/gateway-scale.log" | head -1 | sed 's/listening on //')
        scale_row() { sed "/\"objects\":/! s/^{/{\"objects\":$size,/; s/^{/{\"server\":\"holt-gateway\",\"scale\":true,/"; }
        log "gateway at scale: loading $size objects"
        "$BIN/s3load" --endpoint "$ADDR" --bucket bench --op prepare --objects "$size" --connections 64 \
            --server-pid "$SC_PID" --access-key holtadmin --secret-key holtadmin-secret-key | scale_row >> "$SCALE_RAW"
        pool=$((size < 1000000 ? size : 1000000))
        for ((rep = 1; rep <= GW_REPS; rep++)); do
            for op in head get list-random; do
                "$BIN/s3load" --endpoint "$ADDR" --bucket bench --op "$op" --connections 64 \
                    --duration-s "$GW_SECONDS" --objects "$size" --pool "$pool" --server-pid "$SC_PID" \
                    --access-key holtadmin --secret-key holtadmin-secret-key | scale_row >> "$SCALE_RAW" \
                    || log "gateway at scale: $op at $size objects failed"
            done
        done
        disk=$(du -s --block-size=1 "$DATA_DIR/gateway-scale" | cut -f1)
        echo "{\"server\":\"holt-gateway\",\"objects\":$size,\"scale\":true,\"op\":\"disk\",\"bytes\":$disk}" >> "$SCALE_RAW"
        stop_pid "$SC_PID"
        rm -rf "$DATA_DIR/gateway-scale"
    done
    cp "$SCALE_RAW" "$OUT/gateway-scale-raw.jsonl"
fi

# --- upstream mode: the gateway in front of MinIO ------------------------------------------
# MinIO is loaded directly; the gateway attaches the bucket (the import is timed from
# CreateBucket to holt_upstream_import_done), then each operation runs against MinIO and
# through the gateway in turn, same keys, same pool.
if [[ $RUN_UPSTREAM -eq 1 ]]; then
    UP_RAW="$RUN_DIR/upstream.jsonl"
    UP_NOTES="$RUN_DIR/upstream-notes.md"
    : > "$UP_RAW"; : > "$UP_NOTES"
    GW_BIN="$ROOT/target/release/holt-gateway"
    if [[ $BUILD -eq 1 ]]; then
        (cd "$ROOT" && nice -n 19 cargo build --release -p gateway) || echo "- holt-gateway did not build" >> "$UP_NOTES"
    fi
    if [[ -x "$MINIO_BIN" && -x "$GW_BIN" ]]; then
        tag_up() { sed "s/^{/{\"objects\":$UPSTREAM_OBJECTS,\"server\":\"$1\",/"; }
        rm -rf "$DATA_DIR/upstream"; mkdir -p "$DATA_DIR/upstream/minio"
        PORT=$((20000 + RANDOM % 20000))
        MINIO_ROOT_USER=benchadmin MINIO_ROOT_PASSWORD=bench-secret-key MINIO_BROWSER=off \
            "$MINIO_BIN" server "$DATA_DIR/upstream/minio" --address "127.0.0.1:$PORT" \
            > "$RUN_DIR/upstream-minio.log" 2>&1 &
        MINIO_PID=$!
        if wait_for_line "$RUN_DIR/upstream-minio.log" "API:" 60; then
            sleep 1
            MINIO_EP="http://127.0.0.1:$PORT"
            log "upstream: loading $UPSTREAM_OBJECTS objects into MinIO"
            "$BIN/s3load" --endpoint "$MINIO_EP" --bucket bench --op prepare --objects "$UPSTREAM_OBJECTS" \
                --connections 64 --access-key benchadmin --secret-key bench-secret-key | tag_up minio >> "$UP_RAW"
            "$GW_BIN" --data-dir "$DATA_DIR/upstream/gateway" --listen 127.0.0.1:0 --durability sync \
                --upstream "$MINIO_EP" --upstream-access-key benchadmin --upstream-secret-key bench-secret-key \
                --upstream-reconcile-secs 0 > "$RUN_DIR/upstream-gateway.log" 2>&1 &
            GW_PID=$!
            if wait_for_line "$RUN_DIR/upstream-gateway.log" "listening on http://" 30; then
                GW_EP=$(grep -o 'listening on http://[0-9.:]*' "$RUN_DIR/upstream-gateway.log" | head -1 | sed 's/listening on //')
                t0=$(date +%s%N)
                "$BIN/s3load" --endpoint "$GW_EP" --bucket bench --op prepare --objects 0 \
                    --access-key holtadmin --secret-key holtadmin-secret-key > /dev/null
                for ((i = 0; i < 7200; i++)); do
                    curl -s "$GW_EP/metrics" | grep -q '^holt_upstream_import_done{bucket="bench"} 1' && break
                    sleep 0.5
                done
                # Seconds since t0, as a row `op` of the raw file and a log line.
                since_attach() { # op what
                    local ms=$((($(date +%s%N) - t0) / 1000000))
                    local secs; secs=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
                    echo "{\"op\":\"$1\",\"seconds\":$secs}" | tag_up holt-gateway >> "$UP_RAW"
                    log "upstream: $2 in $secs s"
                }
                since_attach import "imported"
                # The points wait for the background fill of the imported records' headers
                # (a HEAD upstream per object): until it ends, a HEAD through the gateway of a
                # record not filled yet goes upstream, and the fill's requests load both servers.
                wait_for_line "$RUN_DIR/upstream-gateway.log" "imported records' headers fetched" 7200 \
                    || echo "- the header fill did not end within 2 hours" >> "$UP_NOTES"
                since_attach import_and_header_fill "imported and headers filled"
                read_pool=$((UPSTREAM_OBJECTS < 100000 ? UPSTREAM_OBJECTS : 100000))
                for ((rep = 1; rep <= GW_REPS; rep++)); do
                    for op in head list get put; do
                        case $op in head | get) pool=$read_pool ;; *) pool=2000 ;; esac
                        for c in 1 16 64; do
                            for target in minio holt-gateway; do
                                if [[ $target == minio ]]; then
                                    ep=$MINIO_EP; pid=$MINIO_PID; ak=benchadmin; sk=bench-secret-key
                                else
                                    ep=$GW_EP; pid=$GW_PID; ak=holtadmin; sk=holtadmin-secret-key
                                fi
                                "$BIN/s3load" --endpoint "$ep" --bucket bench --op "$op" --connections "$c" \
                                    --duration-s "$GW_SECONDS" --objects "$UPSTREAM_OBJECTS" --pool "$pool" \
                                    --server-pid "$pid" --access-key "$ak" --secret-key "$sk" | tag_up "$target" >> "$UP_RAW" \
                                    || echo "- upstream $target $op x$c (repetition $rep): s3load failed" >> "$UP_NOTES"
                            done
                        done
                    done
                done
            else
                echo "- the gateway did not start in front of MinIO (benches/target/bench-run/upstream-gateway.log)" >> "$UP_NOTES"
            fi
            stop_pid "$GW_PID"
        else
            echo "- MinIO did not start (benches/target/bench-run/upstream-minio.log)" >> "$UP_NOTES"
        fi
        stop_pid "$MINIO_PID"
        rm -rf "$DATA_DIR/upstream"
    else
        echo "- MinIO or the gateway binary not available: upstream mode not measured" >> "$UP_NOTES"
    fi
    cp "$UP_RAW" "$OUT/upstream-raw.jsonl"
    cp "$UP_NOTES" "$OUT/upstream-notes.md"
fi

# --- report -----------------------------------------------------------------------------
VENV="$ROOT/.cache/bench-venv"
if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV" && "$VENV/bin/pip" install -q 'matplotlib==3.10.*' \
        || log "matplotlib unavailable: no chart"
fi
PY="$VENV/bin/python"; [[ -x "$PY" ]] || PY=python3
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
# This run's own outputs (benches/results, RESULTS.md) do not count as uncommitted changes.
DIRTY=$(git -C "$ROOT" status --porcelain -- . ':(exclude)benches/results' ':(exclude)benches/RESULTS.md' 2>/dev/null \
    | grep -qv '^??' && echo " (with uncommitted changes)" || true)
"$PY" "$BENCHES/report.py" \
    --results "$OUT" \
    --out "$BENCHES/RESULTS.md" \
    --chart "$OUT/headline.png" \
    --commit "$COMMIT$DIRTY" \
    --engine-command "$ENGINE_CMD" \
    --paired-command "$PAIRED_CMD ($REPS runs)" \
    --script-command "scripts/bench.sh${ORIG_ARGS:+ $ORIG_ARGS}" \
    --machine "$(nproc) cores; $(free -h | awk '/^Mem:/ {print $2 " RAM"}'); kernel $(uname -r); $(date -u '+%Y-%m-%d %H:%M UTC')"
log "wrote benches/RESULTS.md"
