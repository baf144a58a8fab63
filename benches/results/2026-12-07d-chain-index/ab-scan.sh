#!/bin/bash
# Alternating scan100 rounds of base and new builds on one database.
for r in 1 2 3 4 5 6; do
  for b in base new; do
    /tmp/ab/paired_get.$b --engines holt-core,rocksdb --keys 10000000 --pairs 1 --gets 100000 --op scan100 --only warm --dir /tmp/pg10m --reuse --seed 7$r > /tmp/abs_${b}_$r.out 2>&1
    echo "$r $b $(grep -o 'pair 0: .*' /tmp/abs_${b}_$r.out)"
  done
done
