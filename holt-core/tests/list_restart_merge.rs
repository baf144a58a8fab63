//! A listing that meets a frame merged away after it loaded the frame's root restarts from
//! the tree's root, resuming at the path of the link it met (inclusive): every entry before
//! that path was emitted already and none after it. The failpoint `list-frame-loaded` sits in
//! the walk right after it loads a linked frame's root; here its first hit starts a writer
//! that deletes nine keys in ten, from the last key down, so the frames shrink and merge back
//! into their parents, the one being listed among them. The walk then sees its frame retired,
//! restarts, and must return each remaining key (and common prefix) exactly once, in order.
//!
//! Run: `cargo test -p holt-core --features failpoints --test list_restart_merge`.
#![cfg(feature = "failpoints")]

mod race;

use std::sync::Arc;
use std::time::Duration;

use holt_core::testing::TreeHarness;
use holt_core::{BatchOp, Condition, ListItem, ListRequest};

/// Small frames, so a thousand keys make frames that link to frames.
const FRAME_BUDGET: usize = 4096;

/// `k/AA` and `k/AA/BBB`: every directory is also a key, so a linked frame's root may hold the
/// key spelled by the link's own path (where an exclusive resume point would drop it).
fn keys() -> Vec<Vec<u8>> {
    let mut keys = vec![b"0".to_vec()];
    for a in 0..10 {
        keys.push(format!("k/{a:02}").into_bytes());
        keys.extend((0..100).map(|b| format!("k/{a:02}/{b:03}").into_bytes()));
    }
    keys
}

/// What the writer leaves: `0`, the directory keys and every tenth file.
fn kept(key: &[u8]) -> bool {
    key.len() <= 4 || key.ends_with(b"0")
}

fn build() -> TreeHarness {
    let harness = TreeHarness::new(FRAME_BUDGET);
    let mut all = keys();
    let mut state = 0x0BAD_5EED_u64;
    for i in (1..all.len()).rev() {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        all.swap(i, (state >> 33) as usize % (i + 1));
    }
    for key in all {
        let value = [b"v-".as_slice(), &key].concat();
        harness.apply(&[BatchOp::Put { key, value, condition: Condition::None }]).expect("put");
    }
    harness
}

/// The page a listing of the final tree returns, by the S3 rules (computed from the keys).
fn expected(remaining: &[Vec<u8>], prefix: &[u8], delimiter: &[u8]) -> Vec<ListItem> {
    let mut items: Vec<ListItem> = Vec::new();
    for key in remaining.iter().filter(|k| k.starts_with(prefix)) {
        let rest = &key[prefix.len()..];
        let cut = (!delimiter.is_empty())
            .then(|| rest.windows(delimiter.len()).position(|w| w == delimiter))
            .flatten();
        let item = match cut {
            Some(at) => ListItem::CommonPrefix(key[..prefix.len() + at + delimiter.len()].to_vec()),
            None => ListItem::Key {
                key: key.clone(),
                entry: holt_core::Entry {
                    value: [b"v-".as_slice(), key].concat(),
                    version: holt_core::Version(0),
                },
            },
        };
        if items.last().map(ListItem::name) != Some(item.name()) {
            items.push(item);
        }
    }
    items
}

#[test]
fn a_listing_that_meets_a_merged_frame_resumes_where_it_was() {
    let scenario = fail::FailScenario::setup();
    let mut remaining: Vec<Vec<u8>> = keys().into_iter().filter(|k| kept(k)).collect();
    remaining.sort();
    for (prefix, delimiter) in [(&b""[..], &b""[..]), (b"k/", b"/"), (b"k/", b"0/")] {
        let harness = Arc::new(build());
        let frames_before = harness.frame_count();
        let writer = {
            let harness = Arc::clone(&harness);
            race::WriterAt::arm("list-frame-loaded", Duration::from_secs(10), move || {
                let mut doomed: Vec<Vec<u8>> = keys().into_iter().filter(|k| !kept(k)).collect();
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
        let want = expected(&remaining, prefix, delimiter);
        let names = |items: &[ListItem]| {
            items.iter().map(|i| String::from_utf8_lossy(i.name()).into_owned()).collect::<Vec<_>>()
        };
        assert_eq!(names(&page.items), names(&want), "the page after the restart");
        for (got, want) in page.items.iter().zip(&want) {
            if let (ListItem::Key { entry: g, .. }, ListItem::Key { entry: w, .. }) = (got, want) {
                assert_eq!(g.value, w.value);
            }
        }
        assert!(!page.truncated);
        harness.check().expect("invariants");
    }
    scenario.teardown();
}
