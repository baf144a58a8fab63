//! A point read that walks an evicted frame's image and meets a link resolves the linked
//! frame while it still holds the frame's load lock. A merge of that child into the frame
//! must load the frame first (it is evicted), so it waits for the read, and the child the
//! image names is still registered when the read looks it up. The first version resolved the
//! link after releasing the lock: a merge in between unregistered the child, and a correct
//! get failed with "link to unknown frame" (found in review, never seen in a run).
//!
//! The failpoint `image-walk-link` sits between the image walk and the lookup; here it starts
//! a writer that deletes every key but the one being read (so every frame shrinks and merges
//! back into the root frame) and waits up to 2 s for it to finish. With the lookup under the
//! lock, the writer cannot get past loading the parent until the read is done.
//!
//! Run: `cargo test -p holt-core --features failpoints --test image_walk_merge`.
#![cfg(feature = "failpoints")]

mod race;

use std::sync::Arc;
use std::time::Duration;

use holt_core::testing::TreeHarness;
use holt_core::{BatchOp, Condition};

/// Small frames, so a few thousand keys make frames that link to frames.
const FRAME_BUDGET: usize = 4096;

fn key(a: u32, b: u32) -> Vec<u8> {
    format!("k/{a:02}/{b:03}").into_bytes()
}

fn value(a: u32, b: u32) -> Vec<u8> {
    format!("value-{a:02}-{b:03}-{}", "x".repeat(32)).into_bytes()
}

fn put(a: u32, b: u32) -> BatchOp {
    BatchOp::Put { key: key(a, b), value: value(a, b), condition: Condition::None }
}

/// A tree whose frames are read back through a cache too small to admit them (so reads of
/// evicted frames walk their images).
fn build() -> TreeHarness {
    let harness = TreeHarness::new(FRAME_BUDGET);
    // A fixed scrambled order: frames fill, split, and moved subtrees grow and split again.
    let mut all: Vec<(u32, u32)> = (0..10).flat_map(|a| (0..100).map(move |b| (a, b))).collect();
    let mut state = 0x1234_5678_u64;
    for i in (1..all.len()).rev() {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        all.swap(i, (state >> 33) as usize % (i + 1));
    }
    for &(a, b) in &all {
        harness.apply(&[put(a, b)]).expect("put");
    }
    harness.reopen(1).expect("reopen")
}

#[test]
fn a_merge_during_an_image_walk_does_not_unregister_the_child_it_names() {
    let scenario = fail::FailScenario::setup();
    // Find a key whose read crosses two evicted frames: a frame other than the root frame
    // (which is never evicted) whose image links to the key's frame.
    let probe = build();
    let target = (0..10)
        .flat_map(|a| (0..100).map(move |b| (a, b)))
        .find(|&(a, b)| {
            let before = probe.image_reads();
            probe.get(&key(a, b)).expect("get");
            probe.image_reads() - before >= 2
        })
        .expect("some read crosses two evicted frames");
    drop(probe);
    println!("target key {:?}", String::from_utf8_lossy(&key(target.0, target.1)));

    let harness = Arc::new(build());
    let frames_before = harness.frame_count();
    // The writer finishes at once if nothing holds it up; under the load lock it cannot,
    // and the read goes on after the timeout.
    let writer = {
        let harness = Arc::clone(&harness);
        race::WriterAt::arm("image-walk-link", Duration::from_secs(2), move || {
            // Everything but the target goes, so frames shrink and merge back: the one named
            // by the image being walked right now among them. The target's neighbours last,
            // the nearest at the very end: by then the frames above have shrunk, so the frame
            // holding the target merges when its last neighbour goes.
            let all = (0..10).flat_map(|a| (0..100).map(move |b| (a, b)));
            let far = all.clone().filter(|&(a, _)| a != target.0);
            let mut near: Vec<(u32, u32)> = all.filter(|&(a, b)| a == target.0 && b != target.1).collect();
            near.sort_by_key(|&(_, b)| std::cmp::Reverse(b.abs_diff(target.1)));
            for (a, b) in far.chain(near) {
                let delete = BatchOp::Delete { key: key(a, b), condition: Condition::None };
                harness.apply(&[delete]).expect("delete");
            }
        })
    };
    let got = harness.get(&key(target.0, target.1));
    let finished = writer.join();
    println!("writer finished inside the window: {finished}");
    let entry = got.expect("a read racing a merge must not fail").expect("the key is there");
    assert_eq!(entry.value, value(target.0, target.1));

    // Once the writer is done, the tree is whole and holds what was asked.
    harness.check().expect("invariants");
    let frames_after = harness.frame_count();
    println!("frames: {frames_before} before the deletes, {frames_after} after");
    assert!(frames_after < frames_before / 2, "the deletes merged frames back");
    for a in 0..10 {
        for b in 0..100 {
            let want = ((a, b) == target).then(|| value(a, b));
            assert_eq!(harness.get(&key(a, b)).expect("get").map(|e| e.value), want, "key {a}/{b}");
        }
    }
    scenario.teardown();
}
