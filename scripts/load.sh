#!/usr/bin/env bash
# k6 load scenarios against a RUNNING gateway on this machine (loopback only).
set -euo pipefail

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() {
    cat <<'USAGE'
Usage: scripts/load.sh [--scenario NAME] [--vus N] [--duration D] [--max-iterations N]
                       [--endpoint URL] [--access-key K] [--secret-key S] [--bucket B]

Drives a running holt-gateway (start one with scripts/run.sh) with k6 and prints k6's summary
(per-request latency percentiles, throughput, errors). Scenarios (s3-compat-tests/k6/load.js):
  head    HeadObject of a 1 KiB object
  list    ListObjectsV2 with delimiter: a full 1000-entry page of common prefixes
  get     GetObject of a 1 KiB object (bytes checked)
  put     PutObject of a fresh 1 KiB object
  mixed   50% head, 20% get, 20% put, 10% list   (default)
  all     each of the above in turn

Defaults: --vus 16 --duration 30s --max-iterations 1000000, endpoint http://127.0.0.1:9000,
the development credentials (holtadmin / holtadmin-secret-key), bucket holt-load.
Bounds: at most 256 VUs and 10 minutes per scenario; the endpoint must be a loopback address.
Needs k6: scripts/install-clients.sh installs it into .cache/bin.
USAGE
}

scenario=mixed vus=16 duration=30s max_iterations=1000000
endpoint="${S3_ENDPOINT:-http://127.0.0.1:9000}"
access_key="${HOLT_ACCESS_KEY:-holtadmin}"
secret_key="${HOLT_SECRET_KEY:-holtadmin-secret-key}"
bucket=holt-load
while [ $# -gt 0 ]; do
    case "$1" in
    -h | --help) usage; exit 0 ;;
    --scenario) scenario="$2"; shift 2 ;;
    --vus) vus="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --max-iterations) max_iterations="$2"; shift 2 ;;
    --endpoint) endpoint="$2"; shift 2 ;;
    --access-key) access_key="$2"; shift 2 ;;
    --secret-key) secret_key="$2"; shift 2 ;;
    --bucket) bucket="$2"; shift 2 ;;
    *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done

# Loopback only: this machine's gateway, never anything else on the network.
host="$(printf '%s' "$endpoint" | sed -E 's#^https?://##; s#/.*$##; s#:[0-9]+$##')"
case "$host" in
127.* | localhost | "[::1]") ;;
*) holt_die "endpoint $endpoint is not a loopback address (127.0.0.0/8, localhost, [::1])" ;;
esac
if ! [[ "$vus" =~ ^[0-9]+$ ]] || [ "$vus" -lt 1 ] || [ "$vus" -gt 256 ]; then
    holt_die "--vus must be 1..256"
fi
if ! [[ "$max_iterations" =~ ^[0-9]+$ ]] || [ "$max_iterations" -lt 1 ]; then
    holt_die "--max-iterations must be >= 1"
fi
[[ "$duration" =~ ^([0-9]+)(s|m)$ ]] || holt_die "--duration must look like 30s or 5m"
duration_s=${BASH_REMATCH[1]}
[ "${BASH_REMATCH[2]}" = m ] && duration_s=$((duration_s * 60))
[ "$duration_s" -le 600 ] || holt_die "--duration is capped at 10m"

holt_export_client_env
[ -x "$HOLT_K6" ] || holt_die "k6 not found at $HOLT_K6: run scripts/install-clients.sh"
curl -fsS -o /dev/null "$endpoint/health" || holt_die "no gateway answering $endpoint/health (start it with scripts/run.sh)"

case "$scenario" in
all) scenarios=(head list get put mixed) ;;
head | list | get | put | mixed) scenarios=("$scenario") ;;
*) holt_die "unknown scenario $scenario" ;;
esac

status=0
for s in "${scenarios[@]}"; do
    holt_log "k6 scenario $s: $vus VUs, at most $duration and $max_iterations iterations against $endpoint"
    # k6 stops by itself at maxDuration; the outer timeout is a second fence.
    timeout --kill-after=10 $((duration_s + 360)) "$HOLT_K6" run --no-usage-report \
        -e S3_ENDPOINT="$endpoint" -e S3_ACCESS_KEY="$access_key" -e S3_SECRET_KEY="$secret_key" \
        -e S3_REGION="${HOLT_REGION:-us-east-1}" -e BUCKET="$bucket" -e SCENARIO="$s" \
        -e VUS="$vus" -e DURATION="$duration" -e MAX_ITERATIONS="$max_iterations" \
        "$HOLT_REPO/s3-compat-tests/k6/load.js" || status=$?
done
exit "$status"
