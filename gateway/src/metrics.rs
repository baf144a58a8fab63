//! Prometheus metrics: requests by operation and status, latency histograms per operation,
//! and the engine's `Db::stats()`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
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
}

#[derive(Default)]
pub struct Metrics {
    state: Mutex<State>,
}

impl Metrics {
    pub fn new() -> Self {
        Self::default()
    }

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
            out.push_str("# HELP holt_request_duration_seconds Request latency by operation.\n");
            out.push_str("# TYPE holt_request_duration_seconds histogram\n");
            for (op, h) in &s.latency {
                for (bound, n) in LATENCY_BUCKETS_S.iter().zip(h.buckets.iter()) {
                    let _ = writeln!(
                        out,
                        "holt_request_duration_seconds_bucket{{operation=\"{op}\",le=\"{bound}\"}} {n}"
                    );
                }
                let _ = writeln!(
                    out,
                    "holt_request_duration_seconds_bucket{{operation=\"{op}\",le=\"+Inf\"}} {}",
                    h.count
                );
                let _ = writeln!(out, "holt_request_duration_seconds_sum{{operation=\"{op}\"}} {}", h.sum_s);
                let _ =
                    writeln!(out, "holt_request_duration_seconds_count{{operation=\"{op}\"}} {}", h.count);
            }
        }
        let engine: [(&str, &str, u64); 16] = [
            ("keys", "gauge", stats.keys),
            ("frames", "gauge", stats.frames),
            ("frames_cached", "gauge", stats.frames_cached),
            ("frames_dirty", "gauge", stats.frames_dirty),
            ("cache_bytes", "gauge", stats.cache_bytes),
            ("frame_reads_total", "counter", stats.frame_reads),
            ("frame_evictions_total", "counter", stats.frame_evictions),
            ("frame_image_reads_total", "counter", stats.frame_image_reads),
            ("wal_bytes_written_total", "counter", stats.wal_bytes_written),
            ("wal_syncs_total", "counter", stats.wal_syncs),
            ("checkpoints_total", "counter", stats.checkpoints),
            ("checkpoint_stall_max_us", "gauge", stats.checkpoint_stall_max_us),
            ("checkpoint_frames_whole_total", "counter", stats.checkpoint_frames_whole),
            ("checkpoint_frames_delta_total", "counter", stats.checkpoint_frames_delta),
            ("last_lsn", "gauge", stats.last_lsn),
            ("durable_lsn", "gauge", stats.durable_lsn),
        ];
        for (name, kind, v) in engine {
            let _ = writeln!(out, "# TYPE holt_engine_{name} {kind}\nholt_engine_{name} {v}");
        }
        out
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
}
