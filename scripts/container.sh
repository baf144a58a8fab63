#!/usr/bin/env bash
# Builds the container image from docker/Dockerfile and runs docker/compose.yaml with podman and
# podman-compose, then checks the deployment through its published port with aws-cli and boto3.
# Ends with "container: N passed, N failed". See --help.
set -uo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() {
    cat <<'USAGE'
Usage: scripts/container.sh [--keep] [--help]

1. Base images. docker/Dockerfile takes its base images as build arguments (BUILDER_IMAGE,
   RUNTIME_IMAGE; the defaults are the public rust and debian images). Where no image registry
   is reachable, this script makes local ones: a Debian bookworm minbase made by debootstrap
   from the apt mirror this machine uses (cached as a tar in $HOLT_CACHE_DIR/container), and a
   builder image holding it plus gcc, this machine's Rust toolchain and its CA bundle (for
   cargo's downloads from crates.io).
   HOLT_PUBLIC_BASES=1 builds from the public images instead.
2. podman build of docker/Dockerfile (the release binary is compiled inside the builder stage).
3. podman-compose up -d with docker/compose.yaml on a free port, the health check run until it
   passes, then: bucket, puts and a delimiter listing with aws-cli; a multipart upload, listings
   and ranged reads with boto3 (scripts/container/scenario.py).
4. compose down and up again: every object is read back from the named volume.
5. The gateway runs as the image's non-root user.
6. docker/compose.tls.yaml layered on: HTTPS with a fresh certificate for localhost, checked
   with curl and aws-cli trusting it.
7. podman stop (SIGTERM) ends the gateway with exit 0 and "engine closed" in its log.
8. compose down -v (unless --keep). Prints the image size and each step's time.

Needs root, podman, podman-compose, runc and debootstrap (scripts/install-clients.sh installs
them), and the client venv (aws-cli, boto3).
USAGE
}

keep=0
for arg in "$@"; do
    case "$arg" in
    --keep) keep=1 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "unknown option: $arg" >&2; usage >&2; exit 2 ;;
    esac
done

cd "$HOLT_REPO" || exit 2
holt_export_client_env

passed=0
failed=0
ok() { passed=$((passed + 1)); holt_log "ok: $*"; }
fail() { failed=$((failed + 1)); holt_log "FAILED: $*"; }
finish() {
    echo "container: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit $?
}
step_started=$(date +%s)
timed() {
    local now
    now=$(date +%s)
    holt_log "step took $((now - step_started)) s: $*"
    step_started=$now
}

for tool in podman podman-compose runc debootstrap; do
    command -v "$tool" >/dev/null || { fail "$tool is not installed (scripts/install-clients.sh)"; finish; }
done
[ "$(id -u)" -eq 0 ] || { fail "podman here runs as root (rootless needs subuid set-up)"; finish; }

# The default OCI runtime (crun) fails on this kind of machine (hybrid cgroups), and the
# default ulimits are not permitted: a config of our own, not the machine's /etc.
export CONTAINERS_CONF="$HOLT_REPO/scripts/container/containers.conf"

CACHE="$HOLT_CACHE_DIR/container"
mkdir -p "$CACHE"
BASE=localhost/holt-debian:bookworm
BUILDER=localhost/holt-rust-builder:bookworm
IMAGE=localhost/holt-gateway:latest

# The Debian mirror apt uses here (debootstrap must reach the same one).
debian_mirror() {
    local uri
    uri=$(grep -rhoE '(URIs:|^deb)[[:space:]]+[^[:space:]]+' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
        awk '{print $2}' | grep -E '/debian/?$' | head -n 1)
    echo "${uri:-http://deb.debian.org/debian}"
}

if [ "${HOLT_PUBLIC_BASES:-0}" = 1 ]; then
    build_args=()
