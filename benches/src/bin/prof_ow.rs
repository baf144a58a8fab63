// Temporary profiling driver (not committed).
use std::time::Instant;
use holt_benches::data::{self, DataSet, Rng};
use holt_benches::engines::{self, OpenOptions, WriteMode};
use holt_benches::workloads;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let count: usize = args.get(1).map(|s| s.parse().unwrap()).unwrap_or(100_000);
    let rounds: usize = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(3);
    let set = DataSet::new(1_000_000);
    let mut rng = Rng::new(0x5EED_2026);
    let order = data::permutation(set.len(), &mut rng);
    let dir = std::path::PathBuf::from("/tmp/prof/owdb");
    let _ = std::fs::remove_dir_all(&dir);
    let opts = OpenOptions { mode: WriteMode::LogToPageCache, cache_bytes: 256 << 20 };
    let engine = engines::open("holt-core", &dir, opts).unwrap();
    workloads::load(&*engine, &set, &order).unwrap();
    engine.finish().unwrap();
    eprintln!("loaded");
    std::fs::write("/tmp/prof/ow.ready", b"1").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    for _ in 0..rounds {
        let t = Instant::now();
        let o = workloads::overwrite(&*engine, &set, &mut rng, count).unwrap();
        eprintln!("overwrite {:?} in {:?}", o, t.elapsed());
    }
}
