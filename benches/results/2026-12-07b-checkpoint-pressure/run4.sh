#!/bin/bash
run() { # name dir op
  echo "== $1 $3 $(date +%T)" >> /tmp/ab/log4
  /tmp/ab/paired_get.evict --engines holt-core,rocksdb --keys 10000000 --pairs 1 --gets 100000 --op $3 --only warm --dir $2 --reuse > /tmp/ab/$1.out 2> /tmp/ab/$1.err
  python3 -c "
import json,sys; d=json.load(open('/tmp/ab/$1.out')); h,r=d['medians']
print('holt %.2f (p50 %.2f p99 %.1f)  rocks %.2f ratio %.2f'%(h['mean_us'],h['p50_us'],h['p99_us'],r['mean_us'],d['ratio_mean_first_over_second']))" >> /tmp/ab/log4
}
for i in 1 2; do
run ga$i /tmp/pg10m-a get
run gb$i /tmp/pg10m-b get
run sa$i /tmp/pg10m-a scan100
run sb$i /tmp/pg10m-b scan100
done
echo ALLDONE >> /tmp/ab/log4
