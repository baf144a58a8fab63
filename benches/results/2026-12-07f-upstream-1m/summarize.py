"""Medians per operation and connection count of a raw file of run.sh, MinIO beside the gateway."""
import collections
import json
import statistics as st
import sys

rows = [json.loads(line) for line in open(sys.argv[1])]
by = collections.defaultdict(list)
for r in rows:
    if r["op"] in ("head", "list", "put"):
        by[(r["op"], r["connections"], r["server"])].append(r)
print("| op | connections | MinIO req/s | gateway req/s | gateway ÷ MinIO | MinIO p50 µs | gateway p50 µs | p50 gateway ÷ MinIO |")
print("|---|---|---|---|---|---|---|---|")
for op in ("head", "list", "put"):
    for c in (1, 64):
        m, g = by[(op, c, "minio")], by[(op, c, "holt-gateway")]
        if not m or not g:
            continue
        mr, gr = st.median(x["req_per_s"] for x in m), st.median(x["req_per_s"] for x in g)
        mp, gp = st.median(x["p50_us"] for x in m), st.median(x["p50_us"] for x in g)
        print(f"| {op} | {c} | {mr:,.0f} | {gr:,.0f} | {gr / mr:.2f} | {mp:,} | {gp:,} | {gp / mp:.2f} |")
for r in rows:
    if r["op"] not in ("head", "list", "put"):
        print(f"\n{r['op']}: {r['seconds']} s")
