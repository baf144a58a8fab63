#!/usr/bin/env bash
# Builds alternating round by round on one 10M database (the one of 2026-12-07g), beyond the
# budget, LMDB beside in each run; last line of each run kept. OP=scan100 (default) or get,
# ROUNDS (5), RAW (raw.jsonl): the gets ran as OP=get ROUNDS=3 RAW=raw-get.jsonl.
set -u
OP=${OP:-scan100}; ROUNDS=${ROUNDS:-5}; RAW=${RAW:-raw.jsonl}
for ((round = 1; round <= ROUNDS; round++)); do
    for build in base new; do
        line=$(/tmp/ab/$build --engines holt-core,lmdb --keys 10000000 --pairs 1 --gets 100000 --op "$OP" \
            --only warm --dir /tmp/cold10m --reuse --seed $((200 + round)) 2>/dev/null | tail -1)
        echo "$line" | sed "s/^{/{\"build\":\"$build\",\"round\":$round,/" >> "$(dirname "$0")/$RAW"
        echo "round $round $build: $(echo "$line" | grep -o '"mean_over_rounds_us":\[[^]]*\]')"
    done
done
