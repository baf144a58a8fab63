//! A batch that may change a frame root's first byte latches the parent frame too; when the
//! parent is not latched yet, the batch drops its latches, adds it and starts again
//! (`Attempt::LatchParents`, src/tree/apply.rs). If the parent is merged away in between,
//! the next attempt meets it retired, finds the frames again and latches the new parent.
//! Here the failpoint `apply-latch-parents` (nothing latched or logged) runs a batch that
//! deletes everything else in the parent frame's directory, so the parent merges into the
//! root frame; the put must then land with every invariant (every lead among them) and
//! S3's pages holding.
//!
//! Run: `cargo test -p holt-core --features failpoints --test latch_parents_retry`.
#![cfg(feature = "failpoints")]

mod emptied_dirs;
mod race;
mod s3_page;

use std::collections::BTreeSet;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use holt_core::testing::TreeHarness;

use emptied_dirs::{build, delete_tree, FRAME_BUDGET};
use s3_page::{apply, delete, model, page, put};

#[test]
fn a_parent_merged_away_before_the_retry_is_found_again() {
    let scenario = fail::FailScenario::setup();
    let tree = Arc::new(TreeHarness::new(FRAME_BUDGET));
    let keys = Arc::new(Mutex::new(BTreeSet::new()));
    build(&tree, &mut keys.lock().unwrap(), 0);
    // A subdirectory frame `d<i>/s<j>` (depth 2) below its directory's frame `d<i>` (depth 1).
    let links = tree.links().expect("links");
    let (dir, sub) = links
        .iter()
        .filter(|(path, depth)| *depth == 2 && path.len() == 5)
        .map(|(path, _)| (path[..2].to_vec(), path.clone()))
        .find(|(dir, _)| links.iter().any(|(p, d)| p == dir && *d == 1))
        .expect("a subdirectory frame below a directory frame");
    // Room in the root frame: the other directories go.
    let i = usize::from(dir[1] - b'0');
    for other in (0..emptied_dirs::DIRS).filter(|&o| o != i) {
        delete_tree(&tree, &mut keys.lock().unwrap(), other);
    }
    assert!(tree.links().expect("links").iter().any(|(p, d)| *p == dir && *d == 1), "d{i} merged too early");

    // At the failpoint: everything in `d<i>/` outside the subdirectory is deleted, and the
    // directory's frame, left holding only the link, merges into the root frame.
    let deleter = {
        let (tree, keys, dir, sub) = (Arc::clone(&tree), Arc::clone(&keys), dir.clone(), sub.clone());
        race::WriterAt::arm("apply-latch-parents", Duration::from_secs(5), move || {
            let mut keys = keys.lock().unwrap();
            let rest: Vec<_> = keys
                .iter()
                .filter(|k| k.starts_with(&dir) && !k.starts_with(&sub))
                .map(|k| delete(k))
                .collect();
            apply(&tree, rest, &mut keys);
        })
    };
    // A key that continues past `d<i>/s<j>` with 'x', not the '/' its frame's root begins
    // with: its lead is at risk, so the put must latch the directory's frame.
    let new_key = [&sub[..], b"x"].concat();
    let (done_tx, done_rx) = mpsc::channel();
    {
        let (tree, new_key) = (Arc::clone(&tree), new_key.clone());
        std::thread::spawn(move || {
            let _ = done_tx.send(tree.apply(&[put(&new_key)]).map(|_| ()));
        });
    }
    // A batch that keeps latching the retired parent would never finish.
    done_rx.recv_timeout(Duration::from_secs(30)).expect("the put finished").expect("put");
    assert!(deleter.join(), "the deleting batch did not finish inside the window");
    keys.lock().unwrap().insert(new_key.clone());

    let links = tree.links().expect("links");
    assert!(!links.iter().any(|(p, _)| *p == dir), "d{i} is still a frame: {links:?}");
    assert!(links.iter().any(|(p, d)| *p == sub && *d == 1), "the subdirectory frame moved: {links:?}");
    assert!(tree.get(&new_key).expect("get").is_some());
    tree.check().expect("invariants, every lead among them");
    let keys = keys.lock().unwrap();
    for prefix in [&b""[..], &dir[..], &sub[..]] {
        assert_eq!(page(&tree, prefix, b"", 1000).0, model(&keys, prefix, b'/', b"", 1000));
    }
    scenario.teardown();
}
