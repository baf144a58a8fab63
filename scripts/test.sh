#!/usr/bin/env bash
# The one test command: installs what the tests need, then runs every phase at its CI size and
# ends with the line `N passed, N failed` (summed over all phases). Exits non-zero if anything
# failed. See --help.
set -uo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() {
    cat <<'USAGE'
Usage: scripts/test.sh [--quick] [--help]

Runs, in order, each phase at its CI size:
  install      scripts/install-clients.sh (aws-cli, boto3, s3cmd, mc, k6, minio, rclone, curl,
               xfsprogs, chromium)
  fmt          cargo fmt --all -- --check
  clippy       cargo clippy --workspace --all-targets --locked -- -D warnings
  doc          cargo doc --no-deps --workspace --locked with RUSTDOCFLAGS=-D warnings (the
               crates also deny undocumented public items through clippy)
  test         cargo test --workspace --locked (unit, integration, property; PROPTEST_CASES=256)
  failpoints   cargo test -p holt-core --features failpoints --test failpoint_steps
               (named failpoints at every durability step; the feature is off in 'test'),
               merge_checkpoint_deadlock, image_walk_merge, load_write_race and
               list_restart_merge (races forced at named points)
  loom         RUSTFLAGS="--cfg loom" cargo test -p holt-core --release --test 'loom_*'
               (LOOM_MAX_PREEMPTIONS=3, own target dir target/loom, a release profile
               without LTO or debug info so the build stays short, with overflow checks;
               only if loom tests exist)
  fuzz         scripts/fuzz.sh --seconds 45 (libFuzzer, five targets over the gateway's
               request parsers, 45 s each from fuzz/corpus)
  crash-soak   scripts/crash-soak.sh 200   (SIGKILL rounds; if the script exists)
  power-cut    scripts/power-cut.sh 200    (loop-mounted XFS rounds; if the script exists; under
               CI=true a round that cannot run fails the phase)
  compat       cargo test -p s3-compat-tests (real clients against a real holt-gateway;
               tests/upstream_minio.rs puts it in front of MinIO, one node and two)
  compat-upstream  the client scenarios again with HOLT_COMPAT_UPSTREAM=minio: every gateway
               in front of its own MinIO (--upstream)
  container    scripts/container.sh (docker/Dockerfile built with podman from local base
               images, docker/compose.yaml run with podman-compose, aws-cli and boto3
               through the published port, restart on the named volume, SIGTERM)

Options:
  --quick   fmt, clippy, doc and cargo tests only (no client install, loom, soaks, compat
            or container)
  --help    this text

Environment:
  HOLT_CACHE_DIR   where clients are installed (default .cache/)
  PROPTEST_CASES   property test cases (default 256)
  HOLT_TEST_LOGS   where each phase's full output goes (default target/test-logs)

The last line is "N passed, N failed"; the exit code is 0 only if nothing failed.
USAGE
}

quick=0
for arg in "$@"; do
    case "$arg" in
    --quick) quick=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "unknown option: $arg" >&2; usage >&2; exit 2 ;;
    esac
done

cd "$HOLT_REPO" || exit 2
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export PROPTEST_CASES="${PROPTEST_CASES:-256}"
export DEBIAN_FRONTEND=noninteractive
LOG_DIR="${HOLT_TEST_LOGS:-$HOLT_REPO/target/test-logs}"
mkdir -p "$LOG_DIR"

total_passed=0
total_failed=0
summary_lines=()
run_started_s=$(date +%s)

# Count cargo's "test result: ok. X passed; Y failed; ..." lines in a log.
cargo_counts() {
    awk '/^test result: /{
            for (i = 1; i <= NF; i++) {
                if ($(i) ~ /^passed/) p += $(i - 1);
                if ($(i) ~ /^failed/) f += $(i - 1);
            }
         }
         END { printf "%d %d\n", p, f }' "$1"
}

# Count the last plain "N passed, N failed" line a script printed.
plain_counts() {
    grep -E '^([A-Za-z-]+: )?[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1 |
        sed -E 's/^([A-Za-z-]+: )?([0-9]+) passed, ([0-9]+) failed.*/\2 \3/'
}

# run_phase NAME KIND TIMEOUT_S COMMAND...
#   KIND: cargo  -> count cargo test results
#         check  -> one check: 1 passed or 1 failed by exit code
#         plain  -> count the script's "N passed, N failed" line
# A phase that exits non-zero but reported no failure still counts one failure, so a build
# error or a crash can never look green.
run_phase() {
    local name="$1" kind="$2" timeout_s="$3"
    shift 3
    local log="$LOG_DIR/$name.log"
    local started_s rc passed failed
    started_s=$(date +%s)
    holt_log "phase $name: $*"
    timeout --kill-after=30 "$timeout_s" "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    case "$kind" in
    cargo) read -r passed failed < <(cargo_counts "$log") ;;
    plain) read -r passed failed < <(plain_counts "$log" || echo "0 0") ;;
    check) if [ "$rc" -eq 0 ]; then passed=1 failed=0; else passed=0 failed=1; fi ;;
    esac
    passed=${passed:-0}
    failed=${failed:-0}
    if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
        failed=1
    fi
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        holt_log "phase $name: killed after its ${timeout_s}s limit"
    fi
    total_passed=$((total_passed + passed))
    total_failed=$((total_failed + failed))
    summary_lines+=("$(printf '%-12s %5d passed %5d failed  exit %3d  %5ds' "$name" "$passed" "$failed" "$rc" $(($(date +%s) - started_s)))")
}

