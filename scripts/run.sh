#!/usr/bin/env bash
# Build holt-gateway in release mode and run it on ./holt-data. Extra arguments go to the
# gateway unchanged (see --help, or `holt-gateway --help` for every flag).
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() {
    cat <<'USAGE'
Usage: scripts/run.sh [--help] [GATEWAY FLAGS...]

Builds holt-gateway (release) and runs it in the foreground:
  data dir   ./holt-data (relative to where you run this; --data-dir DIR or HOLT_DATA_DIR to change)
  listen     127.0.0.1:9000 (--listen ADDR or HOLT_LISTEN)
  users      with no --credentials-file / HOLT_CREDENTIALS_FILE / HOLT_ACCESS_KEY+HOLT_SECRET_KEY,
             the development user: access key "holtadmin", secret "holtadmin-secret-key"

Examples:
  scripts/run.sh
  scripts/run.sh --listen 127.0.0.1:9100 --data-dir /var/lib/holt
  HOLT_ACCESS_KEY=me HOLT_SECRET_KEY=long-secret scripts/run.sh --durability sync

Stop with Ctrl-C (SIGINT) or SIGTERM: in-flight requests finish and the engine closes cleanly.
USAGE
}

for arg in "$@"; do
    case "$arg" in
    -h | --help) usage; exit 0 ;;
    esac
done

holt_log "building holt-gateway (release)"
cargo build --release --locked --manifest-path "$HOLT_REPO/Cargo.toml" -p gateway --bin holt-gateway
bin="${CARGO_TARGET_DIR:-$HOLT_REPO/target}/release/holt-gateway"

args=("$@")
has_flag() {
    local flag="$1" a
    for a in "${args[@]}"; do
        case "$a" in "$flag" | "$flag="*) return 0 ;; esac
    done
    return 1
}
if ! has_flag --data-dir && [ -z "${HOLT_DATA_DIR:-}" ] && ! has_flag --config && [ -z "${HOLT_CONFIG:-}" ]; then
    args=(--data-dir ./holt-data "${args[@]}")
fi
if ! has_flag --credentials-file && [ -z "${HOLT_CREDENTIALS_FILE:-}" ] && [ -z "${HOLT_ACCESS_KEY:-}" ] &&
    ! has_flag --config && [ -z "${HOLT_CONFIG:-}" ]; then
    holt_log "no credentials configured: the gateway uses the development user"
    holt_log "  access key: holtadmin    secret key: holtadmin-secret-key"
    holt_log "  (set --credentials-file or HOLT_ACCESS_KEY/HOLT_SECRET_KEY for anything real)"
fi
exec "$bin" "${args[@]}"
