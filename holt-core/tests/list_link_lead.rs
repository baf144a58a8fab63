//! A frame behind a link records the first byte of its root's own bytes (`FrameCell::lead`,
//! src/buffer/mod.rs). When that byte is the delimiter, a listing rolls the linked frame up
//! from its cell without loading its root. Checked here: the pages are exactly S3's through
//! writes that change a frame root's first byte and change it back, after a reopen (where
//! leads are unknown until a frame is loaded), and while frames are evicted (leads survive
//! eviction); a rollup page over linked frames reads none of them (from the lead of the
//! node above the links, or from each link's cell after a reopen) and nothing from disk once
//! the leads are known; and readers listing while a writer flips frame roots
//! between two leads always see each frame in one whole state.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use holt_core::testing::TreeHarness;
use holt_core::{BatchOp, Condition};

mod s3_page;
use s3_page::{apply, delete, page, put};

/// Directories `p/000/` .. `p/099/`.
const DIRS: usize = 100;
/// Files per directory: enough that most directories become frames of their own under
/// `FRAME_BUDGET`.
const FILES: usize = 100;
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
    let prefixes: [&[u8]; 5] = [b"", b"p/", b"p/04", b"p/042", b"r/"];
    s3_page::check_pages(tree, keys, &prefixes, &starts, &[1, 7, 1000], context);
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
    for f in 0..240 {
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
fn a_rollup_page_over_linked_frames_reads_none_of_them() {
    let mut keys = BTreeSet::new();
    let tree = build(&mut keys);
    let linked = linked_dirs(&tree);
    let want: Vec<Vec<u8>> = (0..DIRS).map(|i| format!("p/{i:03}/").into_bytes()).collect();
    // Built by writes: the node above each directory's link counts the linked frames' leads
    // in its own (`Inner::lead`), so the page is made from the keys of the ten nodes at the
    // second digit, reading no directory at all.
    let ((names, truncated), built) = page(&tree, b"p/", b"", 1000);
    assert_eq!((names, truncated), (want.clone(), false));
    assert!(built < 40, "{DIRS} rollups read {built} nodes in the tree built by writes");

    // Reopened with a cache of eight frames: a linked frame not loaded since open has its
    // lead told from its image's root record once the cache is full (one record read, no
    // load), so the first page loads no more than the frames it passes through and the
    // eight that fill the cache.
    let tree = tree.reopen(8 * FRAME_BUDGET).unwrap();
    let passed_through = (tree.frame_count() - linked) as u64;
    let loads = |tree: &TreeHarness| tree.source_reads() - tree.image_reads();
    let (loads_before, images_before) = (loads(&tree), tree.image_reads());
    let ((names, _), cold) = page(&tree, b"p/", b"", 1000);
    assert_eq!(names, want);
    let cold_loads = loads(&tree) - loads_before;
    let lead_reads = tree.image_reads() - images_before;
    assert!(
        cold_loads <= passed_through + 8,
        "{cold_loads} frames loaded, {passed_through} are not directories"
    );
    assert!(
        lead_reads + cold_loads >= linked as u64,
        "{lead_reads} leads read, {cold_loads} loads, {linked} linked"
    );
    let reads_before = tree.source_reads();
    let ((again, truncated), warm) = page(&tree, b"p/", b"", 1000);
    assert_eq!((again, truncated), (want, false));
    // Leads are kept, whether read from an image or from a loaded root (and through its
    // eviction): frames the walk passes through (the root, the frames holding several
    // directories) are read again, no linked directory's frame is.
    let reads = tree.source_reads() - reads_before;
    assert!(reads <= passed_through, "{reads} frames read back, {passed_through} frames are not directories");
    println!(
        "{DIRS} rollups, {linked} of them linked frames: {built} nodes read when built, {cold} cold \
         ({cold_loads} loads, {lead_reads} leads read from images), {warm} with leads known"
    );
    // At most one visit per rollup (the link), plus the nodes above them: a linked frame
    // whose root the walk read would cost two (the link and the root).
    assert!(warm <= (DIRS + 30) as u64, "{DIRS} rollups read {warm} nodes");
}

#[test]
fn readers_see_each_frame_whole_while_its_lead_flips() {
    // Every third directory flips, in one batch per directory, between files under `p/NNN/`
    // and the same files under `p/NNN-/`: the root of the directory's frame begins with '/'
    // or '-'. A page holds exactly one of `p/NNN/` and `p/NNN-/` for every directory; a page
    // listed while no round ran holds exactly the state the last round left.
    let mut keys = BTreeSet::new();
    let tree = build(&mut keys);
    let flipped: Vec<usize> = (0..DIRS).step_by(3).collect();
    const ROUNDS: usize = 21;
    // Rounds started and rounds finished.
    let started = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    let quiet_pages = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| loop {
                let done = finished.load(Ordering::SeqCst);
                let ((names, truncated), _) = page(&tree, b"p/", b"", 1000);
                let quiet = started.load(Ordering::SeqCst) == done;
                assert!(!truncated);
                assert_eq!(names.len(), DIRS, "{names:?}");
                for (dir, name) in names.iter().enumerate() {
                    let dashed = quiet && done % 2 == 1 && flipped.contains(&dir);
                    let plain = format!("p/{dir:03}/").into_bytes();
                    let dash = format!("p/{dir:03}-/").into_bytes();
                    let show = |n: &[u8]| String::from_utf8_lossy(n).into_owned();
                    if quiet {
                        let want = if dashed { &dash } else { &plain };
                        assert_eq!(show(name), show(want), "after round {done}, no write running");
                    } else {
                        assert!(*name == plain || *name == dash, "entry {dir}: {}", show(name));
                    }
                }
                if quiet {
                    quiet_pages.fetch_add(1, Ordering::Relaxed);
                }
                if done == ROUNDS {
                    break;
                }
            });
        }
        for round in 0..ROUNDS {
            let (from, to) = if round % 2 == 0 { ("/", "-/") } else { ("-/", "/") };
            started.fetch_add(1, Ordering::SeqCst);
            for &dir in &flipped {
                let mut ops: Vec<BatchOp> = (0..FILES).map(|f| delete(&file(dir, from, f))).collect();
                ops.extend((0..FILES).map(|f| put(&file(dir, to, f))));
                tree.apply(&ops).unwrap();
            }
            finished.fetch_add(1, Ordering::SeqCst);
            // Room for pages listed while nothing is written.
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    });
    assert!(quiet_pages.load(Ordering::Relaxed) > ROUNDS, "too few pages listed between rounds");
    tree.check().unwrap();
}
