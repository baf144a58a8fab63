#!/usr/bin/env python3
"""Assembles benches/RESULTS.md from the raw results of scripts/bench.sh and draws the
headline-ratio chart (matplotlib, if installed). Standard library otherwise."""

import argparse
import csv
import json
import os
import statistics
from collections import defaultdict


def read(path, default=""):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return default


def jsonl(path):
    rows = []
    for line in read(path).splitlines():
        line = line.strip()
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


def fmt(x):
    if x is None:
        return "—"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def gateway_tables(rows):
    """Markdown: per operation and connection count, each server's req/s, p50, p99, RSS, and
    holt-gateway's ratio to MinIO and to the bare axum ceiling."""
    runs = [r for r in rows if r.get("op") not in ("prepare", "import", "import_and_header_fill")]
    if not runs:
        return "Not measured in this run (see notes).\n"
    by = defaultdict(list)
    for r in runs:
        by[(r["server"], r["op"], r["connections"])].append(r)
    med = {}
    for key, rs in by.items():
        med[key] = {
            f: statistics.median([r[f] for r in rs if r.get(f) is not None] or [0])
            for f in ("req_per_s", "p50_us", "p99_us", "errors", "mean_response_bytes")
        }
        peaks = [r.get("server_peak_rss_bytes") for r in rs if r.get("server_peak_rss_bytes")]
        med[key]["peak_rss_mb"] = max(peaks) / 1e6 if peaks else None
    servers = sorted({k[0] for k in med}, key=lambda s: ["holt-gateway", "minio", "bare-axum"].index(s) if s in ["holt-gateway", "minio", "bare-axum"] else 9)
    out = ["| operation | connections | server | req/s | p50 (µs) | p99 (µs) | errors | response bytes | server peak RSS (MB) | holt-gateway ÷ this |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for op in ["head", "list", "get", "put", "mixed"]:
        for c in [1, 16, 64]:
            gw = med.get(("holt-gateway", op, c))
            for s in servers:
                m = med.get((s, op, c))
                if not m:
                    continue
                ratio = "—"
                if gw and s != "holt-gateway" and m["req_per_s"] > 0:
                    ratio = f"{gw['req_per_s'] / m['req_per_s']:.2f}×"
                out.append(f"| {op} | {c} | {s} | {fmt(m['req_per_s'])} | {fmt(m['p50_us'])} | {fmt(m['p99_us'])} | "
                           f"{int(m['errors'])} | {fmt(m['mean_response_bytes'])} | {fmt(m['peak_rss_mb'])} | {ratio} |")
    prep = [r for r in rows if r.get("op") == "prepare"]
    if prep:
        out.append("")
        out.append("Loading through the S3 API (one PUT per object): " + "; ".join(
            f"{r['server']} {r['objects']} objects in {r['seconds']:.1f} s over {r.get('connections', 16)} connections "
            f"({r['objects'] / max(r['seconds'], 1e-9):,.0f}/s, {r['errors']} errors)" for r in prep))
    return "\n".join(out) + "\n"


def gateway_sections(results_dir):
    """One table per data-set size in gateway-raw.jsonl, smallest first, each followed by the
    failures that run recorded (gateway-failures-N.md)."""
    rows = jsonl(os.path.join(results_dir, "gateway-raw.jsonl"))
    sizes = sorted({r.get("objects", 0) for r in rows})
    if not sizes:
        return "Not measured in this run (see notes).\n"
    parts = []
    for n in sizes:
        parts.append(f"### {n:,} objects\n")
        parts.append(gateway_tables([r for r in rows if r.get("objects", 0) == n]))
        failures = read(os.path.join(results_dir, f"gateway-failures-{n}.md")).strip()
        if failures:
            parts.append("Failures recorded by this run:\n\n" + failures + "\n")
    return "\n".join(parts)


def upstream_section(results_dir):
    """The gateway in front of MinIO (upstream-raw.jsonl): the same table, MinIO direct beside
    the gateway, and the import time."""
    rows = jsonl(os.path.join(results_dir, "upstream-raw.jsonl"))
    notes = read(os.path.join(results_dir, "upstream-notes.md")).strip()
    if not rows:
        return (notes + "\n" if notes else "") + "Not measured.\n"
    parts = [gateway_tables(rows)]
    for r in rows:
        if r.get("op") == "import":
            n = r.get("objects", 0)
            parts.append(f"Import (CreateBucket of the loaded bucket through the gateway until "
                         f"`holt_upstream_import_done`): {n:,} objects in {r['seconds']:.1f} s "
                         f"({n / max(r['seconds'], 1e-9):,.0f} objects/s).\n")
        if r.get("op") == "import_and_header_fill":
            parts.append(f"With the background fill of the imported records' headers (a HEAD "
                         f"upstream per object; the load points run after it): {r['seconds']:.1f} s.\n")
    if notes:
        parts.append("Failures recorded by this run:\n\n" + notes + "\n")
    return "\n".join(parts)


def usage_section(results_dir):
    """`Db::usage` of a prefix over N keys against counting them with a scan (usage.json from
    usage_bench)."""
    path = os.path.join(results_dir, "usage.json")
    if not os.path.exists(path):
        return "Not measured in this run.\n"
    with open(path, encoding="utf-8") as f:
        u = json.load(f)
    n = u["keys_under_prefix"]
    usage_us = u["usage_big_ns_p50"] / 1e3
    return (
        f"Keys and bytes under a prefix holding {n:,} keys (values of 60–200 bytes, holt-core "
        f"weighing a value by its length), medians of {u['reps']} interleaved repetitions in one "
        f"process (`benches/src/bin/usage_bench.rs`); every answer agreed: "
        f"{u['answers']['usage']}.\n\n"
        "| how | time | vs `Db::usage` |\n|---|---|---|\n"
        f"| holt-core `Db::usage` | {usage_us:.2f} µs | 1× |\n"
        f"| holt-core `Db::usage`, a prefix of 1,000 keys | {u['usage_deep_ns_p50'] / 1e3:.2f} µs | — |\n"
        f"| holt-core, a scan counting them | {u['holt_scan_ms_p50']:.1f} ms | "
        f"{u['usage_vs_holt_scan']:,.0f}× slower |\n"
        f"| LMDB, a cursor counting them | {u['lmdb_scan_ms_p50']:.1f} ms | "
        f"{u['usage_vs_lmdb_scan']:,.0f}× slower |\n"
    )


PAIRED_NAMES = {
    "list_wide_root": "wide root (rollup-heavy)",
    "list_key_heavy": "key-heavy",
    "list_bucket_root": "bucket root (rollup-heavy)",
    "hot_get": "hot point get, main set just loaded (µs per get: a round's mean)",
    "hot_get_wide_added": "hot point get, after the wide set was added (µs per get)",
}


def paired_section(results_dir, command):
    """Listings of two engines timed in alternating rounds in one process (paired_list)."""
    rows = jsonl(os.path.join(results_dir, "paired-list-raw.jsonl"))
    if not rows:
        return "Not measured in this run."
    a, b = rows[0]["engines"]
    by_listing = {}
    for row in rows:
        by_listing.setdefault(row["listing"], []).append(row)
    out = [
        f"Produced by `{command}`. Both engines hold the same data in one process; each page is "
        f"timed in {rows[0]['pairs']} pairs of rounds (one round per engine, back to back, the "
        "order flipping every pair, each round at least 20 ms and 30 pages), the ratio is "
        f"taken per pair, and each run's figure is the median of its pairs' ratios. Each timed "
        "round follows an untimed warm-up of the same engine. "
        f"{b} ÷ {a}: above 1, {a} is faster. The last column splits the pairs by the engine "
        "that ran first in them (medians over all runs): a gap there would be an order effect.",
        "",
        f"| listing | {a} p50 µs | {b} p50 µs | ratio, median of runs | per run | all pairs' range "
        f"| {a} first / {b} first |",
        "|---|---|---|---|---|---|---|",
    ]
    for listing, runs in by_listing.items():
        pa = statistics.median([r["p50_us"][0] for r in runs])
        pb = statistics.median([r["p50_us"][1] for r in runs])
        ratios = [r["ratio_median"] for r in runs]
        lo = min(r["ratio_min"] for r in runs)
        hi = max(r["ratio_max"] for r in runs)
        per_run = ", ".join(f"{x:.2f}×" for x in ratios)
        label = PAIRED_NAMES.get(listing, listing)
        if listing.startswith("list_"):
            label += f" ({runs[0]['prefixes']} prefixes, {runs[0]['entry_keys']} keys)"
        by_first = [r.get("ratio_median_by_first") for r in runs]
        if all(by_first):
            firsts = " / ".join(f"{statistics.median(f[i] for f in by_first):.2f}×" for i in (0, 1))
        else:
            firsts = "—"
        out.append(
            f"| {label} | {fmt(pa)} | {fmt(pb)} | **{statistics.median(ratios):.2f}×** | "
            f"{per_run} | {lo:.2f}–{hi:.2f}× | {firsts} |"
        )
    return "\n".join(out)


def chart(csv_path, png_path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib not available: no chart drawn."
    rows = list(csv.DictReader(open(csv_path, encoding="utf-8"))) if os.path.exists(csv_path) else []
    if not rows:
        return "No ratios to chart yet."
    metrics = list(dict.fromkeys(r["metric"] for r in rows))
    engines = sorted({r["engine"] for r in rows})
    value = {(r["metric"], r["engine"]): float(r["advantage"]) for r in rows}
    fig, ax = plt.subplots(figsize=(11, 0.55 * len(metrics) * 1.6 + 1.5))
    height = 0.8 / max(len(engines), 1)
    for j, e in enumerate(engines):
        ys = [i + j * height for i in range(len(metrics))]
        xs = [value.get((m, e), 0) for m in metrics]
        ax.barh(ys, xs, height=height, label=e)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(metrics))])
    ax.set_yticklabels(metrics)
    ax.invert_yaxis()
    ax.set_xlabel("holt-core advantage (× ; >1 = holt-core better), log scale")
    ax.set_title("holt-core against embedded engines, same run, medians")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    return f"![headline ratios](results/{os.path.basename(png_path)})"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--results", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--chart", required=True)
    p.add_argument("--commit", default="unknown")
    p.add_argument("--engine-command", default="")
    p.add_argument("--script-command", default="")
    p.add_argument("--machine", default="")
    p.add_argument("--paired-command", default="")
    a = p.parse_args()
    r = a.results
    chart_line = chart(os.path.join(r, "engines-headline.csv"), a.chart)
    doc = f"""# Benchmark results

Produced by `{a.script_command}` (see `scripts/bench.sh --help`). Method and what each
figure means: [docs/benchmarks.md](../docs/benchmarks.md); targets: PERFORMANCE.md. Every
engine runs in its own process (`benches/src/bin/engine_bench.rs`), the engines alternate and
the order rotates between repetitions (`bench_driver`), and every figure is a median of the
repetitions. Ratios are taken inside the same run.

- Machine: {a.machine}
- Commit: {a.commit}
- Engine command: `{a.engine_command}`

{read(os.path.join(r, "NOTES.md"))}

## Engines

{chart_line}

{read(os.path.join(r, "engines-tables.md"), "Not measured in this run.")}

### Listings side by side in one process

{paired_section(r, a.paired_command)}

## Gateway (S3 over loopback HTTP)

{read(os.path.join(r, "gateway-notes.md"))}
{gateway_sections(r)}

## Upstream mode (the gateway in front of MinIO)

"minio" is MinIO answered directly; "holt-gateway" is the gateway started with `--upstream`
in front of that MinIO, over the same objects (listings and HEAD from its index, GET and PUT
through to MinIO).

{upstream_section(r)}

## How big is a prefix: usage against a scan

{usage_section(r)}

## Raw numbers

One JSON object per engine process: [results/engines-raw.jsonl](results/engines-raw.jsonl);
side by side: [results/paired-list-raw.jsonl](results/paired-list-raw.jsonl); gateway, one
object per load point: [results/gateway-raw.jsonl](results/gateway-raw.jsonl); upstream mode:
[results/upstream-raw.jsonl](results/upstream-raw.jsonl). The raw data of
the other runs quoted above is in one folder per run under [results/](results/), named by
date.
"""
    with open(a.out, "w", encoding="utf-8") as f:
        f.write(doc)


if __name__ == "__main__":
    main()
