#!/usr/bin/env bash
# SIGKILL crash soak of the real engine: a child process writes with sync durability from
# several threads and reports every acknowledgement over a pipe; the parent kills it with
# SIGKILL after a random 5-300 ms, reopens the database and checks the crash oracle
# (holt-core/examples/crash_soak.rs). Each write also overwrites or deletes an earlier key;
# the 2 MiB cache budget leaves most of them in evicted frames. Ends with what the rounds
# exercised (writes recorded in evicted frames, frames checkpointed whole and as deltas)
# and a plain "N passed, N failed" line.
#
# Usage: scripts/crash-soak.sh [ROUNDS] [SEED]     (200 rounds in CI; thousands on demand)
set -euo pipefail
case "${1:-}" in
-h | --help)
    # The header comment above is the help text.
    sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
    exit 0
    ;;
esac
ROUNDS="${1:-200}"
SEED="${2:-$(date +%s%N)}"
cd "$(dirname "$0")/.."
cargo build --release --locked -p holt-core --example crash_soak
DIR="$(mktemp -d "${TMPDIR:-/tmp}/holt-crash-soak.XXXXXX")"
trap 'rm -rf "$DIR"' EXIT
echo "crash-soak: seed $SEED (rerun: scripts/crash-soak.sh $ROUNDS $SEED)"
exec target/release/examples/crash_soak parent "$DIR/db" "$ROUNDS" "$SEED"
