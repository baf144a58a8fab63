#!/bin/bash
run() { # name bin dir extra
  echo "== $1 $(date +%T)" >> /tmp/ab/log
  HOLT_BENCH_STATS=1 $2 --engines holt-core,rocksdb --keys 10000000 --pairs 1 --gets 100000 --op overwrite --dir $3 $4 > /tmp/ab/$1.out 2> /tmp/ab/$1.err
  cat /tmp/ab/$1.out >> /tmp/ab/log; grep "after:" /tmp/ab/$1.err | head -1 | grep -o "frame_loads: [0-9]*\|frame_dirty_evictions: [0-9]*\|checkpoint_frames_whole: [0-9]*\|checkpoint_frames_delta: [0-9]*\|chains_merged: [0-9]*" | tr '\n' ' ' >> /tmp/ab/log; echo >> /tmp/ab/log
}
run new0 /tmp/ab/paired_get.new /tmp/pg10m-new ""
run old1 /tmp/ab/paired_get.old /tmp/pg10m --reuse
run new1 /tmp/ab/paired_get.new /tmp/pg10m-new --reuse
run old2 /tmp/ab/paired_get.old /tmp/pg10m --reuse
run new2 /tmp/ab/paired_get.new /tmp/pg10m-new --reuse
run new3 /tmp/ab/paired_get.new /tmp/pg10m-new --reuse
echo ALLDONE >> /tmp/ab/log
