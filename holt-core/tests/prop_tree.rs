//! Model test: random operations against the tree and a `BTreeMap` oracle must agree on every
//! read, every listing page and every condition outcome, and the tree's structural invariants
//! must hold after every operation, including across re-opening from encoded frame images
//! with a cache too small to hold them.
//!
//! Keys come from a small alphabet with 0x00, `/` and a two-byte UTF-8 character, so shared
//! prefixes, keys that are prefixes of other keys and common prefixes are frequent; a frame
//! budget of a few hundred bytes makes frames split and merge after a handful of keys. A
//! second property draws key bytes from all 256 values and adds batches that put or delete
//! up to 256 siblings at once, so nodes grow to 48 and 256 children and shrink back (the
//! small alphabet never gives a node more than six).
//! PROPTEST_CASES overrides the case count (256 by default); failures are kept in
//! `proptest-regressions/prop_tree.txt` and replay first.

use std::collections::BTreeMap;

use holt_core::testing::TreeHarness;
use holt_core::{BatchOp, Condition, Error, ListItem, ListRequest, Version};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

const ATOMS: [&[u8]; 7] = [b"a", b"b", b"/", b"\0", "\u{e9}".as_bytes(), b"a/", b"zz"];

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(0..ATOMS.len(), 1..6)
        .prop_map(|ix| ix.into_iter().flat_map(|i| ATOMS[i].to_vec()).collect())
}

fn any_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(0..ATOMS.len(), 0..max)
        .prop_map(|ix| ix.into_iter().flat_map(|i| ATOMS[i].to_vec()).collect())
}

/// A condition; `Version(true)` means "the key's current version", `Version(false)` a wrong one.
#[derive(Debug, Clone)]
enum Cond {
    None,
    Absent,
    Present,
    Version(bool),
}

#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, usize, Cond),
    Delete(Vec<u8>, Cond),
    Get(Vec<u8>),
    Batch(Vec<(bool, Vec<u8>, usize, Cond)>),
    List { prefix: Vec<u8>, delimiter: Vec<u8>, start_after: Vec<u8>, limit: usize, with_values: bool },
    Reopen { tiny_cache: bool },
}

fn cond() -> impl Strategy<Value = Cond> {
    prop_oneof![
        6 => Just(Cond::None),
        1 => Just(Cond::Absent),
        1 => Just(Cond::Present),
        1 => any::<bool>().prop_map(Cond::Version),
    ]
}

/// Keys of 1 to 3 bytes, each of any value: wide nodes and 0xFF.
fn wide_key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 1..4)
}

/// A batch putting (or deleting) the children `prefix + [b]` for many bytes `b` at once.
fn fan_out() -> impl Strategy<Value = Op> {
    (
        prop::collection::vec(any::<u8>(), 0..2),
        prop::collection::btree_set(any::<u8>(), 1..=256),
        any::<bool>(),
    )
        .prop_map(|(prefix, children, put)| {
            Op::Batch(
                children
                    .into_iter()
                    .map(|b| {
                        let mut k = prefix.clone();
                        k.push(b);
                        (put, k, 4, Cond::None)
                    })
                    .collect(),
            )
        })
}

fn op() -> impl Strategy<Value = Op> {
    op_over(key().boxed(), any_bytes(3).boxed(), any_bytes(4).boxed())
}

/// The wide-fan-out mix: any byte values, and batches of up to 256 siblings.
fn wide_op() -> impl Strategy<Value = Op> {
    let bytes = |max: usize| prop::collection::vec(any::<u8>(), 0..max).boxed();
    prop_oneof![4 => op_over(wide_key().boxed(), bytes(2), bytes(3)), 1 => fan_out()]
}

