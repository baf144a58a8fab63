//! A listing rolls a subtree up without reading it, so no published state may link an empty
//! frame. A batch that empties a frame unlinks it from its parent in its own publication
//! (`Tree::unlink_emptied`, src/tree/apply.rs), and a parent left empty by that goes too;
//! the first version left an emptied frame linked when its parent had no room to merge it,
//! and listings returned its directory as a common prefix with no key under it. Checked
//! here: a tree of small frames, three levels deep, whose subdirectories are deleted whole
//! (one batch each), in several orders and fillings of the root frame; after every batch
//! the tree's invariants (no linked frame empty, every lead true) and S3's pages hold, and
//! across the cases batches did unlink emptied frames.

use std::collections::BTreeSet;

use holt_core::testing::TreeHarness;

mod s3_page;
use s3_page::{apply, delete, put};
mod emptied_dirs;
use emptied_dirs::{build, delete_dir, delete_tree, file, DIRS, FILES, FRAME_BUDGET, SUBDIRS};

fn check_pages(tree: &TreeHarness, keys: &BTreeSet<Vec<u8>>, context: &str) {
    let prefixes: [&[u8]; 5] = [b"", b"d", b"d1/", b"d2/s", b"d3/s4/"];
    let starts: [&[u8]; 5] = [b"", b"d1", b"d1/s3", b"d2/s5/f039", b"z"];
    s3_page::check_pages(tree, keys, &prefixes, &starts, &[1000], context);
}

#[test]
fn deleting_whole_directories_leaves_no_empty_rollup() {
    let mut unlinked = 0;
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
            unlinked += tree.shape_stats().emptied_unlinked;
            cases += 1;
        }
    }
    // The path under test must have run, or the checks above prove nothing about it.
    assert!(unlinked > 0, "no batch unlinked an emptied frame in {cases} cases");
}

/// A batch that empties a frame both by its own deletes and by emptying the frames it links
/// unlinks them all. Each directory's subdirectories that are not frames of their own are
/// cut down to one file first, so that deleting the directory leaves its frame empty with
/// fewer deletes inside it than keys and links at its root: only the links to the frames the
/// same batch empties make up the difference.
#[test]
fn deleting_a_directory_tree_in_one_batch_leaves_no_empty_rollup() {
    let mut unlinked = 0;
    for seed in 0..5u64 {
        let tree = TreeHarness::new(FRAME_BUDGET);
        let mut keys = BTreeSet::new();
        build(&tree, &mut keys, seed);
        let links = tree.links().expect("links");
        for (i, j) in (0..DIRS).flat_map(|i| (0..SUBDIRS).map(move |j| (i, j))) {
            let at = format!("d{i}/s{j}").into_bytes();
            if !links.iter().any(|(path, _)| path.starts_with(&at)) {
                apply(&tree, (1..FILES).map(|k| delete(&file(i, j, k))).collect(), &mut keys);
            }
        }
        check_pages(&tree, &keys, &format!("seed {seed}, cut down"));
        let order: Vec<usize> = (0..DIRS).map(|n| (n + seed as usize) % DIRS).collect();
        for i in order {
            delete_tree(&tree, &mut keys, i);
            check_pages(&tree, &keys, &format!("seed {seed}, d{i}/ deleted"));
        }
        assert_eq!(tree.key_count(), 0, "seed {seed}");
        assert_eq!(tree.frame_count(), 1, "seed {seed}: frames left linked");
        unlinked += tree.shape_stats().emptied_unlinked;
    }
    assert!(unlinked > 0, "no batch unlinked an emptied frame");
}
