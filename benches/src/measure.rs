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

/// mimalloc (every bench process's allocator), counting the bytes allocated and not yet
/// freed while `count_live_heap` is on (off, the count costs a relaxed load per call): the
/// heap a program holds, against the anonymous memory the allocator keeps resident for it.
pub struct CountingMiMalloc;

static COUNTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static LIVE: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// Starts counting live heap bytes: `HOLT_BENCH_COUNT_HEAP=1` turns it on at the start of
/// `engine_bench`'s `main`. Allocations made before are not counted but their frees are, so
/// the count is the growth since then (clamped at zero), the few start-up bytes aside.
pub fn count_live_heap() {
    COUNTING.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Heap bytes allocated and not freed since `count_live_heap`; `None` when not counting.
pub fn live_heap_bytes() -> Option<u64> {
    use std::sync::atomic::Ordering::Relaxed;
    COUNTING.load(Relaxed).then(|| LIVE.load(Relaxed).max(0) as u64)
}

fn count(delta: i64) {
    use std::sync::atomic::Ordering::Relaxed;
    if COUNTING.load(Relaxed) {
        LIVE.fetch_add(delta, Relaxed);
    }
}

// SAFETY: every call goes to mimalloc unchanged; the counting touches no allocation.
unsafe impl std::alloc::GlobalAlloc for CountingMiMalloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        count(layout.size() as i64);
        // SAFETY: the caller's contract, passed on.
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        count(-(layout.size() as i64));
        // SAFETY: the caller's contract, passed on.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        count(layout.size() as i64);
        // SAFETY: the caller's contract, passed on.
        unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        count(new_size as i64 - layout.size() as i64);
        // SAFETY: the caller's contract, passed on.
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
    }
}

/// The largest anonymous (heap) and file-backed (mapped files) resident bytes of this
/// process since the last `take`, and the largest live heap (`live_heap_bytes`, when
/// counted), sampled every 10 ms by a thread that runs until the process exits: where a peak
/// RSS comes from, phase by phase.
pub struct RssPeaks(std::sync::Arc<Peaks>);

/// What `RssPeaks` has seen since its last `take`.
#[derive(Default)]
struct Peaks {
    anon: std::sync::atomic::AtomicU64,
    file: std::sync::atomic::AtomicU64,
    live: std::sync::atomic::AtomicU64,
}

/// A phase's peaks (bytes); `live` is `None` when the heap is not counted.
pub struct PhasePeaks {
    pub anon: u64,
    pub file: u64,
    pub live: Option<u64>,
}

impl Peaks {
    fn sample(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(b) = proc_status_bytes("RssAnon") {
            self.anon.fetch_max(b, Relaxed);
        }
        if let Some(b) = proc_status_bytes("RssFile") {
            self.file.fetch_max(b, Relaxed);
        }
        if let Some(b) = live_heap_bytes() {
            self.live.fetch_max(b, Relaxed);
        }
    }
}

impl RssPeaks {
    pub fn start() -> RssPeaks {
        let peaks = std::sync::Arc::new(Peaks::default());
        let sampled = std::sync::Arc::clone(&peaks);
        std::thread::spawn(move || loop {
            sampled.sample();
            std::thread::sleep(std::time::Duration::from_millis(10));
        });
        RssPeaks(peaks)
    }

    /// The peaks since the last call (now included), and starts over.
    pub fn take(&self) -> PhasePeaks {
        use std::sync::atomic::Ordering::Relaxed;
        self.0.sample();
        let live = self.0.live.swap(0, Relaxed);
        PhasePeaks {
            anon: self.0.anon.swap(0, Relaxed),
            file: self.0.file.swap(0, Relaxed),
            live: live_heap_bytes().map(|_| live),
        }
    }
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
