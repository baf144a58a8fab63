#!/bin/bash
for r in 1 2 3 4; do
  for b in base new; do
    /tmp/ab/paired_get.$b --engines holt-core,rocksdb --keys 10000000 --pairs 1 --gets 100000 --op get --only warm --dir /tmp/pg10m --reuse --seed 8$r > /tmp/abg_${b}_$r.out 2>&1
    echo "$r $b $(grep -o 'pair 0: .*' /tmp/abg_${b}_$r.out)"
  done
done
