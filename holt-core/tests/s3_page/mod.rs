//! S3's listing page over a set of keys, and a one-byte-delimiter page from a tree, for the
//! listing tests that compare the two.

// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use std::collections::BTreeSet;

use holt_core::testing::TreeHarness;
use holt_core::{BatchOp, Condition, ListRequest};

pub fn put(key: &[u8]) -> BatchOp {
    BatchOp::Put { key: key.to_vec(), value: b"v".to_vec(), condition: Condition::None }
}

/// A put of `key` with a value of `len` bytes (the key's bytes repeated).
pub fn put_sized(key: &[u8], len: usize) -> BatchOp {
    let value = key.iter().copied().cycle().take(len).collect();
    BatchOp::Put { key: key.to_vec(), value, condition: Condition::None }
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

/// Checks the tree's page (delimiter '/') against S3's for every prefix, `start_after` and
/// limit given.
pub fn check_pages<S: AsRef<[u8]>>(
    tree: &TreeHarness,
    keys: &BTreeSet<Vec<u8>>,
    prefixes: &[&[u8]],
    starts: &[S],
    limits: &[usize],
    context: &str,
) {
    for &prefix in prefixes {
        for start in starts {
            let start = start.as_ref();
            for &limit in limits {
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

/// A xorshift shuffle of `items`, the same for the same `seed`.
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for n in (1..items.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        items.swap(n, (x % (n as u64 + 1)) as usize);
    }
}
