//! A node whose children all begin with the delimiter (`Inner::lead`, src/tree/node.rs) lists
//! its rollups from its own keys without reading a child. Checked here: the pages are exactly
//! S3's (every start position and page size, children that are leaves, inner nodes, a leaf
//! whose whole suffix is the delimiter, a key byte that is the delimiter itself), before and
//! after the tree is reopened from its frames (where `lead` is recomputed by the decoder), and
//! through writes that make the node's children stop, then start again, to share a lead; and
//! a page of such rollups reads a handful of nodes, not one per entry.

use std::collections::BTreeSet;

use holt_core::testing::TreeHarness;
use holt_core::BatchOp;

mod s3_page;
use s3_page::{apply, delete, page, put};

fn check_all_pages(tree: &TreeHarness, keys: &BTreeSet<Vec<u8>>, context: &str) {
    let mut starts: Vec<Vec<u8>> = vec![Vec::new(), b"d".to_vec(), b"d/".to_vec(), b"d/u".to_vec()];
    for k in keys {
        starts.push(k.clone());
        starts.push(k[..k.len() - 1].to_vec());
        starts.push([&k[..], b"~"].concat());
    }
    let prefixes: [&[u8]; 4] = [b"", b"d", b"d/", b"d/u"];
    s3_page::check_pages(tree, keys, &prefixes, &starts, &[1, 2, 3, 5, 100], context);
}

#[test]
fn lead_pages_match_s3_through_writes_and_reopen() {
    let tree = TreeHarness::new(64 * 1024);
    let mut keys: BTreeSet<Vec<u8>> = BTreeSet::new();
    // Under `d/u`: children 0..9 whose own bytes all begin with '/': an inner node (several
    // files), a leaf (one file), a leaf that is exactly "/", a deeper directory.
    let mut ops: Vec<BatchOp> = Vec::new();
    for c in b'0'..=b'9' {
        let files = usize::from(c - b'0') % 3;
        for f in 0..=files {
            ops.push(put(format!("d/u{}/f{f}", c as char).as_bytes()));
        }
    }
    ops.push(put(b"d/u7/"));
    ops.push(put(b"d/u8/g/h"));
    // A key byte that is the delimiter itself, beside `d/u`.
    ops.push(put(b"d//z"));
    apply(&tree, ops, &mut keys);
    check_all_pages(&tree, &keys, "built");

    // A child that does not begin with '/' (`d/uX...`): the node stops sharing a lead.
    apply(&tree, vec![put(b"d/u5x")], &mut keys);
    check_all_pages(&tree, &keys, "one child without the lead");
    // Removing it: every child begins with '/' again.
    apply(&tree, vec![delete(b"d/u5x")], &mut keys);
    check_all_pages(&tree, &keys, "lead back");
    // A new child whose own bytes begin with another byte (a leaf `-x` under key byte 'A').
    apply(&tree, vec![put(b"d/uA-x")], &mut keys);
    check_all_pages(&tree, &keys, "a new child with another lead");
    apply(&tree, vec![delete(b"d/uA-x")], &mut keys);

    let tree = tree.reopen(1 << 30).unwrap();
    tree.check().unwrap();
    check_all_pages(&tree, &keys, "reopened");
}

#[test]
fn a_page_of_lead_rollups_reads_no_child() {
    // `p/` + 100 directories `p/000/` .. `p/099/`, each with 20 files: the nodes at the last
    // digit hold children that all begin with '/'.
    let tree = TreeHarness::new(256 * 1024);
    let mut ops = Vec::new();
    for dir in 0..100 {
        for f in 0..20 {
            ops.push(put(format!("p/{dir:03}/file-{f:02}").as_bytes()));
        }
    }
    tree.apply(&ops).unwrap();
    tree.check().unwrap();
    let ((names, truncated), visited) = page(&tree, b"p/", b"", 1000);
    assert_eq!(names.len(), 100);
    assert!(!truncated);
    assert!(names.iter().enumerate().all(|(i, n)| n == format!("p/{i:03}/").as_bytes()));
    // Without the lead each of the 100 rollups reads its child: at least 100 visits. With
    // it, the walk reads the nodes down to the 10 last-digit nodes and stops there.
    println!("100 rollups read {visited} nodes");
    assert!(visited < 40, "100 rollups read {visited} nodes");
}
