//! Prometheus metrics: requests by operation and status, latency histograms per operation,
//! how long engine writes held an async worker thread, and the engine's `Db::stats()`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

/// Upper bounds of the latency buckets, in seconds.
const LATENCY_BUCKETS_S: [f64; 14] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

#[derive(Default)]
struct Histogram {
    buckets: [u64; LATENCY_BUCKETS_S.len()],
    count: u64,
    sum_s: f64,
}

#[derive(Default)]
struct State {
    requests: BTreeMap<(&'static str, u16), u64>,
    latency: BTreeMap<&'static str, Histogram>,
    /// Reloads on SIGHUP by what was reloaded and whether it took.
    reloads: BTreeMap<(&'static str, &'static str), u64>,
}

/// The gateway's request counters and latency histograms, shared by every request (one
/// mutex; an update is a few map operations).
#[derive(Default)]
pub struct Metrics {
    state: Mutex<State>,
}

impl Metrics {
    /// Empty counters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one answered request: `op` is the operation name (or a pipeline label such as
    /// `SlowDown` or `Invalid`), `status` the HTTP status, `latency` the time from arrival until
    /// the response was ready (a streamed body's transfer is not included).
    pub fn record(&self, op: &'static str, status: u16, latency: Duration) {
        let secs = latency.as_secs_f64();
        let mut s = self.state.lock();
        *s.requests.entry((op, status)).or_insert(0) += 1;
        let h = s.latency.entry(op).or_default();
        h.count += 1;
        h.sum_s += secs;
        for (i, bound) in LATENCY_BUCKETS_S.iter().enumerate() {
            if secs <= *bound {
                h.buckets[i] += 1;
            }
        }
    }

    /// A reload of `what` (`credentials`, `tls`) that took (`ok`) or kept the old state.
    pub fn record_reload(&self, what: &'static str, ok: bool) {
        let outcome = if ok { "ok" } else { "failed" };
        *self.state.lock().reloads.entry((what, outcome)).or_insert(0) += 1;
    }