skip_phase() {
    summary_lines+=("$(printf '%-12s skipped: %s' "$1" "$2")")
    holt_log "phase $1 skipped: $2"
}

# rustfmt and clippy ship with rustup's default profile; add them if this toolchain lacks them.
ensure_rust_components() {
    if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
        rustup component add rustfmt clippy
    fi
}

if [ "$quick" -eq 0 ]; then
    run_phase install check 1800 scripts/install-clients.sh
fi
ensure_rust_components >/dev/null 2>&1 || holt_log "could not add rustfmt/clippy with rustup"

run_phase fmt check 300 cargo fmt --all -- --check
run_phase clippy check 1800 cargo clippy --workspace --all-targets --locked -- -D warnings
run_phase doc check 900 env RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --locked
# The compat suite needs the clients and a built gateway: it runs in its own phase below.
run_phase test cargo 2400 cargo test --workspace --locked --no-fail-fast --exclude s3-compat-tests
# The `failpoints` feature compiles the `fail` crate's hooks into every durability step, so it
# is a separate build of holt-core (same target dir: only holt-core itself is rebuilt).
# merge_checkpoint_deadlock also runs in the plain test phase; with failpoints it pauses some
# batches between latching and the write gate, which makes the old lock-order deadlock certain.
# image_walk_merge runs a merge inside a point read's image walk, load_write_race and
# load_lead_race a write inside a frame load, list_restart_merge a merge under a listing,
# merge_lead_race listings before and between merges, latch_parents_retry a merge between a
# batch's attempts (failpoint-only), emptied_frames_full_size listings before the merges of
# bulk deletes at the production frame size (plain phase too, without those listings),
# checkpoint_recapture a checkpoint started while the one before it is paused after its lock,
# image_state_race a write between a batch's owner search and its latches, wal_panics a panic in
# the log's flusher and in a writer holding unpublished log bytes.
run_phase failpoints cargo 900 cargo test -p holt-core --locked --no-fail-fast --features failpoints \
    --test failpoint_steps --test merge_checkpoint_deadlock --test image_walk_merge --test load_write_race \
    --test load_lead_race --test list_restart_merge --test merge_lead_race --test latch_parents_retry \
    --test emptied_frames_full_size --test checkpoint_recapture --test image_state_race --test wal_panics

if [ "$quick" -eq 0 ]; then
    if compgen -G "holt-core/tests/loom_*.rs" >/dev/null; then
        # The models need optimized code, not LTO or debug info: dropping those from this
        # phase's own build (it has its own target dir) shortens the build by minutes.
        # Overflow checks stay on: arithmetic on a stale position (a head loaded before other
        # threads moved it) panics in some interleaving instead of wrapping silently.
        run_phase loom cargo 1800 env RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 \
            CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_DEBUG=0 \
            CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true \
            cargo test -p holt-core --release --locked --no-fail-fast --target-dir target/loom --test 'loom_*'
    else
        skip_phase loom "no holt-core/tests/loom_*.rs"
    fi
    # libFuzzer over the request parsers, from the corpus kept in fuzz/corpus (own workspace
    # and target dir fuzz/target; the build is instrumented, so it is not shared).
    run_phase fuzz plain 1200 scripts/fuzz.sh --seconds 45
    if [ -x scripts/crash-soak.sh ]; then
        run_phase crash-soak plain 1200 scripts/crash-soak.sh 200
    else
        skip_phase crash-soak "scripts/crash-soak.sh not present"
    fi
    if [ -x scripts/power-cut.sh ]; then
        run_phase power-cut plain 900 scripts/power-cut.sh 200
    else
        skip_phase power-cut "scripts/power-cut.sh not present"
    fi
    holt_export_client_env
    run_phase compat-build check 1200 cargo build --locked -p gateway --bin holt-gateway
    run_phase compat cargo 1800 cargo test --locked --no-fail-fast -p s3-compat-tests
    # The client scenarios again, each gateway in front of its own MinIO. Not the attack test
    # (it measures the gateway's own admission control) nor upstream_minio (already run).
    upstream_tests=()
    for t in aws_cli boto3 mc rclone s3cmd k6 tagging acl persistence sigv2 https browser_cors browser_console; do
        upstream_tests+=(--test "$t")
    done
    run_phase compat-upstream cargo 1800 env HOLT_COMPAT_UPSTREAM=minio \
        cargo test --locked --no-fail-fast -p s3-compat-tests "${upstream_tests[@]}"
    run_phase container plain 1800 scripts/container.sh
else
    skip_phase compat "--quick"
    skip_phase compat-upstream "--quick"
    skip_phase container "--quick"
fi

holt_log "phase summary (logs in $LOG_DIR), total $(($(date +%s) - run_started_s)) s:"
for line in "${summary_lines[@]}"; do
    echo "  $line"
done
echo "$total_passed passed, $total_failed failed"
[ "$total_failed" -eq 0 ]
