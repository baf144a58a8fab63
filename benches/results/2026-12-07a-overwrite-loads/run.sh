#!/bin/bash
# Async overwrites beyond the budget at 10M keys, holt-core beside RocksDB in one process
# (paired_get --op overwrite), builds alternating: `old` is the code before this change, `final`
# after it. Both engines load once (--reuse afterwards); each run opens each engine with a
# budget of 1/8 of its bytes on disk, reads the 100,000 keys once untimed, then times 100,000
# async overwrites of them and the checkpoint (holt-core) or flush (RocksDB) after.
set -euo pipefail
DIR=${DIR:-/tmp/pg10m}
first=1
for b in final old final old final old; do
    reuse=--reuse; [ $first = 1 ] && [ ! -e "$DIR/holt-core/.loaded" ] && reuse=
    first=0
    HOLT_BENCH_STATS=1 /tmp/ab/pg-$b --engines holt-core,rocksdb --keys 10000000 --pairs 1 \
        --gets 100000 --op overwrite --dir "$DIR" $reuse 2>>stats-$b.log >>paired-overwrite-final-vs-old.jsonl
done
