#!/bin/bash
run() { # name bin dir extra
  echo "== $1 $(date +%T)" >> /tmp/ab/log2
  HOLT_BENCH_STATS=1 $2 --engines holt-core,rocksdb --keys 10000000 --pairs 1 --gets 100000 --op overwrite --dir $3 $4 > /tmp/ab/$1.out 2> /tmp/ab/$1.err
  python3 -c "
import json,sys; d=json.load(open('/tmp/ab/$1.out')); h,r=d['medians']
print('holt %.2f (put %.2f, finish %.3f, p50 %.2f p99 %.1f)  rocks %.2f ratio %.2f'%(h['mean_us'],h['mean_us']-h['finish_s']*10,h['finish_s'],h['p50_us'],h['p99_us'],r['mean_us'],d['ratio_mean_first_over_second']))" >> /tmp/ab/log2
  grep "after:" /tmp/ab/$1.err | head -1 | grep -o "frame_loads: [0-9]*\|frame_dirty_evictions: [0-9]*\|checkpoints: [0-9]*\|checkpoint_frames_whole: [0-9]*\|checkpoint_frames_delta: [0-9]*\|chains_merged: [0-9]*" | tr '\n' ' ' >> /tmp/ab/log2; echo >> /tmp/ab/log2
}
for i in 1 2 3 4; do
run fix$i /tmp/ab/paired_get.new /tmp/pg10m-new --reuse
run evict$i /tmp/ab/paired_get.evict /tmp/pg10m-new --reuse
done
echo ALLDONE >> /tmp/ab/log2