/// Operations over keys from `key`, listing prefixes from `prefix` and start points from
/// `start`.
fn op_over(
    key: BoxedStrategy<Vec<u8>>,
    prefix: BoxedStrategy<Vec<u8>>,
    start: BoxedStrategy<Vec<u8>>,
) -> impl Strategy<Value = Op> {
    let delimiter = prop_oneof![
        Just(Vec::new()),
        Just(b"/".to_vec()),
        Just(b"\0".to_vec()),
        Just("\u{e9}".as_bytes().to_vec()),
        prop::collection::vec(prop::sample::select(vec![b'a', b'/', 0u8, 0xc3, 0xa9]), 1..=3),
    ];
    prop_oneof![
        10 => (key.clone(), 0..48usize, cond()).prop_map(|(k, v, c)| Op::Put(k, v, c)),
        4 => (key.clone(), cond()).prop_map(|(k, c)| Op::Delete(k, c)),
        3 => key.clone().prop_map(Op::Get),
        2 => prop::collection::vec((any::<bool>(), key, 0..48usize, cond()), 1..6).prop_map(Op::Batch),
        4 => (prefix, delimiter, start, 0..12usize, any::<bool>()).prop_map(
            |(prefix, delimiter, start_after, limit, with_values)| Op::List {
                prefix,
                delimiter,
                start_after,
                limit,
                with_values
            }
        ),
        1 => any::<bool>().prop_map(|tiny_cache| Op::Reopen { tiny_cache }),
    ]
}

type Oracle = BTreeMap<Vec<u8>, (Vec<u8>, u64)>;

fn value_of(key: &[u8], len: usize) -> Vec<u8> {
    key.iter().cycle().take(len).copied().collect()
}

fn condition(c: &Cond, oracle: &Oracle, key: &[u8]) -> Condition {
    match c {
        Cond::None => Condition::None,
        Cond::Absent => Condition::Absent,
        Cond::Present => Condition::Present,
        Cond::Version(true) => Condition::Version(Version(oracle.get(key).map_or(999_999, |e| e.1))),
        Cond::Version(false) => Condition::Version(Version(oracle.get(key).map_or(0, |e| e.1 + 7))),
    }
}

fn holds(c: Condition, current: Option<u64>) -> bool {
    match c {
        Condition::None => true,
        Condition::Absent => current.is_none(),
        Condition::Present => current.is_some(),
        Condition::Version(Version(v)) => current == Some(v),
    }
}