    /// The Prometheus text exposition.
    pub fn render(&self, stats: &holt_core::Stats) -> String {
        let mut out = String::new();
        {
            let s = self.state.lock();
            out.push_str("# HELP holt_requests_total S3 requests by operation and HTTP status.\n");
            out.push_str("# TYPE holt_requests_total counter\n");
            for ((op, status), n) in &s.requests {
                let _ = writeln!(out, "holt_requests_total{{operation=\"{op}\",status=\"{status}\"}} {n}");
            }
            out.push_str("# HELP holt_reloads_total Reloads on SIGHUP, by what and outcome (failed: the old state kept).\n");
            out.push_str("# TYPE holt_reloads_total counter\n");
            for ((what, outcome), n) in &s.reloads {
                let _ = writeln!(out, "holt_reloads_total{{what=\"{what}\",outcome=\"{outcome}\"}} {n}");
            }
            out.push_str("# HELP holt_request_duration_seconds Request latency by operation.\n");
            out.push_str("# TYPE holt_request_duration_seconds histogram\n");
            for (op, h) in &s.latency {
                let cumulative = LATENCY_BUCKETS_S.iter().copied().zip(h.buckets.iter().copied());
                let labels = format!("operation=\"{op}\"");
                write_histogram(
                    &mut out,
                    "holt_request_duration_seconds",
                    &labels,
                    cumulative,
                    h.count,
                    h.sum_s,
                );
            }
        }
        let engine: [(&str, &str, u64); 25] = [
            ("keys", "gauge", stats.keys),
            ("frames", "gauge", stats.frames),
            ("frames_cached", "gauge", stats.frames_cached),
            ("frames_dirty", "gauge", stats.frames_dirty),
            ("cache_bytes", "gauge", stats.cache_bytes),
            ("frame_reads_total", "counter", stats.frame_reads),
            ("frame_loads_total", "counter", stats.frame_loads),
            ("frame_dirty_evictions_total", "counter", stats.frame_dirty_evictions),
            ("frame_evictions_total", "counter", stats.frame_evictions),
            ("frame_image_reads_total", "counter", stats.frame_image_reads),
            ("frame_page_reads_total", "counter", stats.frame_page_reads),
            ("frame_unloaded_writes_total", "counter", stats.frame_unloaded_writes),
            ("frame_delta_verifies_total", "counter", stats.frame_delta_verifies),
            ("frame_delta_evictions_total", "counter", stats.frame_delta_evictions),
            ("wal_bytes_written_total", "counter", stats.wal_bytes_written),
            ("wal_syncs_total", "counter", stats.wal_syncs),
            ("checkpoints_total", "counter", stats.checkpoints),
            ("checkpoint_running", "gauge", u64::from(stats.checkpoint_running)),
            ("checkpoint_stall_max_us", "gauge", stats.checkpoint_stall_max_us),
            ("checkpoint_frames_whole_total", "counter", stats.checkpoint_frames_whole),
            ("checkpoint_frames_delta_total", "counter", stats.checkpoint_frames_delta),
            ("checkpoint_chains_merged_total", "counter", stats.checkpoint_chains_merged),
            ("checkpoint_frames_rewritten_total", "counter", stats.checkpoint_frames_rewritten),
            ("last_lsn", "gauge", stats.last_lsn),
            ("durable_lsn", "gauge", stats.durable_lsn),
        ];
        for (name, kind, v) in engine {
            let _ = writeln!(out, "# TYPE holt_engine_{name} {kind}\nholt_engine_{name} {v}");
        }
        out
    }
}

/// One histogram's series in the text exposition: `cumulative` pairs each bucket's upper
/// bound with the count at or below it; `labels` (`key="value"` pairs, or empty) go on every
/// line.
fn write_histogram(
    out: &mut String,
    name: &str,
    labels: &str,
    cumulative: impl Iterator<Item = (f64, u64)>,
    count: u64,
    sum_s: f64,
) {
    let sep = if labels.is_empty() { "" } else { "," };
    for (bound, n) in cumulative {
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {n}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
    let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
    let _ = writeln!(out, "{name}_sum{braces} {sum_s}");
    let _ = writeln!(out, "{name}_count{braces} {count}");
}

/// Upper bounds of the buckets for the time an engine write holds a worker, in seconds: a
/// cached write takes microseconds; a millisecond or more means the thread was preempted or
/// the write waited (log ring full, the next log segment not ready, a checkpoint's capture,
/// a frame evicted since the check).
const WORKER_BUCKETS_S: [f64; 10] =
    [0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.01, 0.1];

/// How long engine writes applied on an async worker thread held it (`Store::write`), and
/// how many went to the blocking pool instead. Recorded lock-free by every write (one bucket
/// each; the exposition sums them), read by `/metrics`.
#[derive(Default)]
pub struct WorkerTimes {
    buckets: [AtomicU64; WORKER_BUCKETS_S.len()],
    count: AtomicU64,
    sum_ns: AtomicU64,
    max_ns: AtomicU64,
    pool: AtomicU64,
}

impl WorkerTimes {
    /// A write that ran on the worker for `held`.
    pub fn record_inline(&self, held: Duration) {
        let secs = held.as_secs_f64();
        if let Some(i) = WORKER_BUCKETS_S.iter().position(|&bound| secs <= bound) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        let ns = u64::try_from(held.as_nanos()).unwrap_or(u64::MAX);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// A write sent to the blocking pool (a frame on its path was not cached).
    pub fn record_pool(&self) {
        self.pool.fetch_add(1, Ordering::Relaxed);
    }

    /// Writes recorded so far: (applied on a worker, sent to the blocking pool).
    pub fn counts(&self) -> (u64, u64) {
        (self.count.load(Ordering::Relaxed), self.pool.load(Ordering::Relaxed))
    }

    /// The Prometheus text exposition, appended to `out`.
    pub fn render(&self, out: &mut String) {
        const NAME: &str = "holt_engine_write_worker_seconds";
        let _ = writeln!(out, "# HELP {NAME} Time engine writes held an async worker thread.");
        let _ = writeln!(out, "# TYPE {NAME} histogram");
        let cumulative = WORKER_BUCKETS_S.iter().zip(&self.buckets).scan(0, |below, (&bound, n)| {
            *below += n.load(Ordering::Relaxed);
            Some((bound, *below))
        });
        let count = self.count.load(Ordering::Relaxed);
        let sum_s = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        write_histogram(out, NAME, "", cumulative, count, sum_s);
        let max = self.max_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "# HELP {NAME}_max The longest such hold since start-up.");
        let _ = writeln!(out, "# TYPE {NAME}_max gauge\n{NAME}_max {max}");
        let pool = self.pool.load(Ordering::Relaxed);
        let _ = writeln!(out, "# HELP holt_engine_writes_pool_total Engine writes run on the blocking pool.");
        let _ = writeln!(
            out,
            "# TYPE holt_engine_writes_pool_total counter\nholt_engine_writes_pool_total {pool}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_and_histograms() {
        let m = Metrics::new();
        m.record("GetObject", 200, Duration::from_millis(3));
        m.record("GetObject", 404, Duration::from_millis(30));
        let text = m.render(&holt_core::Stats::default());
        assert!(text.contains("holt_requests_total{operation=\"GetObject\",status=\"200\"} 1"));
        assert!(text.contains("holt_request_duration_seconds_bucket{operation=\"GetObject\",le=\"0.005\"} 1"));
        assert!(text.contains("holt_request_duration_seconds_count{operation=\"GetObject\"} 2"));
        assert!(text.contains("holt_engine_keys 0"));
    }

    #[test]
    fn worker_times_render_cumulative_buckets_and_the_maximum() {
        let w = WorkerTimes::default();
        w.record_inline(Duration::from_micros(8));
        w.record_inline(Duration::from_micros(40));
        w.record_inline(Duration::from_millis(3));
        w.record_inline(Duration::from_secs(1));
        w.record_pool();
        let mut text = String::new();
        w.render(&mut text);
        let line = |le: &str| format!("holt_engine_write_worker_seconds_bucket{{le=\"{le}\"}} ");
        assert!(text.contains(&(line("0.00001") + "1\n")), "{text}");
        assert!(text.contains(&(line("0.000025") + "1\n")), "{text}");
        assert!(text.contains(&(line("0.00005") + "2\n")), "{text}");
        assert!(text.contains(&(line("0.0025") + "2\n")), "{text}");
        assert!(text.contains(&(line("0.01") + "3\n")), "{text}");
        assert!(text.contains(&(line("0.1") + "3\n")), "{text}");
        assert!(text.contains(&(line("+Inf") + "4\n")), "{text}");
        assert!(text.contains("holt_engine_write_worker_seconds_count 4\n"), "{text}");
        assert!(text.contains("holt_engine_write_worker_seconds_max 1\n"), "{text}");
        assert!(text.contains("holt_engine_writes_pool_total 1\n"), "{text}");
    }
}