else
    if ! podman image exists "$BASE"; then
        tarball="$CACHE/debian-bookworm-minbase-v2.tar"
        if [ ! -s "$tarball" ]; then
            root=$(mktemp -d)
            holt_log "debootstrap bookworm minbase from $(debian_mirror)"
            if ! debootstrap --variant=minbase bookworm "$root" "$(debian_mirror)" >"$CACHE/debootstrap.log" 2>&1; then
                tail -n 20 "$CACHE/debootstrap.log" >&2
                rm -rf "$root"
                fail "debootstrap"
                finish
            fi
            # What the public slim image leaves out too: package caches, docs, manuals, locales.
            rm -rf "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
                "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
            tar -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
            rm -rf "$root"
        fi
        podman import --quiet "$tarball" "$BASE" >/dev/null || { fail "podman import of the base"; finish; }
    fi
    if ! podman image exists "$BUILDER"; then
        ctx=$(mktemp -d)
        sysroot=$(rustc --print sysroot)
        mkdir -p "$ctx/toolchain"
        cp -a "$sysroot/bin" "$sysroot/lib" "$ctx/toolchain/"
        cp /etc/ssl/certs/ca-certificates.crt "$ctx/"
        if ! podman build --quiet --network host --build-arg "BASE=$BASE" -t "$BUILDER" \
            -f scripts/container/builder.Containerfile "$ctx" >/dev/null; then
            rm -rf "$ctx"
            fail "builder image"
            finish
        fi
        rm -rf "$ctx"
    fi
    build_args=(--build-arg "BUILDER_IMAGE=$BUILDER" --build-arg "RUNTIME_IMAGE=$BASE")
fi
timed "base images"

# The image, with the cargo registry and target dir in build cache mounts (kept by podman
# between builds on this machine).
if podman build --network host "${build_args[@]}" -t "$IMAGE" -f docker/Dockerfile \
    --ignorefile docker/Dockerfile.dockerignore . >"$CACHE/build.log" 2>&1; then
    size=$(podman image inspect "$IMAGE" --format '{{.Size}}')
    ok "image built: $((size / 1024 / 1024)) MiB"
else
    tail -n 30 "$CACHE/build.log" >&2
    fail "podman build (log: $CACHE/build.log)"
    finish
fi
timed "podman build"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export HOLT_PORT=$port HOLT_ACCESS_KEY=compose-access HOLT_SECRET_KEY=compose-secret-key-for-ci
export AWS_ACCESS_KEY_ID=$HOLT_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$HOLT_SECRET_KEY AWS_DEFAULT_REGION=us-east-1
export AWS_CONFIG_FILE=/nonexistent AWS_SHARED_CREDENTIALS_FILE=/nonexistent AWS_EC2_METADATA_DISABLED=true
endpoint="http://127.0.0.1:$port"
# podman-compose 1.0 takes the project name from the directory, not the file's `name:`.
compose=(podman-compose -p holt -f docker/compose.yaml)
bucket=compose-test

container_name() { podman ps -a --format '{{.Names}}' | grep -m 1 'holt_gateway'; }

# Runs the image's health check until it passes (podman runs no timer for it without systemd).
wait_healthy() {
    local name
    for _ in $(seq 1 60); do
        name=$(container_name)
        if [ -n "$name" ] && podman healthcheck run "$name" >/dev/null 2>&1; then
            return 0
        fi
        sleep 1
    done
    return 1
}

up() {
    if "${compose[@]}" up -d --no-build >"$CACHE/compose.log" 2>&1 && wait_healthy; then
        ok "compose up, health check passing ($1)"
    else
        tail -n 20 "$CACHE/compose.log" >&2
        podman logs "$(container_name)" 2>&1 | tail -n 20 >&2
        fail "compose up ($1)"
        "${compose[@]}" down -v >/dev/null 2>&1
        finish
    fi
}

# compose down, checked: it must succeed and leave no gateway container behind, or the next
# `up` would find the old container running and the restart checks would prove nothing.
down() {
    if ! "${compose[@]}" down "$@" >"$CACHE/compose-down.log" 2>&1 || [ -n "$(container_name)" ]; then
        tail -n 20 "$CACHE/compose-down.log" >&2
        fail "compose down $* (container left: '$(container_name)')"
        finish
    fi
}

"${compose[@]}" down -v >/dev/null 2>&1
up "first start"
timed "compose up"

aws=("$HOLT_AWS" --endpoint-url "$endpoint")
scratch=$(mktemp -d)
cli_ok=1
"${aws[@]}" s3 mb "s3://$bucket" >/dev/null || cli_ok=0
for key in top.txt logs/2025/c.txt logs/2026/a.txt logs/2026/b.txt; do
    python3 -c 'import sys; sys.stdout.write((sys.argv[1] + "\n") * 100)' "$key" >"$scratch/body"
    "${aws[@]}" s3 cp "$scratch/body" "s3://$bucket/$key" >/dev/null || cli_ok=0
