#!/bin/bash
for b in base cur base cur; do  # also run with: noevict cur m32 (log5)
  rm -rf /tmp/bd-$b; mkdir -p /tmp/bd-$b
  echo "== $b $(date +%T)" >> /tmp/ab/log6
  /tmp/ab/$b/bench_driver --keys 10000000 --reps 1 --engines holt-core --cache-mb 185 --out /tmp/bd-$b --data-dir /tmp/holt-bench-data > /tmp/bd-$b.log 2>&1
  grep -o '"load_s":[0-9.]*\|"hot_get[a-z_]*":[0-9.]*\|"scan100_p50_us":[0-9.]*\|"overwrite_async_[a-z]*_us":[0-9.]*\|"overwrite_async_finish_s":[0-9.]*\|"mix_us":[0-9.]*\|"list_key_heavy_p50_us":[0-9.]*\|"cold_get[a-z_]*":[0-9.]*' /tmp/bd-$b/raw.jsonl | tr '\n' ' ' >> /tmp/ab/log6; echo >> /tmp/ab/log6
done
echo ALLDONE >> /tmp/ab/log6
