//! Concurrent readers and writers: every read is checked against what was written. Each
//! writer owns a key range and stores a strictly increasing counter in each key; after a write
//! returns, the writer publishes the counter it wrote. A reader that starts after that must
//! see that counter or a later one (reads are linearizable), listings come back in order, and
//! keys that writers delete and re-create are either absent or hold a well-formed value. Frames
//! are tiny so splits and merges run concurrently with everything else, and the cache holds a
//! quarter of the frames so clean frames are evicted and read back under the same load. A
//! checkpointer cleans the dirty frames meanwhile (writes to evicted frames are recorded in
//! their change logs, and frames loaded to take writes stay dirty until a checkpoint).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use holt_core::testing::TreeHarness;
use holt_core::{BatchOp, Condition, ListItem, ListRequest};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const WRITERS: usize = 3;
const READERS: usize = 3;
const KEYS_PER_WRITER: usize = 100;
const ROUNDS: usize = 30;
/// Reads that must run while the writers are still writing.
const MIN_READS: u64 = 500;

fn key(writer: usize, i: usize) -> Vec<u8> {
    format!("w{writer}/d{}/k{i:04}", i % 5).into_bytes()
}

fn scratch_key(writer: usize, i: usize) -> Vec<u8> {
    format!("w{writer}/d{}/tmp{i:04}", i % 5).into_bytes()
}

fn decode(value: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&value[..8]);
    u64::from_le_bytes(a)
}

fn encode(counter: u64, pad: usize) -> Vec<u8> {
    let mut v = counter.to_le_bytes().to_vec();
    v.resize(8 + pad, (counter % 251) as u8);
    v
}

/// Checks a value's padding matches its counter (a torn or mixed value would not).
fn well_formed(value: &[u8]) -> bool {
    value.len() >= 8 && value[8..].iter().all(|&b| b == (decode(value) % 251) as u8)
}

