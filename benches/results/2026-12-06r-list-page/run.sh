#!/usr/bin/env bash
# usage: lbab.sh OUT REPS BIN... ; alternates gateway binaries and bare axum over one seeded data dir
set -u
OUT=$1; REPS=$2; shift 2
B=/work/main/benches/target/release
D=/tmp/listbench-data
: > "$OUT"
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
start_gw() {
  "$1" --data-dir $D/seeded --listen 127.0.0.1:0 --durability sync > /tmp/lbab-gw.log 2>&1 &
  GP=$!
  for i in $(seq 100); do grep -q "listening on http://" /tmp/lbab-gw.log && break; sleep 0.1; done
  ADDR=$(grep -o 'listening on http://[0-9.:]*' /tmp/lbab-gw.log | head -1 | sed 's/listening on //')
}
run() { # name endpoint pid conns
  local c0=$(cpu $3)
  local j=$($B/s3load --endpoint "$2" --bucket bench --op list --connections $4 --duration-s 6 --objects 100000 --access-key holtadmin --secret-key holtadmin-secret-key)
  local c1=$(cpu $3)
  python3 -c "
import json,sys
d=json.loads(sys.argv[1]); t=(int(sys.argv[3])-int(sys.argv[2]))*1e6/100
print(json.dumps({'server':sys.argv[4],'conns':d['connections'],'rate':round(d['req_per_s']),'p50':d['p50_us'],'p99':d['p99_us'],'cpu_us_per_page':round(t/d['requests'],1)}))" "$j" $c0 $c1 $1 >> "$OUT"
}
$B/bare_axum --listen 127.0.0.1:0 --body-bytes 218483 > /tmp/lbab-ax.log 2>&1 &
AP=$!
for i in $(seq 100); do grep -q "http://" /tmp/lbab-ax.log && break; sleep 0.1; done
AX=$(grep -o 'http://[0-9.:]*' /tmp/lbab-ax.log | head -1)
for r in $(seq $REPS); do
  for bin in "$@"; do
    start_gw $bin
    $B/s3load --endpoint "$ADDR" --bucket bench --op list --connections 8 --duration-s 1 --objects 100000 --access-key holtadmin --secret-key holtadmin-secret-key >/dev/null
    run $(basename $bin) $ADDR $GP 1
    run $(basename $bin) $ADDR $GP 64
    kill $GP; wait $GP 2>/dev/null
  done
  run axum $AX $AP 1
  run axum $AX $AP 64
done
kill $AP; wait $AP 2>/dev/null
cat "$OUT"
