#!/bin/bash
# Alternating rounds of the base and final builds on one 10M-key database, budget 1/8:
# 100-key scans beside LMDB, then gets beside LMDB.
for op in scan100; do
for r in 1 2 3 4; do
  for b in base head; do
    /tmp/ab/paired_get.$b --engines holt-core,lmdb --keys 10000000 --pairs 1 --gets 100000 --op $op --only warm --dir /tmp/pg10m --reuse --seed 5$r > /tmp/abh/${op}_${b}_$r.out 2>&1
    echo "$op $r $b $(grep -o 'pair 0: .*' /tmp/abh/${op}_${b}_$r.out)"
  done
done
done
