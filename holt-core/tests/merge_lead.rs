//! A merge can change the first byte of its parent frame's root: when the child frame it
//! folds back was all the parent held besides its path, the parent is left empty. The node
//! above the parent's link in the grandparent frame may count on that byte (`Inner::lead`,
//! src/tree/node.rs), so the merge republishes the grandparent without it first
//! (`Tree::try_merge`, src/tree/split.rs). Checked here: a tree of small frames, three
//! levels deep, whose directories are deleted whole (one batch each, so a child frame is
//! emptied before it can merge back), in several orders and fillings of the root frame. After
//! every batch the tree's invariants (every lead true) and S3's pages hold, and across the
//! cases that merge path ran.

use std::collections::BTreeSet;

use holt_core::testing::TreeHarness;

mod s3_page;
use s3_page::{apply, model, page, put};
mod emptied_dirs;
use emptied_dirs::{build, delete_dir, FRAME_BUDGET};

fn check_pages(tree: &TreeHarness, keys: &BTreeSet<Vec<u8>>, context: &str) {
    for prefix in [&b""[..], b"d", b"d1/", b"d2/s", b"d3/s4/"] {
        for start in [&b""[..], b"d1", b"d1/s3", b"d2/s5/f039", b"z"] {
            let (got, _) = page(tree, prefix, start, 1000);
            assert_eq!(
                got,
                model(keys, prefix, b'/', start, 1000),
                "{context}: prefix {:?} start_after {:?}",
                String::from_utf8_lossy(prefix),
                String::from_utf8_lossy(start)
            );
        }
    }
}

#[test]
fn merges_that_empty_a_parent_frame_withdraw_the_grandparents_lead() {
    let mut withdrawals = 0;
    let mut cases = 0;
    for pad in [0, 30, 80] {
        for seed in 0..5u64 {
            let context = format!("pad {pad} seed {seed}");
            let tree = TreeHarness::new(FRAME_BUDGET);
            let mut keys = BTreeSet::new();
            let dirs = build(&tree, &mut keys, seed);
            // Keys beside the directories, filling the root frame so that a parent frame
            // cannot always merge into it.
            apply(&tree, (0..pad).map(|k| put(format!("z{k:03}").as_bytes())).collect(), &mut keys);
            check_pages(&tree, &keys, &format!("{context}, built"));
            for &(i, j) in &dirs {
                delete_dir(&tree, &mut keys, (i, j));
                check_pages(&tree, &keys, &format!("{context}, d{i}/s{j}/ deleted"));
            }
            assert_eq!(tree.key_count(), pad as u64, "{context}");
            withdrawals += tree.shape_stats().merge_lead_withdrawals;
            cases += 1;
        }
    }
    // The path under test must have run, or the checks above prove nothing about it.
    assert!(withdrawals > 0, "no merge withdrew a lead in {cases} cases");
}
