//! Small measurement helpers: percentiles, resident memory, bytes on disk, page-cache eviction.

use std::path::Path;
use std::time::Duration;

/// The `q`-quantile (0..=1) of `samples` by nearest rank; 0 when empty. Sorts in place.
pub fn quantile(samples: &mut [u64], q: f64) -> u64 {
    if samples.is_empty() {
        return 0;
    }
    samples.sort_unstable();
    let rank = ((samples.len() as f64 - 1.0) * q.clamp(0.0, 1.0)).round() as usize;
    samples[rank.min(samples.len() - 1)]
}

/// Median of floats (the driver's median of repetitions); NaN-free input assumed.
pub fn median_f64(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    Some(if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 })
}

pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// A field of /proc/self/status in bytes (`VmHWM` = peak resident set, `VmRSS` = current).
pub fn proc_status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    for line in status.lines() {
        if let Some(rest) = line.strip_prefix(field).and_then(|r| r.strip_prefix(':')) {
            let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
            return Some(kib * 1024);
        }
    }
    None
}

/// Bytes allocated on disk under `dir` (st_blocks × 512, so sparse files count what they use).
pub fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            total += disk_bytes(&entry.path());
        } else {
            total += meta.blocks() * 512;
        }
    }
    total
}

/// Asks the kernel to drop the cached pages of every file under `dir`, so the next reads come
/// from the device (or at least not from the page cache). Best effort: dirty pages stay.
pub fn evict_page_cache(dir: &Path) {
    use std::os::unix::io::AsRawFd;
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            evict_page_cache(&path);
            continue;
        }
        if let Ok(file) = std::fs::File::open(&path) {
            let _ = file.sync_all();
            // SAFETY: plain syscall on a descriptor owned by `file` for the whole call.
            unsafe {
                libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        assert_eq!(quantile(&mut v, 0.0), 1);
        assert_eq!(quantile(&mut v, 0.5), 51);
        assert_eq!(quantile(&mut v, 1.0), 100);
        assert_eq!(quantile(&mut [], 0.5), 0);
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median_f64(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median_f64(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median_f64(&mut []), None);
    }

    #[test]
    fn peak_rss_is_readable() {
        let hwm = proc_status_bytes("VmHWM").expect("VmHWM in /proc/self/status");
        assert!(hwm > 0);
    }
}
