//! A rolled-up prefix is skipped without visiting its keys: listing N common prefixes costs
//! O(N × depth) node visits whether each prefix hides 10 keys or 100,000 (here: within 2×).

use holt_core::testing::TreeHarness;
use holt_core::{BatchOp, Condition, ListItem, ListRequest};

/// 20 directories under `root/`; directory 0..20 each holds `per_dir` files, plus two flat keys.
fn tree_with(per_dir: u32) -> TreeHarness {
    let tree = TreeHarness::new(64 * 1024);
    let mut ops = Vec::new();
    for d in 0..20u32 {
        for f in 0..per_dir {
            let key = format!("root/dir-{d:02}/sub-{}/file-{f:08}.bin", f % 7).into_bytes();
            ops.push(BatchOp::Put { key, value: b"{}".to_vec(), condition: Condition::None });
            if ops.len() == 1000 {
                tree.apply(&ops).unwrap();
                ops.clear();
            }
        }
    }
    for k in ["root/a.txt", "root/z.txt"] {
        ops.push(BatchOp::Put { key: k.into(), value: b"{}".to_vec(), condition: Condition::None });
    }
    tree.apply(&ops).unwrap();
    tree
}

fn rollup(tree: &TreeHarness, start_after: &[u8]) -> (Vec<Vec<u8>>, u64) {
    let request =
        ListRequest { prefix: b"root/", delimiter: b"/", start_after, limit: 1000, with_values: true };
    let (page, visited) = tree.list(&request).unwrap();
    (page.items.iter().map(|i| i.name().to_vec()).collect(), visited)
}

#[test]
fn rollup_cost_does_not_grow_with_the_keys_under_each_prefix() {
    let small = tree_with(10 / 2 + 1); // 6 keys per directory
    let big = tree_with(5_000); // 100,000 keys in all
    let (names_small, cost_small) = rollup(&small, b"");
    let (names_big, cost_big) = rollup(&big, b"");
    assert_eq!(names_small, names_big);
    assert_eq!(names_big.len(), 22);
    assert!(names_big.iter().filter(|n| n.ends_with(b"/")).count() == 20);
    println!("nodes visited: {cost_small} over 120 keys, {cost_big} over 100,000 keys");
    // In the small tree the directories' parent lists them from its own keys, without reading
    // them (`Inner::lead`: every child begins with '/'); in the big one the directories are
    // frames of their own behind links, which roll up from the lead in their cell: one visit
    // per entry more. Beyond that, nothing may grow with the keys under each prefix.
    let bound = 2 * (cost_small + names_big.len() as u64);
    assert!(cost_big <= bound, "listing visited {cost_big} nodes over 100k keys vs {cost_small} over 120");
    // Resuming inside a rolled-up prefix is just as cheap and does not repeat it.
    let (resumed, cost_resumed) = rollup(&big, b"root/dir-07/sub-3/file-00000100.bin");
    assert_eq!(resumed.first().map(Vec::as_slice), Some(&b"root/dir-08/"[..]));
    assert!(cost_resumed <= bound);
    // A key-heavy page under one directory visits about one node per key, not more.
    let request = ListRequest { prefix: b"root/dir-03/sub-2/", limit: 500, ..Default::default() };
    let (page, visited) = big.list(&request).unwrap();
    assert_eq!(page.items.len(), 500);
    assert!(page.items.iter().all(|i| matches!(i, ListItem::Key { .. })));
    assert!(visited < 500 * 3, "500 keys cost {visited} node visits");
}