/// S3 ListObjectsV2 over the oracle, written the obvious way.
fn oracle_list(oracle: &Oracle, r: &ListRequest<'_>) -> (Vec<ListItem>, bool) {
    let mut items: Vec<ListItem> = Vec::new();
    if r.limit == 0 {
        return (items, false);
    }
    for (k, (v, ver)) in oracle.iter().filter(|(k, _)| k.starts_with(r.prefix)) {
        let rest = &k[r.prefix.len()..];
        let cp = if r.delimiter.is_empty() {
            None
        } else {
            rest.windows(r.delimiter.len())
                .position(|w| w == r.delimiter)
                .map(|i| k[..r.prefix.len() + i + r.delimiter.len()].to_vec())
        };
        let item = match cp {
            Some(cp) => ListItem::CommonPrefix(cp),
            None => ListItem::Key {
                key: k.clone(),
                entry: holt_core::Entry {
                    value: if r.with_values { v.clone() } else { Vec::new() },
                    version: Version(*ver),
                },
            },
        };
        if item.name() <= r.start_after || items.last() == Some(&item) {
            continue;
        }
        items.push(item);
        if items.len() > r.limit {
            break;
        }
    }
    let truncated = items.len() > r.limit;
    items.truncate(r.limit);
    (items, truncated)
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut tree = TreeHarness::new(400);
    let mut oracle: Oracle = BTreeMap::new();
    for op in ops {
        match op {
            Op::Put(k, len, c) => {
                let value = value_of(&k, len);
                let cond = condition(&c, &oracle, &k);
                let op = BatchOp::Put { key: k.clone(), value: value.clone(), condition: cond };
                match tree.apply(&[op]) {
                    Ok((version, existed)) => {
                        prop_assert!(holds(cond, oracle.get(&k).map(|e| e.1)));
                        prop_assert_eq!(existed, vec![oracle.contains_key(&k)]);
                        oracle.insert(k, (value, version.0));
                    }
                    Err(Error::ConditionFailed) => prop_assert!(!holds(cond, oracle.get(&k).map(|e| e.1))),
                    Err(e) => return Err(TestCaseError::fail(format!("put failed: {e}"))),
                }
            }
            Op::Delete(k, c) => {
                let cond = condition(&c, &oracle, &k);
                match tree.apply(&[BatchOp::Delete { key: k.clone(), condition: cond }]) {
                    Ok((_, existed)) => {
                        prop_assert!(holds(cond, oracle.get(&k).map(|e| e.1)));
                        prop_assert_eq!(existed, vec![oracle.remove(&k).is_some()]);
                    }
                    Err(Error::ConditionFailed) => prop_assert!(!holds(cond, oracle.get(&k).map(|e| e.1))),
                    Err(e) => return Err(TestCaseError::fail(format!("delete failed: {e}"))),
                }
            }
            Op::Get(k) => {
                let got = tree.get(&k).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let want = oracle
                    .get(&k)
                    .map(|(v, ver)| holt_core::Entry { value: v.clone(), version: Version(*ver) });
                // The borrowed read sees the same entry, and nothing for an absent key.
                let borrowed = tree
                    .get_with(&k, |value, version| holt_core::Entry { value: value.to_vec(), version })
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(&borrowed, &want);
                prop_assert_eq!(got, want);
            }
            Op::Batch(parts) => {
                let ops: Vec<BatchOp> = parts
                    .iter()
                    .map(|(is_put, k, len, c)| {
                        let condition = condition(c, &oracle, k);
                        if *is_put {
                            BatchOp::Put { key: k.clone(), value: value_of(k, *len), condition }
                        } else {
                            BatchOp::Delete { key: k.clone(), condition }
                        }
                    })
                    .collect();
                let all_hold = ops.iter().all(|op| {
                    let (BatchOp::Put { key, condition, .. } | BatchOp::Delete { key, condition }) = op;
                    holds(*condition, oracle.get(key).map(|e| e.1))
                });
                match tree.apply(&ops) {
                    Ok((version, existed)) => {
                        prop_assert!(all_hold);
                        for (op, existed) in ops.iter().zip(existed) {
                            match op {
                                BatchOp::Put { key, value, .. } => {
                                    prop_assert_eq!(
                                        existed,
                                        oracle.insert(key.clone(), (value.clone(), version.0)).is_some()
                                    )
                                }
                                BatchOp::Delete { key, .. } => {
                                    prop_assert_eq!(existed, oracle.remove(key).is_some())
                                }
                            }
                        }
                    }
                    Err(Error::ConditionFailed) => prop_assert!(!all_hold),
                    Err(e) => return Err(TestCaseError::fail(format!("batch failed: {e}"))),
                }
            }
            Op::List { prefix, delimiter, start_after, limit, with_values } => {
                let request = ListRequest {
                    prefix: &prefix,
                    delimiter: &delimiter,
                    start_after: &start_after,
                    limit,
                    with_values,
                };
                let (page, _) = tree.list(&request).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let (items, truncated) = oracle_list(&oracle, &request);
                prop_assert_eq!(page.items, items, "{:?}", request);
                prop_assert_eq!(page.truncated, truncated, "{:?}", request);
                // The usage of the listing's prefix, against a count of the oracle's keys
                // (the harness weighs a value by its length).
                let under = oracle.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix));
                let (keys, weight) = under.fold((0, 0), |(n, w), (_, (v, _))| (n + 1, w + v.len() as u64));
                let usage = tree.usage(&prefix).map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!((usage.keys, usage.weight), (keys, weight), "usage of {:?}", prefix);
            }
            Op::Reopen { tiny_cache } => {
                let budget = if tiny_cache { 1_000 } else { usize::MAX };
                tree = tree.reopen(budget).map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
        }
        if let Err(broken) = tree.check() {
            return Err(TestCaseError::fail(format!("invariant broken: {broken}")));
        }
        prop_assert_eq!(tree.key_count(), oracle.len() as u64);
    }
    // Everything the oracle holds is readable at the end, through a full scan too.
    let all = ListRequest { limit: usize::MAX, with_values: true, ..Default::default() };
    let (page, _) = tree.list(&all).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(page.items, oracle_list(&oracle, &all).0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(256),
        // Integration tests have no `src/` parent, so proptest's default would put the file
        // beside this one under another name: name it explicitly.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/proptest-regressions/prop_tree.txt"
        )))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn tree_agrees_with_btreemap(ops in prop::collection::vec(op(), 1..120)) {
        run(ops)?;
    }

    #[test]
    fn tree_agrees_with_btreemap_on_wide_nodes(ops in prop::collection::vec(wide_op(), 1..60)) {
        run(ops)?;
    }
}
