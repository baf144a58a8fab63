//! `Db::usage`: the keys and weight under any prefix, from the counts the nodes and frames
//! carry, against a count of a model, through overwrites and deletes, checkpoints, reopens
//! with the frames evicted, writes recorded to evicted frames, log replay, a change of
//! weigher, and writers racing splits and merges.

mod page_cache;

use std::collections::BTreeMap;
use std::sync::Arc;

use holt_core::testing::TreeHarness;
use holt_core::{Batch, BatchOp, Db, ListEntry, ListRequest, Usage, Weigher, WriteOptions};
use page_cache::{drop_page_cache, options, scratch_dir};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// The weigher the gateway's tests stand in for: a value weighs its length.
const BY_LENGTH: Weigher = Weigher { name: "test-length", weigh: |v| v.len() as u64 };
/// Another weigher: a value weighs its first byte.
const BY_FIRST_BYTE: Weigher =
    Weigher { name: "test-first-byte", weigh: |v| v.first().map_or(0, |&b| u64::from(b)) };

fn key(i: u32) -> Vec<u8> {
    format!("bucket-{}/tenant-{:02}/dir-{:03}/file-{:07}.bin", i % 2, (i / 2) % 30, (i / 60) % 40, i)
        .into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    vec![b'a' + (i % 26) as u8; 20 + ((i * 7 + round * 13) % 90) as usize]
}

fn model_usage(model: &Model, prefix: &[u8], weigh: fn(&[u8]) -> u64) -> Usage {
    let under = model.range(prefix.to_vec()..).take_while(|(k, _)| k.starts_with(prefix));
    under.fold(Usage::default(), |u, (_, v)| Usage { keys: u.keys + 1, weight: u.weight + weigh(v) })
}

/// Prefixes of every shape: the whole database, a bucket, tenants and directories, prefixes
/// ending inside a name (and so inside a node's compressed path or a leaf's suffix), whole
/// keys, and prefixes nothing starts with.
fn prefixes(rng: &mut StdRng, count: u32) -> Vec<Vec<u8>> {
    let mut all = vec![Vec::new(), b"bucket-1/".to_vec(), b"bucket-".to_vec(), b"zzz".to_vec()];
    for _ in 0..300 {
        let k = key(rng.gen_range(0..count));
        let cut = rng.gen_range(0..=k.len());
        all.push(k[..cut].to_vec());
    }
    all.push(b"bucket-0/tenant-04/dir-00".to_vec());
    all.push(b"bucket-0/tenant-04/dir-999/".to_vec());
    all
}

fn check(db: &Db, model: &Model, prefixes: &[Vec<u8>], weigh: fn(&[u8]) -> u64, when: &str) {
    for prefix in prefixes {
        let got = db.usage(prefix).unwrap();
        let want = model_usage(model, prefix, weigh);
        assert_eq!(got, want, "{when}: usage of {:?}", String::from_utf8_lossy(prefix));
    }
    // A page of a delimiter listing with each common prefix's usage (`du --max-depth=1`).
    for prefix in prefixes.iter().take(40) {
        let request =
            ListRequest { prefix, delimiter: b"/", start_after: b"", limit: 50, with_values: false };
        let mut rolled = 0;
        db.list_with_usage(&request, &mut |entry, usage| match entry {
            ListEntry::CommonPrefix(cp) => {
                rolled += 1;
                let want = model_usage(model, cp, weigh);
                assert_eq!(usage, Some(want), "{when}: usage of {:?} in a page", String::from_utf8_lossy(cp));
            }
            ListEntry::Key { .. } => assert_eq!(usage, None),
        })
        .unwrap();
        if prefix.is_empty() {
            assert_eq!(rolled, 2, "{when}: the two buckets roll up");
        }
    }
}

