#!/usr/bin/env bash
# Install the S3 clients the compat suite drives, into a cache directory, idempotently.
#
#   Python venv   $CACHE/venv      awscli (v1), boto3, s3cmd, selenium  (PyPI, pinned)
#   Go binaries   $CACHE/bin       mc, k6, minio              (Go module proxy, pinned, go install)
#   Debian apt    system           rclone, curl, xfsprogs     (apt-get, only when missing)
#                                  podman, podman-compose, runc, debootstrap (the container phase)
#                                  chromium, chromium-driver (browser tests; .debs kept in $CACHE)
#
# A second run with a warm cache only checks stamp files and finishes in about a second.
# CACHE is $HOLT_CACHE_DIR, default .cache/ in the repository (gitignored).
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() {
    cat <<USAGE
Usage: scripts/install-clients.sh [--help]

Installs the S3 clients used by the compat tests and scripts/load.sh into \$HOLT_CACHE_DIR
(default: .cache/ in the repository). Safe to re-run: cached pieces are skipped.

  venv ($HOLT_CACHE_DIR/venv): awscli, boto3, s3cmd, selenium pinned from PyPI
  bin  ($HOLT_CACHE_DIR/bin):  mc, k6 and minio built with 'go install' from the Go module proxy
  apt:                         rclone, curl, xfsprogs (needs root or passwordless sudo);
                               podman, podman-compose, runc, debootstrap (with their
                               recommended packages: podman's networking comes with them);
                               chromium and chromium-driver, their packages kept in
                               \$HOLT_CACHE_DIR/apt-archives

Environment:
  HOLT_CACHE_DIR     cache directory
  HOLT_PYTHON_BASE   interpreter used to create the venv (default: python3)
  HOLT_SKIP_APT=1    do not call apt-get (missing apt packages become an error at test time)
USAGE
}

case "${1:-}" in
-h | --help) usage; exit 0 ;;
"") ;;
*) usage >&2; exit 2 ;;
esac

# Pinned versions. awscli 1.X pins botocore; boto3 must pin the same botocore, so these three move
# together (awscli 1.46.2 <-> botocore 1.44.5 <-> boto3 1.44.5). aws-cli >= 1.37 and boto3 >= 1.36
# are the versions that send CRC32 checksums and aws-chunked bodies by default.
# selenium drives Debian's headless Chromium (through its chromedriver) in the browser tests.
PY_PINS="awscli==1.46.2 boto3==1.44.5 botocore==1.44.5 s3cmd==2.4.0 selenium==4.50.0"
# mc publishes RELEASE.* tags that are not semver; the module proxy serves this commit as a
# pseudo-version (the last mc commit the proxy resolves as latest; builds with Go >= 1.23).
MC_MODULE="github.com/minio/mc@v0.0.0-20250313080218-cf909e1063a9"
K6_MODULE="go.k6.io/k6@v1.8.1"
# The MinIO server the upstream-mode scenarios put the gateway in front of (also a pseudo-version:
# MinIO's RELEASE.* tags are not semver). About 3 minutes to build on a cold Go cache.
MINIO_MODULE="github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c"
APT_PACKAGES="rclone curl xfsprogs"

mkdir -p "$HOLT_CACHE_DIR/bin"
# Two test runs starting at once must not build into the same venv concurrently.
exec 9>"$HOLT_CACHE_DIR/.install.lock"
flock 9

started_s=$(date +%s)

install_python_clients() {
    local venv="$HOLT_CACHE_DIR/venv"
    local stamp="$venv/.holt-pins"
    # The entry points must run too: a venv restored at another path keeps scripts whose
    # interpreter line names the old one.
    if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$PY_PINS" ] \
        && "$venv/bin/aws" --version >/dev/null 2>&1 && "$venv/bin/s3cmd" --version >/dev/null 2>&1; then
        holt_log "python clients: cached ($PY_PINS)"
        return
    fi
    holt_log "python clients: installing $PY_PINS"
    local base="${HOLT_PYTHON_BASE:-python3}"
    rm -rf "$venv"
    "$base" -m venv "$venv"
    # shellcheck disable=SC2086 # PY_PINS is a word list on purpose.
    "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --quiet $PY_PINS
    "$venv/bin/aws" --version >&2
    "$venv/bin/s3cmd" --version >&2
    printf '%s' "$PY_PINS" >"$stamp"
}

