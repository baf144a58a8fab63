//! A listing that meets a frame merged away after it loaded the frame's root restarts from
//! the tree's root, resuming at the path of the link it met (inclusive): every entry before
//! that path was emitted already and none after it. The failpoint `list-frame-loaded` sits in
//! the walk right after it loads a linked frame's root; here its first hit starts a writer
//! that deletes nine keys in ten, from the last key down, so the frames shrink and merge back
//! into their parents, the one being listed among them. The walk then sees its frame retired,
//! restarts, and must return each remaining key (and common prefix) exactly once, in order.
//!
//! The second test makes the walk restart twice, the second time on its way back down to
//! where it resumes: the link it meets there lies before the resume point, which must not move
//! back (resuming at that link would list again what lies between the two).
//!
//! Run: `cargo test -p holt-core --features failpoints --test list_restart_merge`.
#![cfg(feature = "failpoints")]

mod oracle;
mod race;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use holt_core::testing::TreeHarness;
use holt_core::{BatchOp, Condition, ListItem, ListRequest};

/// Both tests arm the same failpoint: they take turns.
static FAILPOINT: Mutex<()> = Mutex::new(());

/// Small frames, so a thousand keys make frames that link to frames.
const FRAME_BUDGET: usize = 4096;

/// `0`, then ten directories `k/AA` of `files` files `k/AA/BBB`: every directory is also a key,
/// so a linked frame's root may hold the key spelled by the link's own path (where an
/// exclusive resume point would drop it). 100 files make one frame per directory; 300 make
/// a directory's frame split again.
fn keys(files: u32) -> Vec<Vec<u8>> {
    let mut keys = vec![b"0".to_vec()];
    for a in 0..10 {
        keys.push(format!("k/{a:02}").into_bytes());
        keys.extend((0..files).map(|b| format!("k/{a:02}/{b:03}").into_bytes()));
    }
    keys
}

/// What the writers leave: `0`, the directory keys and every `every`-th file.
fn kept(key: &[u8], every: u32) -> bool {
    key.len() <= 4
        || std::str::from_utf8(&key[5..]).is_ok_and(|n| n.parse::<u32>().is_ok_and(|n| n % every == 0))
}

fn build(files: u32) -> TreeHarness {
    let harness = TreeHarness::new(FRAME_BUDGET);
    let mut all = keys(files);
    let mut state = 0x0BAD_5EED_u64;
    for i in (1..all.len()).rev() {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        all.swap(i, (state >> 33) as usize % (i + 1));
    }
    for key in all {
        let value = value_of(&key);
        harness.apply(&[BatchOp::Put { key, value, condition: Condition::None }]).expect("put");
    }
    harness
}

/// The names a listing of `keys` returns, by the S3 rules (the oracle shared by the tests).
fn expected(keys: &[Vec<u8>], prefix: &[u8], delimiter: &[u8]) -> Vec<String> {
    let state: oracle::State = keys.iter().map(|k| (k.clone(), (Vec::new(), None))).collect();
    oracle::model_list(&state, prefix, delimiter, usize::MAX)
        .iter()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect()
}

/// The value `build` gives `key`.
fn value_of(key: &[u8]) -> Vec<u8> {
    [b"v-".as_slice(), key].concat()
}

#[test]
fn a_listing_that_meets_a_merged_frame_resumes_where_it_was() {
    let _turn = FAILPOINT.lock().unwrap_or_else(|e| e.into_inner());
    let scenario = fail::FailScenario::setup();
    let mut remaining: Vec<Vec<u8>> = keys(100).into_iter().filter(|k| kept(k, 10)).collect();
    remaining.sort();
    for (prefix, delimiter) in [(&b""[..], &b""[..]), (b"k/", b"/"), (b"k/", b"0/")] {
        let harness = Arc::new(build(100));
        let frames_before = harness.frame_count();
        let writer = {
            let harness = Arc::clone(&harness);
            race::WriterAt::arm("list-frame-loaded", Duration::from_secs(10), move || {
                let mut doomed: Vec<Vec<u8>> = keys(100).into_iter().filter(|k| !kept(k, 10)).collect();
                doomed.sort();
                for key in doomed.into_iter().rev() {
                    harness.apply(&[BatchOp::Delete { key, condition: Condition::None }]).expect("delete");
                }
            })
        };
        let request =
            ListRequest { prefix, delimiter, limit: 10_000, with_values: true, ..Default::default() };
        let (page, restarts) = harness.list_restarts(&request).expect("list");
        assert!(writer.join(), "the deletes finished while the walk waited");
        let frames_after = harness.frame_count();
        println!(
            "prefix {:?} delimiter {:?}: {restarts} restart(s), frames {frames_before} -> {frames_after}, {} entries",
            String::from_utf8_lossy(prefix),
            String::from_utf8_lossy(delimiter),
            page.items.len()
        );
        assert!(restarts >= 1, "the frame the walk stood in was merged away");
        let names: Vec<String> =
            page.items.iter().map(|i| String::from_utf8_lossy(i.name()).into_owned()).collect();
        assert_eq!(names, expected(&remaining, prefix, delimiter), "the page after the restart");
        for item in &page.items {
            if let ListItem::Key { key, entry } = item {
                assert_eq!(entry.value, value_of(key));
            }
        }
        assert!(!page.truncated);
        harness.check().expect("invariants");
    }
    scenario.teardown();
}

