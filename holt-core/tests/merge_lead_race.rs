//! Between two merges of one cascade (`Tree::try_merge`, src/tree/split.rs), readers see the
//! first merge's result: a parent frame that merging its emptied child left empty, still
//! linked from the grandparent. The grandparent's node above that link may have counted on
//! the parent's first byte (`Inner::lead`); the merge republishes it without that lead
//! before publishing the empty parent, or a listing would roll the empty parent up as a
//! common prefix holding no key. Here the failpoint `merge-cascade` lists the root page at
//! every pause between merges, and each page must be S3's page of the keys after the batch
//! (the batch is published before its merges run).
//!
//! Run: `cargo test -p holt-core --features failpoints --test merge_lead_race`.
#![cfg(feature = "failpoints")]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use holt_core::testing::TreeHarness;

mod s3_page;
use s3_page::{model, page};
mod emptied_dirs;
use emptied_dirs::{build, delete_dir, FRAME_BUDGET};

/// A listing page: names, and whether more follow.
type Page = (Vec<Vec<u8>>, bool);

#[test]
fn pages_between_merges_hold_no_empty_rollup() {
    let scenario = fail::FailScenario::setup();
    let mut paused = 0;
    let mut withdrawals = 0;
    for seed in 0..5u64 {
        let tree = Arc::new(TreeHarness::new(FRAME_BUDGET));
        let mut keys = BTreeSet::new();
        let dirs = build(&tree, &mut keys, seed);
        let pages: Arc<Mutex<Vec<Page>>> = Arc::default();
        {
            let (tree, pages) = (Arc::clone(&tree), Arc::clone(&pages));
            fail::cfg_callback("merge-cascade", move || {
                let (got, _) = page(&tree, b"", b"", 1000);
                pages.lock().unwrap().push(got);
            })
            .expect("failpoint");
        }
        for &(i, j) in &dirs {
            delete_dir(&tree, &mut keys, (i, j));
            let want = model(&keys, b"", b'/', b"", 1000);
            for got in pages.lock().unwrap().drain(..) {
                paused += 1;
                assert_eq!(got, want, "seed {seed}: a page between merges after deleting d{i}/s{j}/");
            }
        }
        fail::remove("merge-cascade");
        withdrawals += tree.shape_stats().merge_lead_withdrawals;
    }
    assert!(paused > 0 && withdrawals > 0, "paused {paused} times, {withdrawals} lead withdrawals");
    println!("listed {paused} times between merges; {withdrawals} merges withdrew a lead");
    scenario.teardown();
}
