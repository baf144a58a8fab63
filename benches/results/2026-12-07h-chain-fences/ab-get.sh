#!/usr/bin/env bash
# Builds alternating round by round on one 10M database (the one of 2026-12-07g), point
# gets beyond the budget, LMDB beside in each run; last line of each run kept.
set -u
for round in 1 2 3; do
    for build in base new; do
        line=$(/tmp/ab/$build --engines holt-core,lmdb --keys 10000000 --pairs 1 --gets 100000 --op get \
            --only warm --dir /tmp/cold10m --reuse --seed $((200 + round)) 2>/dev/null | tail -1)
        echo "$line" | sed "s/^{/{\"build\":\"$build\",\"round\":$round,/" >> "$(dirname "$0")/raw-get.jsonl"
        echo "round $round $build: $(echo "$line" | grep -o '"mean_over_rounds_us":\[[^]]*\]')"
    done
done
