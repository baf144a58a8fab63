//! The deepest possible tree: 4096 keys each a prefix of the next (`a`, `aa`, … up to the
//! 4096-byte key) make a chain of 4096 inner nodes with terminals. Every operation (put, get,
//! list with and without a delimiter, delete with path compression, encode and reopen) must
//! work on it within a test thread's default stack.

use holt_core::testing::TreeHarness;
use holt_core::{BatchOp, Condition, ListRequest, KEY_LEN_MAX};

fn chain(n: usize) -> Vec<u8> {
    vec![b'a'; n]
}

fn run(frame_budget_bytes: usize) {
    let tree = TreeHarness::new(frame_budget_bytes);
    for n in 1..=KEY_LEN_MAX {
        let op = BatchOp::Put { key: chain(n), value: vec![n as u8], condition: Condition::None };
        tree.apply(&[op]).unwrap();
    }
    tree.check().unwrap();
    let tree = tree.reopen(usize::MAX).unwrap();
    for n in [1, 2, 100, 4095, 4096] {
        assert_eq!(tree.get(&chain(n)).unwrap().unwrap().value, [n as u8]);
    }
    let all = ListRequest { limit: 10_000, ..Default::default() };
    assert_eq!(tree.list(&all).unwrap().0.items.len(), KEY_LEN_MAX);
    let rolled = ListRequest { prefix: b"aaa", delimiter: b"aa", limit: 10, ..Default::default() };
    let names: Vec<Vec<u8>> = tree.list(&rolled).unwrap().0.items.iter().map(|i| i.name().to_vec()).collect();
    assert_eq!(names, [chain(3), chain(4), chain(5)]);
    // Delete every other key from the bottom up: nodes fold as terminals disappear.
    for n in (1..=KEY_LEN_MAX).rev().step_by(2) {
        tree.apply(&[BatchOp::Delete { key: chain(n), condition: Condition::None }]).unwrap();
    }
    tree.check().unwrap();
    assert_eq!(tree.list(&all).unwrap().0.items.len(), KEY_LEN_MAX / 2);
}

/// The whole chain in one frame: every insert copies the chain, O(n²) (~15 s in debug builds).
/// The small-frame variant reaches the same recursion depth across frames.
#[test]
fn deepest_chain_in_large_frames() {
    run(holt_core::testing::DEFAULT_FRAME_BUDGET_BYTES);
}

#[test]
fn deepest_chain_in_small_frames() {
    run(4096);
}
