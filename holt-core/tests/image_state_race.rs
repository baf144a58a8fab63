//! A batch over several evicted frames reads each key's state in its frame's image while it
//! looks for the key's owner, before latching anything, and uses that read instead of
//! walking the image again once latched, but only while the frame's generations are still
//! the ones it read them at (`ImageState`, src/tree/mod.rs). Here the failpoint
//! `apply-before-latch` (owners found, nothing latched) overwrites one of the batch's keys and
//! checkpoints, which moves the overwrite from the frame's change log (looked up before any
//! image) to a delta on disk: the batch's condition on that key's version must then fail, as
//! it would have had the overwrite come first; and a key created there must be counted once.
//!
//! Run: `cargo test -p holt-core --features failpoints --test image_state_race`.
#![cfg(feature = "failpoints")]

mod race;

use std::time::Duration;

use holt_core::testing::TreeHarness;
use holt_core::{BatchOp, Condition, Error, Version};

const FRAME_BUDGET: usize = 16 * 1024;

fn key(i: u32) -> Vec<u8> {
    format!("bucket/dir-{:03}/object-{i:06}", i % 97).into_bytes()
}

fn put(key: &[u8], value: &[u8], condition: Condition) -> BatchOp {
    BatchOp::Put { key: key.to_vec(), value: value.to_vec(), condition }
}

/// A tree of small frames, checkpointed and reopened with a cache that holds almost none of
/// them: every frame but the root is evicted, and the cache is full for writes.
fn evicted_tree() -> std::sync::Arc<TreeHarness> {
    let tree = TreeHarness::new(FRAME_BUDGET);
    let ops: Vec<BatchOp> = (0..20_000).map(|i| put(&key(i), b"loaded", Condition::None)).collect();
    for chunk in ops.chunks(500) {
        tree.apply(chunk).expect("load");
    }
    assert!(tree.frame_count() > 20, "only {} frames", tree.frame_count());
    std::sync::Arc::new(tree.reopen(64 * 1024).expect("reopen"))
}

/// Two keys far apart (in different frames), the first's version, and the batch's ops.
fn keys(tree: &TreeHarness) -> (Vec<u8>, Vec<u8>, Version) {
    let (first, second) = (key(1_234), key(17_890));
    let version = tree.get(&first).expect("get").expect("present").version;
    (first, second, version)
}

#[test]
fn a_write_between_the_owner_search_and_the_latch_is_seen_by_conditions() {
    let scenario = fail::FailScenario::setup();
    let tree = evicted_tree();
    let (first, second, version) = keys(&tree);
    let writer = {
        let (tree, first) = (std::sync::Arc::clone(&tree), first.clone());
        race::WriterAt::arm("apply-before-latch", Duration::from_secs(5), move || {
            tree.apply(&[put(&first, b"overwritten", Condition::None)]).expect("overwrite");
            tree.checkpoint().expect("checkpoint");
        })
    };
    let batch = [put(&first, b"batch", Condition::Version(version)), put(&second, b"batch", Condition::None)];
    let outcome = tree.apply(&batch);
    assert!(writer.join(), "the overwrite did not finish inside the window");
    assert!(matches!(outcome, Err(Error::ConditionFailed)), "the batch met a stale version: {outcome:?}");
    assert_eq!(tree.get(&first).expect("get").expect("present").value, b"overwritten");
    assert_eq!(tree.get(&second).expect("get").expect("present").value, b"loaded");
    tree.check().expect("invariants");
    scenario.teardown();
}

#[test]
fn a_put_after_a_racing_write_counts_the_key_once() {
    let scenario = fail::FailScenario::setup();
    let tree = evicted_tree();
    let (first, second, _) = keys(&tree);
    let fresh = b"bucket/dir-000/object-fresh".to_vec();
    let keys_before = tree.key_count();
    // The owner search reads `fresh` as absent; the write at the failpoint creates it.
    let writer = {
        let (tree, fresh) = (std::sync::Arc::clone(&tree), fresh.clone());
        race::WriterAt::arm("apply-before-latch", Duration::from_secs(5), move || {
            tree.apply(&[put(&fresh, b"created", Condition::None)]).expect("create");
            tree.checkpoint().expect("checkpoint");
        })
    };
    let batch = [
        put(&fresh, b"batch", Condition::None),
        put(&first, b"batch", Condition::None),
        put(&second, b"batch", Condition::None),
    ];
    let (_, existed) = tree.apply(&batch).expect("batch");
    assert!(writer.join(), "the create did not finish inside the window");
    assert_eq!(existed, vec![true, true, true], "the batch's ops saw a stale state");
    assert_eq!(tree.key_count(), keys_before + 1, "the key was counted twice");
    assert_eq!(tree.get(&fresh).expect("get").expect("present").value, b"batch");
    tree.check().expect("invariants, key counts among them");
    scenario.teardown();
}
