//! A directory deleted in one batch leaves its frame empty; the frame is unlinked and
//! retired. Its last root (every key and value the directory held) and its change log must
//! be freed then, not when the cache's clock hand next passes (which happens only when the
//! cache is over its budget). Creating and deleting directories in a loop, with a budget the
//! data never reaches, keeps the heap bounded.

use holt_core::{Batch, Db, Options, WriteOptions};
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

fn live_bytes() -> isize {
    let s = ALLOCATOR.stats();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

/// Keys enough for a directory to get frames of its own (a frame splits past 512 KiB).
const KEYS_PER_DIR: u32 = 12_000;

fn key(dir: u32, i: u32) -> Vec<u8> {
    format!("bucket/dir-{dir:04}/object-{i:08}.bin").into_bytes()
}

#[test]
fn deleted_directories_free_their_frames() {
    let db = Db::open_in_memory(Options { memory_budget_bytes: usize::MAX, ..Options::default() }).unwrap();
    // A neighbour that stays, so the tree keeps its shape around the deleted directories.
    for i in 0..1_000 {
        db.put(&key(9_999, i), b"stays").unwrap();
    }
    let value = vec![b'v'; 60];
    let mut after_first = 0;
    let rounds = 12;
    for round in 0..rounds {
        for chunk in (0..KEYS_PER_DIR).collect::<Vec<_>>().chunks(1_000) {
            let mut batch = Batch::new();
            for &i in chunk {
                batch.put(key(round, i), value.clone());
            }
            db.write_batch(&batch, WriteOptions::default()).unwrap();
        }
        // The whole directory in one batch: its frames are left empty and unlinked.
        let mut batch = Batch::new();
        for i in 0..KEYS_PER_DIR {
            batch.delete(key(round, i));
        }
        db.write_batch(&batch, WriteOptions::default()).unwrap();
        assert!(db.get(&key(round, 0)).unwrap().is_none());
        if round == 0 {
            after_first = live_bytes();
        }
    }
    let grown = live_bytes() - after_first;
    let stats = db.stats();
    println!(
        "{rounds} directories of {KEYS_PER_DIR} keys created and deleted: the heap grew {grown} B after the first; \
         {} frames, cache {} B",
        stats.frames, stats.cache_bytes
    );
    // One directory's decoded frames are several MB; eleven more kept alive would be tens.
    let one_dir = (KEYS_PER_DIR as isize) * 100;
    assert!(grown < one_dir, "the heap grew {grown} B over {} more directories", rounds - 1);
    assert_eq!(db.get(&key(9_999, 7)).unwrap().map(|e| e.value), Some(b"stays".to_vec()));
}
