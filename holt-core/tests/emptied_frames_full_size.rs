//! No published state links an empty frame, at the production frame size.
//!
//! `merge_lead.rs` and `merge_lead_race.rs` check this with 1 KiB frames; here the frames are
//! the 512 KiB ones every database uses (`DEFAULT_FRAME_BUDGET_BYTES`), so a directory is a
//! frame of its own only after thousands of keys, and a batch that empties it is a bulk
//! delete of thousands of keys, as an S3 client's DeleteObjects calls make. Directories are
//! deleted whole in one batch, or subdirectory by subdirectory, in several orders, with the
//! root frame nearly empty or nearly full (large values on keys directly under the root,
//! which no split can move away). After every batch the tree's invariants hold and every
//! listing with delimiter `/` is S3's page over the keys left. Built with the `failpoints`
//! feature, the test also lists at `apply-before-merges`, after a batch is published and
//! before its merges run: a merge takes an emptied frame whatever its parent's size, so only
//! there does a frame the batch failed to unlink show, as a common prefix with no key under
//! it. Across the cases, batches must have unlinked emptied frames, or the path under test
//! never ran.
//!
//! Run: `cargo test -p holt-core --test emptied_frames_full_size`, and with
//! `--features failpoints` for the listings inside the window.

use std::collections::BTreeSet;

use holt_core::testing::{TreeHarness, DEFAULT_FRAME_BUDGET_BYTES};

mod s3_page;
use s3_page::{apply, delete, put_sized, shuffle};
use window::Window;

const DIRS: usize = 6;
const SUBDIRS: usize = 4;
const FILES: usize = 800;
/// An S3 object's metadata record is about this size (ETag, size, times, content type).
const VALUE_LEN: usize = 120;

fn file(i: usize, j: usize, k: usize) -> Vec<u8> {
    format!("t/d{i:02}/s{j}/f{k:04}.bin").into_bytes()
}

/// The prefixes every check lists with delimiter `/`.
const PREFIXES: [&[u8]; 6] = [b"", b"t/", b"t/d0", b"t/d01/", b"t/d03/s", b"t/d04/s2/"];

fn check_pages(tree: &TreeHarness, keys: &BTreeSet<Vec<u8>>, context: &str) {
    let starts: [&[u8]; 4] = [b"", b"t/d02", b"t/d02/s1", b"t/d05/s3/f0799.bin"];
    s3_page::check_pages(tree, keys, &PREFIXES, &starts, &[1000], context);
}

/// Pages listed inside the window between a batch's publication and its merges, checked
/// after the batch (with the `failpoints` feature; without it, nothing is listed there).
#[cfg(feature = "failpoints")]
mod window {
    use std::collections::BTreeSet;
    use std::sync::{Arc, Mutex};

    use holt_core::testing::TreeHarness;

    use crate::s3_page::{model, page};
    use crate::PREFIXES;

    /// A prefix and its page: names, and whether more follow.
    type Listed = (Vec<u8>, (Vec<Vec<u8>>, bool));

    pub struct Window {
        pages: Arc<Mutex<Vec<Listed>>>,
    }

    impl Window {
        pub fn new() -> Window {
            Window { pages: Arc::default() }
        }

        /// Lists every prefix of `PREFIXES` at `apply-before-merges` of each batch on `tree`.
        pub fn watch(&self, tree: &Arc<TreeHarness>) {
            let (tree, pages) = (Arc::clone(tree), Arc::clone(&self.pages));
            fail::cfg_callback("apply-before-merges", move || {
                for prefix in PREFIXES {
                    let (got, _) = page(&tree, prefix, b"", 1000);
                    pages.lock().unwrap().push((prefix.to_vec(), got));
                }
            })
            .expect("failpoint");
        }

        /// Checks the pages listed during the last batch against S3's pages of `keys`;
        /// returns how many there were.
        pub fn check(&self, keys: &BTreeSet<Vec<u8>>, context: &str) -> usize {
            let pages: Vec<Listed> = self.pages.lock().unwrap().drain(..).collect();
            for (prefix, got) in &pages {
                assert_eq!(
                    *got,
                    model(keys, prefix, b'/', b"", 1000),
                    "{context}: a page before the merges, prefix {:?}",
                    String::from_utf8_lossy(prefix)
                );
            }
            pages.len()
        }
    }

    impl Drop for Window {
        fn drop(&mut self) {
            fail::remove("apply-before-merges");
        }
    }
}

#[cfg(not(feature = "failpoints"))]
mod window {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use holt_core::testing::TreeHarness;

    pub struct Window;

    impl Window {
        pub fn new() -> Window {
            Window
        }
        pub fn watch(&self, _tree: &Arc<TreeHarness>) {}
        pub fn check(&self, _keys: &BTreeSet<Vec<u8>>, _context: &str) -> usize {
            0
        }
    }
}

#[test]
fn bulk_deletes_at_the_production_frame_size_leave_no_empty_rollup() {
    #[cfg(feature = "failpoints")]
    let scenario = fail::FailScenario::setup();
    let mut unlinked = 0;
    let mut cases = 0;
    let mut paused = 0;
    // Keys of one byte above 't' and a 3 KiB value sit directly in the root frame's root.
    for pad in [0usize, 120] {
        for whole_dirs in [true, false] {
            for seed in 0..2u64 {
                let context = format!("pad {pad}, whole dirs {whole_dirs}, seed {seed}");
                let tree = std::sync::Arc::new(TreeHarness::new(DEFAULT_FRAME_BUDGET_BYTES));
                let mut keys = BTreeSet::new();
                for i in 0..DIRS {
                    for j in 0..SUBDIRS {
                        let ops = (0..FILES).map(|k| put_sized(&file(i, j, k), VALUE_LEN)).collect();
                        apply(&tree, ops, &mut keys);
                    }
                }
                let pads = (0..pad).map(|p| put_sized(&[0x80 + p as u8], 3 << 10)).collect();
                apply(&tree, pads, &mut keys);
                let links = tree.links().unwrap();
                assert!(
                    links.len() >= DIRS / 2,
                    "{context}: the directories should fill frames of their own, links {links:?}"
                );
                check_pages(&tree, &keys, &format!("{context}, built"));

                let mut groups: Vec<Vec<Vec<u8>>> = if whole_dirs {
                    (0..DIRS)
                        .map(|i| (0..SUBDIRS).flat_map(|j| (0..FILES).map(move |k| file(i, j, k))).collect())
                        .collect()
                } else {
                    (0..DIRS)
                        .flat_map(|i| (0..SUBDIRS).map(move |j| (0..FILES).map(|k| file(i, j, k)).collect()))
                        .collect()
                };
                shuffle(&mut groups, seed);
                let window = Window::new();
                window.watch(&tree);
                for group in groups {
                    let context =
                        format!("{context}, group of {} deleted", String::from_utf8_lossy(&group[0]));
                    apply(&tree, group.iter().map(|k| delete(k)).collect(), &mut keys);
                    paused += window.check(&keys, &context);
                    check_pages(&tree, &keys, &context);
                }
                assert_eq!(tree.key_count(), pad as u64, "{context}");
                unlinked += tree.shape_stats().emptied_unlinked;
                cases += 1;
            }
        }
    }
    assert!(unlinked > 0, "no batch unlinked an emptied frame in {cases} cases");
    if cfg!(feature = "failpoints") {
        assert!(paused > 0, "no page was listed between a batch and its merges");
    }
    println!("{cases} cases, {unlinked} emptied frames unlinked, {paused} pages listed before merges");
    #[cfg(feature = "failpoints")]
    scenario.teardown();
}