#[test]
fn a_restart_on_the_way_back_down_does_not_move_the_resume_point_back() {
    let _turn = FAILPOINT.lock().unwrap_or_else(|e| e.into_inner());
    let scenario = fail::FailScenario::setup();
    let harness = Arc::new(build(300));
    let mut all = keys(300);
    all.sort();
    // A frame F1 two links down (under frame F, itself a child of frame 0) with keys of F
    // before it: the walk lists those, enters F1 at L1 and meets it merged into F (restart at
    // L1); on its way back down to L1 it enters F at Lf and meets F merged into frame 0. Lf
    // lies before L1, and resuming there would list the keys between them again.
    let links = harness.links().expect("links");
    let (l1, lf) = links
        .iter()
        .filter(|(_, depth)| *depth == 2)
        .find_map(|(l1, _)| {
            let (lf, _) = links.iter().find(|(p, depth)| *depth == 1 && l1.starts_with(p))?;
            all.iter().any(|k| k.starts_with(lf) && k < l1).then(|| (l1.clone(), lf.clone()))
        })
        .expect("a frame two links down with keys of its parent frame before it");
    // The walk enters frames in key order; the first entry into F1 is this hit.
    let first_hit = links.iter().filter(|(p, _)| *p < l1).count() + 1;
    println!(
        "L1 {:?}, Lf {:?}, F1 entered at hit {first_hit}",
        String::from_utf8_lossy(&l1),
        String::from_utf8_lossy(&lf)
    );
    let hits = Arc::new(AtomicUsize::new(0));
    {
        let (harness, hits, lf, l1, all) =
            (Arc::clone(&harness), Arc::clone(&hits), lf.clone(), l1.clone(), all.clone());
        let writer = Arc::clone(&harness);
        let writer2 = Arc::clone(&harness);
        let delete = move |key: &Vec<u8>| {
            writer
                .apply(&[BatchOp::Delete { key: key.clone(), condition: Condition::None }])
                .expect("delete");
        };
        let doomed: Vec<Vec<u8>> = all.iter().filter(|k| !kept(k, 50)).cloned().collect();
        fail::cfg_callback("list-frame-loaded", move || {
            let hit = hits.fetch_add(1, Ordering::Relaxed) + 1;
            if hit == first_hit {
                // About half of F's own doomed keys (F stays above a quarter of a frame, so it
                // does not merge into frame 0 yet), then F1's: F1 shrinks and merges into F.
                let own: Vec<&Vec<u8>> =
                    doomed.iter().filter(|k| k.starts_with(&lf) && !k.starts_with(&l1)).collect();
                own[own.len() / 2..].iter().copied().for_each(&delete);
                doomed.iter().filter(|k| k.starts_with(&l1)).for_each(&delete);
            } else if hit == first_hit + 1 {
                // Every key outside F but `0`, then F's other doomed keys, then one write into
                // F: it leaves F small enough to merge into the now small frame 0.
                all.iter().filter(|k| !k.starts_with(&lf) && k.as_slice() != b"0").for_each(&delete);
                doomed.iter().filter(|k| k.starts_with(&lf) && !k.starts_with(&l1)).for_each(&delete);
                let probe = [&lf[..], b"~probe"].concat();
                writer2
                    .apply(&[BatchOp::Put {
                        key: probe.clone(),
                        value: b"p".to_vec(),
                        condition: Condition::None,
                    }])
                    .expect("put");
                delete(&probe);
            }
        })
        .expect("failpoint");
    }
    let request = ListRequest { limit: 10_000, with_values: true, ..Default::default() };
    let (page, restarts) = harness.list_restarts(&request).expect("list");
    fail::remove("list-frame-loaded");
    println!(
        "{} frames entered, {restarts} restart(s), {} entries, {} frames left",
        hits.load(Ordering::Relaxed),
        page.items.len(),
        harness.frame_count()
    );
    assert_eq!(restarts, 2, "both frames were merged away as the walk entered them");
    // Every key before L1 was listed before the writers deleted any of it; after L1 only the
    // kept keys of F are left.
    let want: Vec<String> = all
        .iter()
        .filter(|k| k.as_slice() < l1.as_slice() || (kept(k, 50) && k.starts_with(&lf)))
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    let got: Vec<String> =
        page.items.iter().map(|i| String::from_utf8_lossy(i.name()).into_owned()).collect();
    let extra: Vec<&String> = got.iter().filter(|g| !want.contains(g)).collect();
    let missing: Vec<&String> = want.iter().filter(|w| !got.contains(w)).collect();
    let twice: Vec<&String> = got.windows(2).filter(|p| p[0] >= p[1]).map(|p| &p[1]).collect();
    assert!(
        extra.is_empty() && missing.is_empty() && twice.is_empty(),
        "listed but gone: {extra:?}; missing: {missing:?}; out of order or twice: {twice:?}"
    );
    assert_eq!(got, want);
    harness.check().expect("invariants");
    scenario.teardown();
}
