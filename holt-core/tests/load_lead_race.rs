//! A frame read back after an open publishes its lead (`FrameCell::lead`, the first byte of
//! its root's own bytes) before its root (`FrameCell::publish_loaded`). A latched writer that
//! gets the root without waiting for the load lock then sees the lead too, and its own publish
//! keeps the two in step. The first version stored the root first: a writer in between could
//! publish a root with another first byte, and the loader's late store left a lead the frame
//! lacked, so a listing rolled the frame up under the old byte and lost the new key (found in
//! review).
//!
//! The failpoint `frame-load-lead` sits between the two stores; here it starts a writer that
//! gives the frame being loaded a key diverging at its root's first byte, and waits up to
//! 2 s for it (with the right order the writer waits for the load lock, and runs after).
//! Afterwards the listing must hold the new key and every invariant must hold, the lead
//! among them.
//!
//! Run: `cargo test -p holt-core --features failpoints --test load_lead_race`.
#![cfg(feature = "failpoints")]

mod race;

use std::sync::Arc;
use std::time::Duration;

use holt_core::testing::TreeHarness;
use holt_core::{BatchOp, Condition, ListRequest};

const FRAME_BUDGET: usize = 4096;

fn put(key: &[u8]) -> BatchOp {
    BatchOp::Put { key: key.to_vec(), value: b"v".to_vec(), condition: Condition::None }
}

#[test]
fn a_write_while_its_frame_loads_leaves_a_true_lead() {
    let scenario = fail::FailScenario::setup();
    let harness = TreeHarness::new(FRAME_BUDGET);
    // Ten directories of 100 files: each is a frame of its own, linked at `k/0N`, its root
    // beginning with '/'.
    let ops: Vec<BatchOp> =
        (0..10).flat_map(|d| (0..100).map(move |f| put(format!("k/0{d}/file-{f:04}").as_bytes()))).collect();
    for chunk in ops.chunks(100) {
        harness.apply(chunk).expect("put");
    }
    let links = harness.links().expect("links");
    assert!(links.iter().any(|(path, _)| path == b"k/03"), "k/03 is not a frame of its own: {links:?}");
    let harness = Arc::new(harness.reopen(usize::MAX).expect("reopen"));

    // The listing below loads `k/03`'s frame; at the failpoint a writer adds `k/03x`, whose
    // byte after `k/03` is not the root's '/'.
    let writer = {
        let harness = Arc::clone(&harness);
        race::WriterAt::arm("frame-load-lead", Duration::from_secs(2), move || {
            harness.apply(&[put(b"k/03x")]).expect("write during the load");
        })
    };
    let request = ListRequest { prefix: b"k/03/", limit: 1, ..Default::default() };
    harness.list(&request).expect("list, loading the frame");
    println!("writer finished inside the window: {}", writer.join());

    let request = ListRequest { prefix: b"k/", delimiter: b"/", limit: 100, ..Default::default() };
    let (page, _) = harness.list(&request).expect("list");
    let names: Vec<String> =
        page.items.iter().map(|i| String::from_utf8_lossy(i.name()).into_owned()).collect();
    let mut want: Vec<String> = (0..10).map(|d| format!("k/0{d}/")).collect();
    want.insert(4, "k/03x".into());
    assert_eq!(names, want);
    harness.check().expect("invariants, every lead among them");
    scenario.teardown();
}
