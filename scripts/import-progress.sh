#!/usr/bin/env bash
# A progress bar on the terminal for an import in upstream mode, read from the gateway's
# /metrics: prefixes listed out of those found (top-level and split), objects indexed, and the rate.
#
#   scripts/import-progress.sh http://127.0.0.1:9000 BUCKET [METRICS_TOKEN]
#
# Exits 0 when the import has finished, 1 if the gateway stops answering.
set -euo pipefail

if [[ $# -lt 2 || $1 == -h || $1 == --help ]]; then
    sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
endpoint=${1%/} bucket=$2 token=${3:-}
auth=()
[[ -n $token ]] && auth=(-H "Authorization: Bearer $token")

value() { # metrics name
    awk -v s="$2{bucket=\"$bucket\"}" '$1 == s { print $2 }' <<< "$1"
}

started=$(date +%s) first=""
while true; do
    if ! metrics=$(curl -fsS "${auth[@]}" "$endpoint/metrics"); then
        echo >&2
        echo "the gateway at $endpoint does not answer /metrics" >&2
        exit 1
    fi
    objects=$(value "$metrics" holt_upstream_import_objects)
    prefixes=$(value "$metrics" holt_upstream_import_prefixes)
    listed=$(value "$metrics" holt_upstream_import_prefixes_done)
    done=$(value "$metrics" holt_upstream_import_done)
    objects=${objects:-0} prefixes=${prefixes:-0} listed=${listed:-0}
    first=${first:-$objects}
    elapsed=$(($(date +%s) - started))
    rate=$(((objects - first) / (elapsed > 0 ? elapsed : 1)))
    width=30 filled=0
    ((prefixes > 0)) && filled=$((listed * width / prefixes))
    bar=$(printf '%*s' "$filled" '' | tr ' ' '#')$(printf '%*s' $((width - filled)) '' | tr ' ' '.')
    if ((prefixes > 0)); then
        phase="$listed/$prefixes prefixes"
    else
        phase="listing the top level"
    fi
    printf '\r%s [%s] %s, %s objects, %s/s   ' "$bucket" "$bar" "$phase" "$objects" "$rate"
    if [[ ${done:-0} == 1 ]]; then
        echo
        echo "import of $bucket finished: $objects objects"
        exit 0
    fi
    sleep 1
done