#[test]
fn readers_see_every_committed_write_while_frames_split_and_merge() {
    let seed =
        std::env::var("HOLT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random::<u64>);
    println!("seed {seed} (replay with HOLT_SEED={seed})");
    // Start from a checkpointed tree re-opened with a cache smaller than its frames, so readers
    // and writers also race with frames being evicted and read back.
    let tree = TreeHarness::new(2048);
    for w in 0..WRITERS {
        let ops: Vec<BatchOp> = (0..KEYS_PER_WRITER)
            .map(|i| BatchOp::Put { key: key(w, i), value: encode(0, 20), condition: Condition::None })
            .collect();
        tree.apply(&ops).unwrap();
    }
    let cache_bytes = tree.encoded_bytes() as usize / 4;
    let tree = Arc::new(tree.reopen(cache_bytes).unwrap());
    let committed: Arc<Vec<AtomicU64>> =
        Arc::new((0..WRITERS * KEYS_PER_WRITER).map(|_| AtomicU64::new(0)).collect());
    let done = Arc::new(AtomicBool::new(false));
    // Reads checked so far: writers keep writing past ROUNDS until readers have had their turn,
    // however the scheduler shares two cores between them.
    let reads = Arc::new(AtomicU64::new(0));

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (tree, committed, reads) = (Arc::clone(&tree), Arc::clone(&committed), Arc::clone(&reads));
            thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ (w as u64 + 1));
                let mut round = 0u64;
                while round < ROUNDS as u64
                    || (reads.load(Ordering::Relaxed) < MIN_READS && round < 100 * ROUNDS as u64)
                {
                    round += 1;
                    // Each round rewrites every key of this writer in batches of 1..8 keys.
                    let mut i = 0;
                    while i < KEYS_PER_WRITER {
                        let n = rng.gen_range(1..8).min(KEYS_PER_WRITER - i);
                        let mut ops: Vec<BatchOp> = (i..i + n)
                            .map(|j| BatchOp::Put {
                                key: key(w, j),
                                value: encode(round, rng.gen_range(0..40)),
                                condition: Condition::None,
                            })
                            .collect();
                        // Scratch keys come and go, so frames shrink and merge as well as split.
                        let s = rng.gen_range(0..KEYS_PER_WRITER);
                        ops.push(if rng.gen_bool(0.5) {
                            BatchOp::Put {
                                key: scratch_key(w, s),
                                value: encode(round, 60),
                                condition: Condition::None,
                            }
                        } else {
                            BatchOp::Delete { key: scratch_key(w, s), condition: Condition::None }
                        });
                        tree.apply(&ops).unwrap();
                        for j in i..i + n {
                            committed[w * KEYS_PER_WRITER + j].store(round, Ordering::Release);
                        }
                        i += n;
                        // Two cores: let readers interleave with the writers.
                        thread::yield_now();
                    }
                }
                round
            })
        })
        .collect();

    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let (tree, committed, done, reads) =
                (Arc::clone(&tree), Arc::clone(&committed), Arc::clone(&done), Arc::clone(&reads));
            thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ (100 + r as u64));
                let mut checks = 0u64;
                while !done.load(Ordering::Acquire) {
                    let w = rng.gen_range(0..WRITERS);
                    if rng.gen_bool(0.8) {
                        let i = rng.gen_range(0..KEYS_PER_WRITER);
                        let floor = committed[w * KEYS_PER_WRITER + i].load(Ordering::Acquire);
                        match tree.get(&key(w, i)).unwrap() {
                            Some(e) => {
                                assert!(well_formed(&e.value), "torn value under {:?}", key(w, i));
                                assert!(
                                    decode(&e.value) >= floor,
                                    "stale read: {} < {floor}",
                                    decode(&e.value)
                                );
                            }
                            None => assert_eq!(floor, 0, "committed key {:?} vanished", key(w, i)),
                        }
                        let s = rng.gen_range(0..KEYS_PER_WRITER);
                        if let Some(e) = tree.get(&scratch_key(w, s)).unwrap() {
                            assert!(well_formed(&e.value));
                        }
                    } else {
                        let prefix = format!("w{w}/").into_bytes();
                        let floors: Vec<u64> = (0..KEYS_PER_WRITER)
                            .map(|i| committed[w * KEYS_PER_WRITER + i].load(Ordering::Acquire))
                            .collect();
                        let request = ListRequest {
                            prefix: &prefix,
                            limit: 10_000,
                            with_values: true,
                            ..Default::default()
                        };
                        let (page, _) = tree.list(&request).unwrap();
                        let keys: Vec<&[u8]> = page.items.iter().map(ListItem::name).collect();
                        assert!(keys.windows(2).all(|p| p[0] < p[1]), "listing out of order");
                        for item in &page.items {
                            let ListItem::Key { key: k, entry } = item else {
                                panic!("no delimiter, no prefixes")
                            };
                            assert!(well_formed(&entry.value));
                            if let Some(i) = (0..KEYS_PER_WRITER).find(|&i| key(w, i) == *k) {
                                assert!(decode(&entry.value) >= floors[i], "stale value in listing");
                            }
                        }
                        let present = floors.iter().filter(|&&f| f > 0).count();
                        let listed =
                            page.items.iter().filter(|i| !i.name().windows(3).any(|x| x == b"tmp")).count();
                        assert!(listed >= present, "listing lost keys: {listed} < {present}");
                    }
                    checks += 1;
                    reads.fetch_add(1, Ordering::Relaxed);
                }
                checks
            })
        })
        .collect();

    let checkpointer = {
        let (tree, done) = (Arc::clone(&tree), Arc::clone(&done));
        thread::spawn(move || {
            let mut checkpoints = 0u64;
            while !done.load(Ordering::Acquire) {
                tree.checkpoint().unwrap();
                checkpoints += 1;
                thread::sleep(std::time::Duration::from_millis(2));
            }
            checkpoints
        })
    };

    let last_rounds: Vec<u64> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    done.store(true, Ordering::Release);
    let checkpoints = checkpointer.join().unwrap();
    println!("{checkpoints} checkpoints beside the writers");
    let checks: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    println!("{checks} reads checked, {} frames at the end", tree.frame_count());
    assert!(checks >= MIN_READS, "only {checks} reads ran concurrently with the writers");
    assert!(tree.frame_count() > 5, "frames never split");
    let (reads, evictions) = tree.cache_counters();
    println!("{reads} frame reads, {evictions} evictions");
    assert!(reads > 0 && evictions > 0, "the cache never evicted and re-read a frame");
    tree.check().unwrap();
    for (w, &last) in last_rounds.iter().enumerate() {
        for i in 0..KEYS_PER_WRITER {
            assert_eq!(decode(&tree.get(&key(w, i)).unwrap().unwrap().value), last);
        }
    }
}
