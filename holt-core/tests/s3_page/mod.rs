//! S3's listing page over a set of keys, and a one-byte-delimiter page from a tree, for the
//! listing tests that compare the two.

use std::collections::BTreeSet;

use holt_core::testing::TreeHarness;
use holt_core::{BatchOp, Condition, ListRequest};

pub fn put(key: &[u8]) -> BatchOp {
    BatchOp::Put { key: key.to_vec(), value: b"v".to_vec(), condition: Condition::None }
}

pub fn delete(key: &[u8]) -> BatchOp {
    BatchOp::Delete { key: key.to_vec(), condition: Condition::None }
}

/// Applies `ops` to the tree and to the model's `keys`, then checks every tree invariant
/// (leads included).
pub fn apply(tree: &TreeHarness, ops: Vec<BatchOp>, keys: &mut BTreeSet<Vec<u8>>) {
    for op in &ops {
        match op {
            BatchOp::Put { key, .. } => keys.insert(key.clone()),
            BatchOp::Delete { key, .. } => keys.remove(key),
        };
    }
    tree.apply(&ops).unwrap();
    tree.check().unwrap();
}

/// S3's page over `keys`: names after `start_after` (a common prefix it falls inside is not
/// returned again), in order, at most `limit`; and whether more follow.
pub fn model(
    keys: &BTreeSet<Vec<u8>>,
    prefix: &[u8],
    d: u8,
    start_after: &[u8],
    limit: usize,
) -> (Vec<Vec<u8>>, bool) {
    let mut names: Vec<Vec<u8>> = Vec::new();
    for key in keys.iter().filter(|k| k.starts_with(prefix) && k.as_slice() > start_after) {
        let name = match key[prefix.len()..].iter().position(|&b| b == d) {
            Some(i) => key[..prefix.len() + i + 1].to_vec(),
            None => key.clone(),
        };
        if name.as_slice() > start_after && names.last() != Some(&name) {
            names.push(name);
        }
    }
    let truncated = names.len() > limit;
    names.truncate(limit);
    (names, truncated)
}

/// The tree's page with delimiter '/': names, whether truncated, and the nodes it visited.
pub fn page(
    tree: &TreeHarness,
    prefix: &[u8],
    start_after: &[u8],
    limit: usize,
) -> ((Vec<Vec<u8>>, bool), u64) {
    let request = ListRequest { prefix, delimiter: b"/", start_after, limit, with_values: false };
    let (page, visited) = tree.list(&request).unwrap();
    ((page.items.iter().map(|i| i.name().to_vec()).collect(), page.truncated), visited)
}
