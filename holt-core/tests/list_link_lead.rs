//! A frame behind a link records the first byte of its root's own bytes (`FrameCell::lead`,
//! src/buffer/mod.rs). When that byte is the delimiter, a listing rolls the linked frame up
//! from its cell without loading its root. Checked here: the pages are exactly S3's through
//! writes that change a frame root's first byte and change it back, after a reopen (where
//! leads are unknown until a frame is loaded), and while frames are evicted (leads survive
//! eviction); a rollup page over linked frames reads one node per linked frame and nothing
//! from disk once the leads are known; and readers listing while a writer flips frame roots
//! between two leads always see each frame in one whole state.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};

use holt_core::testing::TreeHarness;
use holt_core::{BatchOp, Condition};

mod s3_page;
use s3_page::{apply, delete, model, page, put};

/// Directories `p/000/` .. `p/099/`.
const DIRS: usize = 100;
/// Files per directory: enough that most directories become frames of their own under
/// `FRAME_BUDGET`.
const FILES: usize = 60;
const FRAME_BUDGET: usize = 4096;

fn file(dir: usize, sep: &str, f: usize) -> Vec<u8> {
    format!("p/{dir:03}{sep}file-{f:04}.bin").into_bytes()
}

fn check_pages(tree: &TreeHarness, keys: &BTreeSet<Vec<u8>>, context: &str) {
    let mut starts: Vec<Vec<u8>> = vec![Vec::new(), b"p/".to_vec(), b"p/05".to_vec(), b"q".to_vec()];
    for dir in [0, 7, 42, 99] {
        starts.push(format!("p/{dir:03}").into_bytes());
        starts.push(format!("p/{dir:03}/").into_bytes());
        starts.push(file(dir, "/", FILES / 2));
    }
    for prefix in [&b""[..], b"p/", b"p/04", b"p/042", b"r/"] {
        for start in &starts {
            for limit in [1, 7, 1000] {
                let (got, _) = page(tree, prefix, start, limit);
                assert_eq!(
                    got,
                    model(keys, prefix, b'/', start, limit),
                    "{context}: prefix {:?} start_after {:?} limit {limit}",
                    String::from_utf8_lossy(prefix),
                    String::from_utf8_lossy(start)
                );
            }
        }
    }
}

/// Directories that are frames of their own, rooted right after their last digit: the
/// rollups a linked frame's lead serves.
fn linked_dirs(tree: &TreeHarness) -> usize {
    let links = tree.links().unwrap();
    links.iter().filter(|(path, _)| path.len() == 5 && path.starts_with(b"p/")).count()
}

fn build(keys: &mut BTreeSet<Vec<u8>>) -> TreeHarness {
    let tree = TreeHarness::new(FRAME_BUDGET);
    let mut ops = Vec::new();
    for dir in 0..DIRS {
        for f in 0..FILES {
            ops.push(put(&file(dir, "/", f)));
        }
    }
    // A linked frame under a key byte that is the delimiter itself: `r//...`, beside `r/a.txt`
    // and `r/b.txt` (so that a node branches at `r/`).
    for f in 0..FILES * 4 {
        ops.push(put(format!("r//file-{f:04}.bin").as_bytes()));
    }
    // A large value beside them fills the root frame, so that the split it causes moves all
    // of `r//` (about half the frame) into a frame of its own.
    ops.push(BatchOp::Put {
        key: b"r/a.txt".to_vec(),
        value: vec![b'v'; FRAME_BUDGET / 2],
        condition: Condition::None,
    });
    ops.push(put(b"r/b.txt"));
    for op in &ops {
        if let BatchOp::Put { key, .. } = op {
            keys.insert(key.clone());
        }
    }
    for chunk in ops.chunks(500) {
        tree.apply(chunk).unwrap();
    }
    tree.check().unwrap();
    tree
}