done
listed=$("${aws[@]}" s3api list-objects-v2 --bucket "$bucket" --delimiter / \
    --query '[Contents[].Key, CommonPrefixes[].Prefix]' --output text 2>&1)
[ "$(echo "$listed" | tr -s '[:space:]' ' ' | sed 's/ $//')" = "top.txt logs/" ] || cli_ok=0
"${aws[@]}" s3 cp "s3://$bucket/logs/2026/a.txt" "$scratch/back" >/dev/null || cli_ok=0
python3 -c 'import sys; sys.stdout.write((sys.argv[1] + "\n") * 100)' logs/2026/a.txt | cmp -s - "$scratch/back" || cli_ok=0
rm -rf "$scratch"
if [ "$cli_ok" = 1 ]; then ok "aws-cli: bucket, puts, delimiter listing ($listed), get"; else fail "aws-cli scenario (listing: $listed)"; fi

if "$HOLT_PYTHON" scripts/container/scenario.py write "$endpoint" "$bucket"; then
    ok "boto3: multipart upload, listings, ranged read"
else
    fail "boto3 scenario"
fi
timed "scenario"

name=$(container_name)
uid=$(podman exec "$name" sh -c 'id -u; id -un' 2>&1 | tr '\n' ' ')
if [ "$uid" = "10001 holt " ]; then ok "the gateway runs as $uid"; else fail "the gateway runs as '$uid', not 10001 holt"; fi
pid1_uid=$(podman top "$name" user 2>/dev/null | tail -n +2 | sort -u | tr '\n' ' ')
if [ "$pid1_uid" = "holt " ]; then ok "every process in the container runs as holt"; else fail "processes run as: $pid1_uid"; fi

first_id=$(podman inspect "$(container_name)" --format '{{.Id}}')
down
up "after compose down (the named volume kept)"
if [ "$(podman inspect "$(container_name)" --format '{{.Id}}')" = "$first_id" ]; then
    fail "compose down and up kept the same container"
fi
if "$HOLT_PYTHON" scripts/container/scenario.py verify "$endpoint" "$bucket"; then
    ok "every object read back after compose down and up"
else
    fail "objects after compose down and up"
fi
timed "restart"

# HTTPS through docker/compose.tls.yaml: a certificate for localhost in a host directory,
# mounted read-only; curl and aws-cli trust it as their CA.
tls_dir=$(mktemp -d)
chmod 755 "$tls_dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout "$tls_dir/key.pem" -out "$tls_dir/cert.pem" 2>/dev/null
chmod 644 "$tls_dir/key.pem" "$tls_dir/cert.pem"
tls_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export HOLT_TLS_DIR=$tls_dir HOLT_TLS_PORT=$tls_port
down
compose=(podman-compose -p holt -f docker/compose.yaml -f docker/compose.tls.yaml)
up "with docker/compose.tls.yaml"
https_list=$("$HOLT_AWS" --endpoint-url "https://localhost:$tls_port" --ca-bundle "$tls_dir/cert.pem" \
    s3 ls "s3://$bucket/logs/" 2>&1 | tr -s '[:space:]' ' ')
health=$(curl -sS --cacert "$tls_dir/cert.pem" "https://localhost:$tls_port/health" 2>&1)
if [ "$health" = ok ] && [ "$https_list" = " PRE 2025/ PRE 2026/ " ]; then
    ok "HTTPS on the published TLS port: /health, aws-cli listing"
else
    fail "HTTPS: health '$health', listing '$https_list'"
fi
timed "https"

name=$(container_name)
podman stop -t 50 "$name" >/dev/null 2>&1
code=$(podman inspect "$name" --format '{{.State.ExitCode}}')
# The log is read whole first: `grep -q` stops at the first match, and under pipefail the
# writer's SIGPIPE would fail the pipeline even when the line is there.
stop_log=$(podman logs "$name" 2>&1)
if [ "$code" = 0 ] && grep -q 'engine closed' <<<"$stop_log"; then
    ok "SIGTERM: exit 0, engine closed"
else
    tail -n 10 <<<"$stop_log" >&2
    fail "SIGTERM: exit code $code"
fi
timed "stop"

if [ "$keep" -eq 0 ]; then
    "${compose[@]}" down -v >/dev/null 2>&1
fi
rm -rf "$tls_dir"
finish
