#!/usr/bin/env bash
for r in 1 2 3; do
  for v in $VERSIONS; do
    echo "== $v round $r" >> /tmp/pgab.log
    /tmp/pg-$v/paired_get --keys 10000000 --pairs 3 --gets 100000 --only warm --dir /tmp/pg10m --reuse 2>> /tmp/pgab.log | python3 -c "
import sys,json
for l in sys.stdin:
    d=json.loads(l); print('$v', [ (m['mean_us'], m['p50_us']) for m in d['medians']], round(d['ratio_mean_first_over_second'],3))" >> /tmp/pgab.out
  done
done
echo finished >> /tmp/pgab.out