go_install_pinned() {
    local name="$1" module="$2"
    local stamp="$HOLT_CACHE_DIR/bin/.$name.module"
    if [ -x "$HOLT_CACHE_DIR/bin/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$module" ]; then
        holt_log "$name: cached ($module)"
        return
    fi
    command -v go >/dev/null || holt_die "go is required to build $name (install Go >= 1.23)"
    holt_log "$name: go install $module (takes a few minutes on a cold Go cache)"
    # Static binaries, no C toolchain needed; GOBIN puts them straight into the cache.
    GOBIN="$HOLT_CACHE_DIR/bin" CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install "$module"
    printf '%s' "$module" >"$stamp"
}

install_apt_packages() {
    local missing=()
    command -v rclone >/dev/null || missing+=(rclone)
    command -v curl >/dev/null || missing+=(curl)
    command -v xfs_io >/dev/null || missing+=(xfsprogs)
    if [ ${#missing[@]} -eq 0 ]; then
        holt_log "apt packages: present ($APT_PACKAGES)"
        return
    fi
    if [ "${HOLT_SKIP_APT:-0}" = 1 ]; then
        holt_log "apt packages: missing ${missing[*]} (HOLT_SKIP_APT=1, not installing)"
        return
    fi
    holt_log "apt packages: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    holt_as_root apt-get update -qq ||
        holt_die "apt-get update failed; install ${missing[*]} yourself (needs root or passwordless sudo)"
    holt_as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
        holt_die "apt-get install ${missing[*]} failed"
}

# scripts/container.sh: podman with runc (crun fails on this kind of machine), compose files
# through podman-compose, and debootstrap for a local Debian base image.
install_container_tools() {
    local missing=()
    for tool in podman podman-compose runc debootstrap; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        holt_log "container tools: present"
        return
    fi
    if [ "${HOLT_SKIP_APT:-0}" = 1 ]; then
        holt_log "container tools: missing ${missing[*]} (HOLT_SKIP_APT=1, not installing)"
        return
    fi
    holt_log "container tools: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    holt_as_root apt-get update -qq || holt_die "apt-get update failed"
    holt_as_root apt-get install -y -qq "${missing[@]}" >/dev/null ||
        holt_die "apt-get install ${missing[*]} failed"
}

# The browser tests: Debian's Chromium and its chromedriver. The packages apt fetches are kept
# in the cache (about 100 MB), so that a fresh machine with the cache restored installs them
# without downloading.
install_browser() {
    if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
        holt_log "chromium: present ($(chromium --version 2>/dev/null | head -n 1))"
        return
    fi
    if [ "${HOLT_SKIP_APT:-0}" = 1 ]; then
        holt_log "chromium: missing (HOLT_SKIP_APT=1, not installing)"
        return
    fi
    local archives="$HOLT_CACHE_DIR/apt-archives"
    mkdir -p "$archives/partial"
    holt_log "chromium: installing (packages cached in $archives)"
    export DEBIAN_FRONTEND=noninteractive
    local apt=(apt-get -y -qq --no-install-recommends -o "Dir::Cache::archives=$archives")
    # Straight from the cache when it holds every package; `update` only when it does not.
    if ! holt_as_root "${apt[@]}" install chromium chromium-driver >/dev/null 2>&1; then
        holt_as_root apt-get update -qq || holt_die "apt-get update failed"
        holt_as_root "${apt[@]}" install chromium chromium-driver >/dev/null ||
            holt_die "apt-get install chromium chromium-driver failed"
    fi
}

install_apt_packages
install_container_tools
install_browser
install_python_clients
go_install_pinned mc "$MC_MODULE"
go_install_pinned k6 "$K6_MODULE"
go_install_pinned minio "$MINIO_MODULE"

holt_log "clients ready in $HOLT_CACHE_DIR ($(($(date +%s) - started_s)) s)"
