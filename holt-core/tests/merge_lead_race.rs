//! What readers see while a batch that empties frames finishes: at the failpoint
//! `apply-before-merges` (the batch published, its merges not yet run) and at
//! `merge-cascade` (between two merges of one cascade, `Tree::try_merge`), the root page is
//! listed, and each page must be S3's page of the keys after the batch. An emptied frame
//! still linked there would be rolled up as a common prefix holding no key: the batch
//! unlinks the frames it empties in its own publication (`Tree::unlink_emptied`), and a
//! merge that leaves its parent without its first byte withdraws the grandparent's lead
//! before publishing.
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

/// Where the pages are taken: after a batch is published and before its merges, and between
/// two merges of a cascade.
const POINTS: [&str; 2] = ["apply-before-merges", "merge-cascade"];

/// A listing page: names, and whether more follow.
type Page = (Vec<Vec<u8>>, bool);

#[test]
fn pages_before_and_between_merges_hold_no_empty_rollup() {
    let scenario = fail::FailScenario::setup();
    let mut paused = 0;
    let mut unlinked = 0;
    for seed in 0..5u64 {
        let tree = Arc::new(TreeHarness::new(FRAME_BUDGET));
        let mut keys = BTreeSet::new();
        let dirs = build(&tree, &mut keys, seed);
        let pages: Arc<Mutex<Vec<Page>>> = Arc::default();
        for point in POINTS {
            let (tree, pages) = (Arc::clone(&tree), Arc::clone(&pages));
            fail::cfg_callback(point, move || {
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
                assert_eq!(
                    got, want,
                    "seed {seed}: a page before or between merges after deleting d{i}/s{j}/"
                );
            }
        }
        for point in POINTS {
            fail::remove(point);
        }
        unlinked += tree.shape_stats().emptied_unlinked;
    }
    assert!(paused > 0 && unlinked > 0, "paused {paused} times, {unlinked} frames unlinked");
    println!("listed {paused} times before or between merges; {unlinked} emptied frames unlinked");
    scenario.teardown();
}
