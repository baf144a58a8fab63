#!/bin/bash
# Alternating rounds of base and new builds from the same state, fresh keys each round.
for seed in $(seq 23 34); do
  for b in base list2; do
    d=/tmp/pgA; [ $b = list2 ] && d=/tmp/pgB
    $BIN/paired_get.$b --engines holt-core,rocksdb --keys 10000000 --pairs 1 --gets 100000 --op overwrite --dir $d --reuse --seed $seed > /tmp/cyc2_${b}_$seed.out 2>&1
    echo "$seed $b $(grep -o 'pair 0: .*' /tmp/cyc2_${b}_$seed.out) $(grep -o '"finish_s":[0-9.]*' /tmp/cyc2_${b}_$seed.out | tr '\n' ' ')"
  done
done
# Reads afterwards, on each build's own database, alternating.
for r in 1 2; do
  for b in base list2; do
    d=/tmp/pgA; [ $b = list2 ] && d=/tmp/pgB
    for op in get scan100; do
      $BIN/paired_get.$b --engines holt-core,rocksdb --keys 10000000 --pairs 1 --gets 100000 --op $op --only warm --dir $d --reuse --seed 6$r > /tmp/cyc2_rd_${b}_${op}_$r.out 2>&1
      echo "read $r $b $op $(grep -o 'pair 0: .*' /tmp/cyc2_rd_${b}_${op}_$r.out) $(grep -o '"p50_us":[0-9.]*' /tmp/cyc2_rd_${b}_${op}_$r.out | tr '\n' ' ')"
    done
  done
done