#[test]
fn usage_of_any_prefix_matches_a_count_through_writes_reopens_and_eviction() {
    let seed: u64 = rand::thread_rng().gen();
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = scratch_dir("usage-");
    let count = 120_000u32;
    let weighed = |budget| holt_core::Options { weigher: Some(BY_LENGTH), ..options(budget) };
    let weigh = BY_LENGTH.weigh;
    let mut model = Model::new();

    let db = Db::open(dir.path(), weighed(usize::MAX)).unwrap();
    for chunk in (0..count).collect::<Vec<_>>().chunks(1_000) {
        let mut batch = Batch::new();
        for &i in chunk {
            batch.put(key(i), value(i, 0));
            model.insert(key(i), value(i, 0));
        }
        db.write_batch(&batch, WriteOptions::default()).unwrap();
    }
    let frames = db.stats().frames;
    assert!(frames > 20, "only {frames} frames");
    let shapes = prefixes(&mut rng, count);
    check(&db, &model, &shapes, weigh, "after loading");

    // Overwrites with other lengths, deletes (some emptying whole directories), new keys.
    for round in 1..=2u32 {
        for _ in 0..5_000 {
            let i = rng.gen_range(0..count + 10_000);
            if rng.gen_bool(0.3) {
                db.delete(&key(i)).unwrap();
                model.remove(&key(i));
            } else {
                db.put(&key(i), &value(i, round)).unwrap();
                model.insert(key(i), value(i, round));
            }
        }
        let dir_prefix = format!("bucket-{}/tenant-{:02}/dir-{:03}/", round % 2, round, round);
        let doomed: Vec<Vec<u8>> =
            model.keys().filter(|k| k.starts_with(dir_prefix.as_bytes())).cloned().collect();
        for k in &doomed {
            db.delete(k).unwrap();
            model.remove(k);
        }
        check(&db, &model, &shapes, weigh, &format!("after round {round}"));
        db.checkpoint().unwrap();
    }
    db.close().unwrap();

    // Reopened with the frames evicted: the totals come from the manifest, the nodes' counts
    // from the frames as they load.
    drop_page_cache(dir.path());
    let db = Db::open(dir.path(), weighed(2 << 20)).unwrap();
    check(&db, &model, &shapes, weigh, "after reopen");
    // Puts recorded to evicted frames without loading them, not checkpointed; then a reopen
    // that replays them from the log.
    let before = db.stats().frame_unloaded_writes;
    for _ in 0..3_000 {
        let i = rng.gen_range(0..count);
        db.put(&key(i), &value(i, 7)).unwrap();
        model.insert(key(i), value(i, 7));
    }
    assert!(db.stats().frame_unloaded_writes > before, "no put was recorded to an evicted frame");
    check(&db, &model, &shapes, weigh, "after writes to evicted frames");
    db.close().unwrap();
    let db = Db::open(dir.path(), weighed(2 << 20)).unwrap();
    check(&db, &model, &shapes, weigh, "after replay");
    db.close().unwrap();

    // Another weigher, then none: the totals are counted again at open.
    let db = Db::open(dir.path(), holt_core::Options { weigher: Some(BY_FIRST_BYTE), ..options(2 << 20) })
        .unwrap();
    check(&db, &model, &shapes, BY_FIRST_BYTE.weigh, "with another weigher");
    db.close().unwrap();
    let db = Db::open(dir.path(), options(2 << 20)).unwrap();
    check(&db, &model, &shapes, |_| 0, "with no weigher");
    db.close().unwrap();
}

/// Writers in several threads put and delete keys across a few prefixes of a tree with
/// small frames, so frames split and merge under them while others add to their parents'
/// totals. Once they are done, every frame's totals equal a count of its keys (the harness's
/// invariant check) and every prefix's usage equals the model's.
#[test]
fn writers_racing_splits_and_merges_leave_exact_totals() {
    let tree = Arc::new(TreeHarness::new(16 * 1024));
    let threads = 4;
    let models: Vec<Model> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let tree = Arc::clone(&tree);
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(t);
                    let mut model = Model::new();
                    for n in 0..10_000u32 {
                        // Each thread owns its keys; the prefixes they share split and merge.
                        let k = format!(
                            "p{}/{:03}/t{t}-{:04}",
                            n % 3,
                            rng.gen_range(0..40),
                            rng.gen_range(0..400)
                        );
                        let mut k = k.into_bytes();
                        // Waves of deletes of the thread's own keys empty frames, which merge.
                        let delete = (n / 2_000) % 2 == 1 && !model.is_empty();
                        if delete {
                            let at = rng.gen_range(0..model.len());
                            k = model.keys().nth(at).cloned().unwrap_or(k);
                        }
                        let op = if delete {
                            model.remove(&k);
                            BatchOp::Delete { key: k, condition: holt_core::Condition::None }
                        } else {
                            let v = vec![b'v'; rng.gen_range(1..200)];
                            model.insert(k.clone(), v.clone());
                            BatchOp::Put { key: k, value: v, condition: holt_core::Condition::None }
                        };
                        tree.apply(&[op]).unwrap();
                    }
                    model
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let model: Model = models.into_iter().flatten().collect();
    let shapes = tree.shape_stats();
    assert!(shapes.splits > 10 && shapes.merges > 0, "the writers caused no splits or merges: {shapes:?}");
    // The last wave put keys back: the tree ends in many frames, split while others wrote.
    assert!(tree.frame_count() > 10, "{} frames at the end", tree.frame_count());
    tree.check().unwrap();
    for prefix in [&b""[..], b"p0/", b"p1/0", b"p2/039/", b"p2/039/t1-", b"q"] {
        let got = tree.usage(prefix).unwrap();
        assert_eq!(
            got,
            model_usage(&model, prefix, |v| v.len() as u64),
            "{:?}",
            String::from_utf8_lossy(prefix)
        );
    }
}
