#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer) of the gateway's request parsers: fuzz/fuzz_targets/.
set -uo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() {
    cat <<'USAGE'
Usage: scripts/fuzz.sh [--seconds N] [--target NAME]... [--keep] [--seeds]

Builds the fuzz targets in fuzz/ (libFuzzer through libfuzzer-sys, on the stable toolchain with
the sanitizer-coverage flags cargo-fuzz passes) and runs each for N seconds from its corpus in
fuzz/corpus/<target>. Targets:
  request_head   routing and SigV4 authentication (header and presigned) of a request head
  aws_chunked    aws-chunked bodies: raw, and signed-then-mutated (a signed body must decode
                 to what was signed or be refused)
  xml_bodies     Delete, CompleteMultipartUpload, CreateBucketConfiguration, CORS, Tagging
                 and ACL documents, bucket policies
  headers        Range, copy-source(-range), conditional headers, dates, query strings, keys
  records        the stored-record decoders (object, bucket, upload, part)

A target passes when it ran its time without a crash, a failed assertion, a timeout (10 s per
input) or more than 512 MB in one allocation. A failing input is written to
target/fuzz-artifacts/<target>/ (the run's output to target/fuzz-artifacts/<target>.log);
replay it with
  fuzz/target/x86_64-unknown-linux-gnu/release/<target> <file>

Options:
  --seconds N   run time per target (default 60)
  --target T    run only T (repeatable)
  --keep        replace fuzz/corpus/<target> by the smallest set of its inputs and this
                run's finds that covers every edge they cover
  --seeds       regenerate the seed inputs (fuzz/src/bin/make_seeds.rs) first
  --help        this text

Ends with "N passed, N failed" (one per target).
USAGE
}

seconds=60 keep=0 seeds=0 targets=()
while [ $# -gt 0 ]; do
    case "$1" in
    -h | --help) usage; exit 0 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --target) targets+=("$2"); shift 2 ;;
    --keep) keep=1; shift ;;
    --seeds) seeds=1; shift ;;
    *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done
[ ${#targets[@]} -gt 0 ] || targets=(request_head aws_chunked xml_bodies headers records)
[[ "$seconds" =~ ^[0-9]+$ ]] || holt_die "--seconds must be a number"

cd "$HOLT_REPO/fuzz" || exit 2
triple="$(rustc -vV | sed -n 's/^host: //p')"
if [ "$seeds" -eq 1 ]; then
    cargo run --quiet --locked --target-dir target/seeds --bin make-seeds || holt_die "writing the seeds failed"
fi
# The flags cargo-fuzz passes (without a sanitizer, which needs nightly). An explicit --target
# keeps them off build scripts and proc macros, which are not linked with libFuzzer.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
bins=()
for t in "${targets[@]}"; do bins+=(--bin "$t"); done
holt_log "building ${targets[*]} for $triple"
if ! cargo build --release --locked --target "$triple" "${bins[@]}"; then
    echo "0 passed, ${#targets[@]} failed (build)"
    exit 1
fi

passed=0 failed=0
artifacts="$HOLT_REPO/target/fuzz-artifacts"
for t in "${targets[@]}"; do
    work="$(mktemp -d)"
    mkdir -p "$artifacts/$t" "corpus/$t"
    holt_log "fuzzing $t for ${seconds}s from $(find "corpus/$t" -type f | wc -l) corpus inputs"
    "target/$triple/release/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -malloc_limit_mb=512 -print_final_stats=1 -artifact_prefix="$artifacts/$t/" \
        "$work" "corpus/$t" >"$artifacts/$t.log" 2>&1
    rc=$?
    grep -E '^(stat::|Done )' "$artifacts/$t.log"
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
        holt_log "$t: passed ($(find "$work" -type f | wc -l) new inputs)"
        if [ "$keep" -eq 1 ]; then
            # The smallest set of inputs that covers every edge the old corpus and this run's
            # finds cover (edges only: counters and comparisons would keep thousands).
            minimal="$(mktemp -d)"
            "target/$triple/release/$t" -merge=1 -use_counters=0 -use_cmp=0 -use_value_profile=0 \
                "$minimal" "corpus/$t" "$work" 2>&1 | tail -n 1
            rm -rf "corpus/$t" && mv "$minimal" "corpus/$t" && chmod 755 "corpus/$t"
        fi
    else
        failed=$((failed + 1))
        grep -E -A12 'panicked at|ERROR: libFuzzer|out-of-memory|malloc\(' "$artifacts/$t.log" | head -n 40
        holt_log "$t: FAILED (exit $rc); inputs in $artifacts/$t/, output in $artifacts/$t.log"
        ls -l "$artifacts/$t/" >&2
    fi
    rm -rf "$work"
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