#[test]
fn link_lead_pages_match_s3_through_writes_eviction_and_reopen() {
    let mut keys = BTreeSet::new();
    let tree = build(&mut keys);
    let linked = linked_dirs(&tree);
    assert!(linked >= DIRS / 2, "only {linked} of {DIRS} directories are frames of their own");
    let links = tree.links().unwrap();
    assert!(links.iter().any(|(path, _)| path == b"r//"), "r// is not linked: {links:?}");
    check_pages(&tree, &keys, "built");

    // Writes inside linked frames that make their root begin with another byte (a key that
    // diverges at the root's first byte), or with none (a key ending where the root starts),
    // and then undo it.
    let dirs: Vec<usize> = (0..DIRS).filter(|d| d % 7 == 3).collect();
    let flips = |tree: &TreeHarness, keys: &mut BTreeSet<Vec<u8>>, put_or_delete: fn(&[u8]) -> BatchOp| {
        for &dir in &dirs {
            let own = if dir % 2 == 0 { format!("p/{dir:03}x") } else { format!("p/{dir:03}") };
            apply(tree, vec![put_or_delete(own.as_bytes())], keys);
        }
    };
    flips(&tree, &mut keys, put);
    check_pages(&tree, &keys, "frame roots without the lead");
    flips(&tree, &mut keys, delete);
    check_pages(&tree, &keys, "lead back");

    // Reopened with room for a few frames: leads are unknown until each frame is loaded, and
    // kept while it is evicted again.
    let tree = tree.reopen(8 * FRAME_BUDGET).unwrap();
    check_pages(&tree, &keys, "reopened, evicting");
    tree.check().unwrap();
    check_pages(&tree, &keys, "reopened, leads known");
}

#[test]
fn a_rollup_page_over_linked_frames_reads_one_node_each_and_nothing_from_disk() {
    let mut keys = BTreeSet::new();
    let tree = build(&mut keys);
    let tree = tree.reopen(8 * FRAME_BUDGET).unwrap();
    // The first page loads every linked frame (their leads are not known yet) and evicts most.
    let ((names, _), cold) = page(&tree, b"p/", b"", 1000);
    assert_eq!(names.len(), DIRS);
    let linked = linked_dirs(&tree);
    let (_, evictions) = tree.cache_counters();
    assert!(evictions > 0, "nothing was evicted: the page would not show leads surviving eviction");
    let reads_before = tree.source_reads();
    let ((again, truncated), warm) = page(&tree, b"p/", b"", 1000);
    assert_eq!(again, names);
    assert!(!truncated);
    assert!(again.iter().enumerate().all(|(i, n)| n == format!("p/{i:03}/").as_bytes()));
    // Frames the walk passes through (the root, frames holding several directories) may have
    // been evicted and are read back; no linked directory's frame is.
    let reads = tree.source_reads() - reads_before;
    let passed_through = (tree.frame_count() - linked) as u64;
    assert!(reads <= passed_through, "{reads} frames read back, {passed_through} frames are not directories");
    println!("{DIRS} rollups, {linked} of them linked frames: {cold} nodes cold, {warm} with leads known");
    // One visit per rollup, plus the inner nodes above them: a linked frame whose root the walk
    // loaded would cost two (the link and the root).
    // The walk also passes through the 10 frames of `p/00` .. `p/09` (link and root each).
    assert!(warm <= (DIRS + 30) as u64, "{DIRS} rollups read {warm} nodes");
    assert!(cold >= warm + linked as u64, "cold {cold}, warm {warm}, {linked} linked");
}

#[test]
fn readers_see_each_frame_whole_while_its_lead_flips() {
    // Every directory flips, in one batch per directory, between files under `p/NNN/` and the
    // same files under `p/NNN-/`: the root of the directory's frame begins with '/' or '-'.
    // A page must hold exactly one of `p/NNN/` and `p/NNN-/` for every directory.
    let mut keys = BTreeSet::new();
    let tree = build(&mut keys);
    let flipped: Vec<usize> = (0..DIRS).step_by(3).collect();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut pages = 0;
                while !stop.load(Ordering::Relaxed) || pages < 10 {
                    let ((names, truncated), _) = page(&tree, b"p/", b"", 1000);
                    assert!(!truncated);
                    assert_eq!(names.len(), DIRS, "{names:?}");
                    for (dir, name) in names.iter().enumerate() {
                        let plain = format!("p/{dir:03}/").into_bytes();
                        let dashed = format!("p/{dir:03}-/").into_bytes();
                        assert!(
                            *name == plain || *name == dashed,
                            "entry {dir}: {:?}",
                            String::from_utf8_lossy(name)
                        );
                    }
                    pages += 1;
                }
            });
        }
        for round in 0..20 {
            let (from, to) = if round % 2 == 0 { ("/", "-/") } else { ("-/", "/") };
            for &dir in &flipped {
                let mut ops: Vec<BatchOp> = (0..FILES).map(|f| delete(&file(dir, from, f))).collect();
                ops.extend((0..FILES).map(|f| put(&file(dir, to, f))));
                tree.apply(&ops).unwrap();
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    tree.check().unwrap();
}
