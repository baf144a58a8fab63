# shellcheck shell=bash
# Shared helpers for the scripts in scripts/. Source it; it defines functions and variables only.
#
# Variables it sets:
#   HOLT_REPO        the repository root (the directory holding the workspace Cargo.toml)
#   HOLT_CACHE_DIR   where installed clients live (default: $HOLT_REPO/.cache, gitignored)

HOLT_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HOLT_CACHE_DIR="${HOLT_CACHE_DIR:-$HOLT_REPO/.cache}"
export HOLT_REPO HOLT_CACHE_DIR

# Log to stderr with a timestamp so interleaved phases stay readable in CI output.
holt_log() {
    printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2
}

holt_die() {
    holt_log "error: $*"
    exit 1
}

# Run a command as root: directly when we are root (CI, fresh machines), through non-interactive
# sudo otherwise. Never prompts: CI has no stdin.
holt_as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo -n "$@"
    else
        return 1
    fi
}

# The client binaries the compat suite and load.sh use. The environment wins so a user can point
# at their own installs; otherwise the cache written by install-clients.sh is used.
holt_export_client_env() {
    export HOLT_PYTHON="${HOLT_PYTHON:-$HOLT_CACHE_DIR/venv/bin/python}"
    export HOLT_AWS="${HOLT_AWS:-$HOLT_CACHE_DIR/venv/bin/aws}"
    export HOLT_S3CMD="${HOLT_S3CMD:-$HOLT_CACHE_DIR/venv/bin/s3cmd}"
    export HOLT_MC="${HOLT_MC:-$HOLT_CACHE_DIR/bin/mc}"
    export HOLT_K6="${HOLT_K6:-$HOLT_CACHE_DIR/bin/k6}"
    export HOLT_MINIO="${HOLT_MINIO:-$HOLT_CACHE_DIR/bin/minio}"
    if [ -z "${HOLT_RCLONE:-}" ]; then
        HOLT_RCLONE="$(command -v rclone || echo "$HOLT_CACHE_DIR/bin/rclone")"
    fi
    export HOLT_RCLONE
    export HOLT_CURL="${HOLT_CURL:-$(command -v curl || echo curl)}"
}
