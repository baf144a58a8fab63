//! Runs `engine_bench` once per engine per repetition (engines alternate, the order rotating
//! each repetition), keeps every raw result, and writes tables of medians with ratios to
//! holt-core as Markdown, plus a CSV of the headline ratios for the chart.
//!
//! usage: bench_driver [--keys N] [--reps R] [--quick] [--engines a,b,c] [--out DIR]
//!                     [--data-dir DIR] [--seed S] [--cache-mb MB]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use holt_benches::measure::median_f64;

struct Args {
    keys: u64,
    reps: usize,
    quick: bool,
    engines: Vec<String>,
    out: PathBuf,
    data_dir: PathBuf,
    seed: u64,
    /// Raw results of an earlier run to merge into the tables (engines not run this time).
    include: Vec<PathBuf>,
    /// Longest an engine process may run before it is killed and recorded as timed out.
    timeout_s: u64,
    /// Cache budget handed to every engine (`engine_bench --cache-mb`); its default if unset.
    cache_mb: Option<usize>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        keys: 1_000_000,
        reps: 3,
        quick: false,
        engines: [
            "holt-core",
            "holt-core-mem",
            "btreemap",
            "holt-0.9.2",
            "lmdb",
            "redb",
            "rocksdb",
            "sqlite",
            "fjall",
        ]
        .map(String::from)
        .to_vec(),
        out: PathBuf::from("target/bench-out"),
        data_dir: std::env::temp_dir().join("holt-engine-bench"),
        seed: 0x5EED_2026,
        include: Vec::new(),
        timeout_s: 1200,
        cache_mb: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--keys" => a.keys = value()?.parse().map_err(|e| format!("--keys: {e}"))?,
            "--reps" => a.reps = value()?.parse().map_err(|e| format!("--reps: {e}"))?,
            "--seed" => a.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--quick" => a.quick = true,
            "--engines" => a.engines = value()?.split(',').map(str::to_string).collect(),
            "--out" => a.out = PathBuf::from(value()?),
            "--data-dir" => a.data_dir = PathBuf::from(value()?),
            "--include" => a.include.push(PathBuf::from(value()?)),
            "--timeout-s" => a.timeout_s = value()?.parse().map_err(|e| format!("--timeout-s: {e}"))?,
            "--cache-mb" => a.cache_mb = Some(value()?.parse().map_err(|e| format!("--cache-mb: {e}"))?),
            "--help" | "-h" => {
                println!("bench_driver [--keys N] [--reps R] [--quick] [--engines a,b] [--out DIR] [--data-dir DIR] [--seed S] [--include RAW.jsonl] [--timeout-s S] [--cache-mb MB]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if (a.reps == 0 && a.include.is_empty()) || a.engines.is_empty() {
        return Err("need a repetition and an engine (or --reps 0 with --include to report only)".into());
    }
    Ok(a)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("bench_driver: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&args) {
        eprintln!("bench_driver: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(&args.out)?;
    let exe = std::env::current_exe()?;
    let engine_bench = exe.with_file_name("engine_bench");
    let raw_path = args.out.join("raw.jsonl");
    let mut raw = std::fs::OpenOptions::new().create(true).append(true).open(&raw_path)?;
    // results[engine] = one JSON object per repetition.
    let mut results: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    // An engine that hit the time limit once is not run again: it would only hit it again.
    let mut timed_out: Vec<String> = Vec::new();
    for rep in 0..args.reps {
        let n = args.engines.len();
        for j in 0..n {
            let engine = &args.engines[(j + rep) % n];
            if timed_out.contains(engine) {
                continue;
            }
            eprintln!("== repetition {} of {}: {engine}", rep + 1, args.reps);
            let log = std::fs::File::create(args.out.join(format!("{engine}.rep{}.log", rep + 1)))?;
            let mut cmd = Command::new(&engine_bench);
            cmd.args([
                "--engine",
                engine,
                "--keys",
                &args.keys.to_string(),
                "--seed",
                &args.seed.to_string(),
            ])
            .arg("--dir")
            .arg(&args.data_dir)
            .stderr(log);
            if args.quick {
                cmd.arg("--quick");
            }
            if let Some(mb) = args.cache_mb {
                cmd.args(["--cache-mb", &mb.to_string()]);
            }
            let (status, stdout) = run_bounded(cmd, Duration::from_secs(args.timeout_s))?;
            let parsed = stdout.lines().rev().find_map(|l| serde_json::from_str::<Value>(l).ok());
            let value = match parsed {
                Some(mut v) => {
                    v["rep"] = Value::from(rep + 1);
                    v["exit"] = Value::from(status.unwrap_or(-1));
                    v
                }
                None => {
                    let why = match status {
                        Some(code) => format!("exited with {code} without a result"),
                        None => {
                            timed_out.push(engine.clone());
                            format!(
                                "killed after the {} s time limit, or by a signal; not repeated",
                                args.timeout_s
                            )
                        }
                    };
                    serde_json::json!({
                        "engine": engine, "rep": rep + 1, "metrics": {},
                        "errors": {"process": format!("{why} (see {engine}.rep{}.log)", rep + 1)},
                        "skipped": {},
                    })
                }
            };
            writeln!(raw, "{value}")?;
            results.entry(engine.clone()).or_default().push(value);
            let _ = std::fs::remove_dir_all(args.data_dir.join(engine));
        }
    }
    // Earlier results for engines not run now (marked in their rows' `included_from`).
    let mut engines_in_tables = args.engines.clone();
    let run_now: Vec<String> = results.keys().cloned().collect();
    for path in &args.include {
        let text = std::fs::read_to_string(path)?;
        for line in text.lines() {
            let Ok(mut v) = serde_json::from_str::<Value>(line) else { continue };
            let Some(engine) = v["engine"].as_str().map(str::to_string) else { continue };
            if run_now.contains(&engine) {
                continue;
            }
            // A report-only pass keeps the markers the runs themselves wrote.
            if args.reps > 0 {
                v["included_from"] = Value::from(path.display().to_string());
            }
            writeln!(raw, "{v}")?;
            if !engines_in_tables.contains(&engine) {
                engines_in_tables.push(engine.clone());
            }
            results.entry(engine).or_default().push(v);
        }
    }
    let medians = medians(&results);
    let wrong = wrong_pages(&results);
    std::fs::write(args.out.join("tables.md"), tables(args, &engines_in_tables, &results, &medians))?;
    std::fs::write(args.out.join("headline.csv"), headline_csv(&medians, &wrong))?;
    eprintln!("wrote {}", args.out.display());
    Ok(())
}

/// Runs `cmd` with stdout captured, killing it past `limit`. Returns the exit code (None when
/// killed by a signal) and what it printed (a few KB: one JSON line, so the pipe never fills).
fn run_bounded(mut cmd: Command, limit: Duration) -> std::io::Result<(Option<i32>, String)> {
    use std::io::Read;
    let mut child = cmd.stdout(Stdio::piped()).spawn()?;
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            break child.wait()?;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut stdout = String::new();
    if let Some(mut pipe) = child.stdout.take() {
        pipe.read_to_string(&mut stdout)?;
    }
    Ok((status.code(), stdout))
}

/// Listings whose page digest differs from the one most engines returned: their timings are
/// for a wrong answer. Returns (engine, metric key prefix) pairs.
fn wrong_pages(results: &BTreeMap<String, Vec<Value>>) -> Vec<(String, &'static str)> {
    let mut wrong = Vec::new();
    for listing in ["list_key_heavy", "list_bucket_root", "list_wide_root"] {
        let field = format!("{listing}_digest");
        let mut digests: BTreeMap<String, (String, usize)> = BTreeMap::new();
        for (engine, runs) in results {
            if let Some(d) = runs.iter().find_map(|r| r["metrics"][&field].as_str()) {
                digests.insert(engine.clone(), (d.to_string(), 0));
            }
        }
        let mut votes: BTreeMap<String, usize> = BTreeMap::new();
        for (d, _) in digests.values() {
            *votes.entry(d.clone()).or_default() += 1;
        }
        let Some((majority, _)) = votes.iter().max_by_key(|(_, n)| **n) else { continue };
        for (engine, (d, _)) in &digests {
            if d != majority {
                wrong.push((engine.clone(), listing));
            }
        }
    }
    wrong
}

type Medians = BTreeMap<String, BTreeMap<String, f64>>;

/// Per engine and metric: the median over the repetitions that produced it.
fn medians(results: &BTreeMap<String, Vec<Value>>) -> Medians {
    let mut out = Medians::new();
    for (engine, runs) in results {
        let mut per_metric: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for run in runs {
            if let Some(m) = run["metrics"].as_object() {
                for (k, v) in m {
                    if let Some(x) = v.as_f64() {
                        per_metric.entry(k.clone()).or_default().push(x);
                    }
                }
            }
        }
        let entry = out.entry(engine.clone()).or_default();
        for (k, mut vs) in per_metric {
            if let Some(m) = median_f64(&mut vs) {
                entry.insert(k, m);
            }
        }
    }
    out
}

/// A headline metric: its key, a column title, whether lower is better, and a unit scale.
struct Metric {
    key: &'static str,
    title: &'static str,
    lower_is_better: bool,
    /// Whether an in-memory holt-core figure may stand in as the reference (reads only).
    memory_ok: bool,
    scale: f64,
}

const fn metric(key: &'static str, title: &'static str, lower: bool, memory_ok: bool, scale: f64) -> Metric {
    Metric { key, title, lower_is_better: lower, memory_ok, scale }
}

const MAIN: &[Metric] = &[
    metric("load_s", "load (s)", true, false, 1.0),
    metric("hot_get_ns", "hot get (µs)", true, true, 1e-3),
    metric("cold_get_ns", "cold get (µs)", true, false, 1e-3),
    metric("scan100_p50_us", "scan 100 p50 (µs)", true, true, 1.0),
    metric("list_key_heavy_p50_us", "list key-heavy p50 (µs)", true, true, 1.0),
    metric("list_bucket_root_p50_us", "list bucket root p50 (µs)", true, true, 1.0),
    metric("list_wide_root_p50_us", "list wide root p50 (µs)", true, true, 1.0),
    metric("overwrite_async_amortized_us", "overwrite, log to page cache, amortized (µs)", true, false, 1.0),
    metric("mix_us", "metadata mix (µs/op)", true, false, 1.0),
    metric("disk_bytes", "disk (MB)", true, false, 1e-6),
    metric("peak_rss_bytes", "peak RSS (MB)", true, true, 1e-6),
];

const FSYNC: &[Metric] = &[
    metric("fsync_w1_ops_s", "fsync 1 writer (ops/s)", false, false, 1.0),
    metric("fsync_w1_p50_us", "1 writer p50 (µs)", true, false, 1.0),
    metric("fsync_w2_ops_s", "fsync 2 writers (ops/s)", false, false, 1.0),
    metric("fsync_w4_ops_s", "fsync 4 writers (ops/s)", false, false, 1.0),
    metric("fsync_w16_ops_s", "fsync 16 writers (ops/s)", false, false, 1.0),
    metric("fsync_w64_ops_s", "fsync 64 writers (ops/s)", false, false, 1.0),
    metric("fsync_w64_p50_us", "64 writers p50 (µs)", true, false, 1.0),
    metric("fsync_t1_ops_s", "fsync 1 task awaiting (ops/s)", false, false, 1.0),
    metric("fsync_t16_ops_s", "fsync 16 tasks awaiting (ops/s)", false, false, 1.0),
    metric("fsync_t64_ops_s", "fsync 64 tasks awaiting (ops/s)", false, false, 1.0),
    metric("fsync_t64_p50_us", "64 tasks p50 (µs)", true, false, 1.0),
];

/// The holt-core figure a peer is held against: the durable engine, or for reads the
/// in-memory one when the durable engine has no figure.
fn reference(medians: &Medians, m: &Metric) -> Option<(f64, &'static str)> {
    if let Some(v) = medians.get("holt-core").and_then(|e| e.get(m.key)) {
        return Some((*v, "holt-core"));
    }
    if m.memory_ok {
        if let Some(v) = medians.get("holt-core-mem").and_then(|e| e.get(m.key)) {
            return Some((*v, "holt-core-mem"));
        }
    }
    None
}

/// How many times better holt-core is than `value` (>1: holt-core better).
fn advantage(m: &Metric, holt: f64, value: f64) -> Option<f64> {
    if holt <= 0.0 || value <= 0.0 {
        return None;
    }
    Some(if m.lower_is_better { value / holt } else { holt / value })
}

fn fmt(x: f64) -> String {
    let a = x.abs();
    if a >= 1000.0 {
        format!("{x:.0}")
    } else if a >= 100.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

fn table(
    out: &mut String,
    metrics: &[Metric],
    medians: &Medians,
    engines: &[String],
    wrong: &[(String, &str)],
) {
    let _ = write!(out, "| engine |");
    for m in metrics {
        let _ = write!(out, " {} |", m.title);
    }
    let _ = write!(out, "\n|---|");
    for _ in metrics {
        let _ = write!(out, "---|");
    }
    out.push('\n');
    for engine in engines {
        let Some(e) = medians.get(engine) else { continue };
        let _ = write!(out, "| {engine} |");
        for m in metrics {
            let is_wrong = wrong.iter().any(|(w, listing)| w == engine && m.key.starts_with(listing));
            match e.get(m.key) {
                Some(v) if is_wrong => {
                    let _ = write!(out, " {} (wrong page) |", fmt(v * m.scale));
                }
                Some(v) => {
                    let shown = fmt(v * m.scale);
                    match reference(medians, m) {
                        Some((h, name)) if name != engine => match advantage(m, h, *v) {
                            Some(r) => {
                                let _ = write!(out, " {shown} ({}×) |", fmt(r));
                            }
                            None => {
                                let _ = write!(out, " {shown} |");
                            }
                        },
                        Some(_) => {
                            let _ = write!(out, " **{shown}** |");
                        }
                        None => {
                            let _ = write!(out, " {shown} |");
                        }
                    }
                }
                None => out.push_str(" — |"),
            }
        }
        out.push('\n');
    }
}

fn tables(
    args: &Args,
    engines: &[String],
    results: &BTreeMap<String, Vec<Value>>,
    medians: &Medians,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Medians of up to {} repetition(s), {} keys{}. In parentheses: holt-core's advantage over that \
         engine (peer ÷ holt-core for times and sizes, holt-core ÷ peer for rates; **>1× means \
         holt-core is better**). The reference figure is shown in bold; where durable holt-core \
         has no figure, read-only metrics are held against in-memory holt-core (`holt-core-mem`) \
         and write metrics are not compared.\n",
        results.values().map(Vec::len).max().unwrap_or(0),
        results.values().flatten().find_map(|v| v["keys"].as_u64()).unwrap_or(args.keys),
        if args.quick { ", quick mode (5× fewer operations per phase)" } else { "" }
    );
    out.push_str("### Reads, listings, writes with the log in the page cache, space, memory\n\n");
    let wrong = wrong_pages(results);
    table(&mut out, MAIN, medians, engines, &wrong);
    out.push_str("\n### fsync-durable overwrites (each write its own commit)\n\n");
    table(&mut out, FSYNC, medians, engines, &wrong);
    out.push_str("\n### Deferred work behind the amortized overwrite figure\n\n");
    out.push_str("| engine | put only (µs) | finish (s) | amortized (µs) | disk / logical | fsync 64 ÷ 1 writer | 64 tasks ÷ the faster single writer |\n|---|---|---|---|---|---|---|\n");
    for engine in engines {
        let Some(e) = medians.get(engine) else { continue };
        let get = |k: &str| e.get(k).map(|v| fmt(*v)).unwrap_or_else(|| "—".into());
        let density = match (e.get("disk_bytes"), e.get("logical_bytes")) {
            (Some(d), Some(l)) if *l > 0.0 => fmt(d / l),
            _ => "—".into(),
        };
        let ratio = |a: &str, b: &str| match (e.get(a), e.get(b)) {
            (Some(a), Some(b)) if *b > 0.0 => fmt(a / b),
            _ => "—".into(),
        };
        let scaling = ratio("fsync_w64_ops_s", "fsync_w1_ops_s");
        // Held against the faster single writer, a blocking thread or one awaiting task.
        let single =
            ["fsync_w1_ops_s", "fsync_t1_ops_s"].iter().filter_map(|k| e.get(*k).copied()).reduce(f64::max);
        let task_scaling = match (e.get("fsync_t64_ops_s"), single) {
            (Some(a), Some(b)) if b > 0.0 => fmt(a / b),
            _ => "—".into(),
        };
        let _ = writeln!(
            out,
            "| {engine} | {} | {} | {} | {density} | {scaling} | {task_scaling} |",
            get("overwrite_async_put_us"),
            get("overwrite_async_finish_s"),
            get("overwrite_async_amortized_us")
        );
    }
    out.push_str("\n### Listing pages (shape and agreement)\n\n");
    out.push_str("| engine | key-heavy: prefixes + keys | bucket root | wide root | digests (key-heavy / bucket / wide) |\n|---|---|---|---|---|\n");
    for engine in engines {
        let Some(first) = results
            .get(engine)
            .and_then(|r| r.iter().find(|v| v["metrics"].get("list_key_heavy_keys").is_some()))
        else {
            continue;
        };
        let m = &first["metrics"];
        let shape = |p: &str| format!("{} + {}", m[format!("{p}_prefixes")], m[format!("{p}_keys")]);
        let digest = |p: &str| {
            m[format!("{p}_digest")].as_str().map(|s| s[..8].to_string()).unwrap_or_else(|| "—".into())
        };
        let _ = writeln!(
            out,
            "| {engine} | {} | {} | {} | {} / {} / {} |",
            shape("list_key_heavy"),
            shape("list_bucket_root"),
            shape("list_wide_root"),
            digest("list_key_heavy"),
            digest("list_bucket_root"),
            digest("list_wide_root")
        );
    }
    for (engine, listing) in &wrong {
        let _ = writeln!(
            out,
            "\n**{engine} returned a different page for `{listing}` than the other engines** (its digest and \
             counts above): its timing for that listing is for a wrong answer and is not compared."
        );
    }
    out.push_str("\n### Failures and skipped phases\n\n");
    let mut any = false;
    for engine in engines {
        for run in results.get(engine).into_iter().flatten() {
            for (kind, field) in [("failed", "errors"), ("skipped", "skipped")] {
                if let Some(map) = run[field].as_object() {
                    for (phase, why) in map {
                        any = true;
                        let why = why.as_str().unwrap_or_default().replace('\n', " ");
                        let why: String = why.chars().take(200).collect();
                        let _ =
                            writeln!(out, "- {engine}, repetition {}: `{phase}` {kind}: {why}", run["rep"]);
                    }
                }
            }
        }
    }
    for engine in engines {
        if let Some(from) =
            results.get(engine).and_then(|r| r.iter().find_map(|v| v["included_from"].as_str()))
        {
            any = true;
            let _ =
                writeln!(out, "- {engine}: figures merged from an earlier run ({from}), not from this one");
        }
    }
    if !any {
        out.push_str("None.\n");
    }
    out
}

/// `metric,engine,advantage` rows for the chart (only where a reference exists).
fn headline_csv(medians: &Medians, wrong: &[(String, &str)]) -> String {
    let mut out = String::from("metric,engine,advantage\n");
    for m in MAIN.iter().chain(FSYNC.iter().filter(|m| m.key.ends_with("ops_s"))) {
        let Some((h, name)) = reference(medians, m) else { continue };
        for (engine, e) in medians {
            if engine == name
                || engine.starts_with("holt-core")
                || wrong.iter().any(|(w, listing)| w == engine && m.key.starts_with(listing))
            {
                continue;
            }
            if let Some(r) = e.get(m.key).and_then(|v| advantage(m, h, *v)) {
                let _ = writeln!(out, "{},{engine},{r:.4}", m.title.replace(',', ";"));
            }
        }
    }
    out
}
