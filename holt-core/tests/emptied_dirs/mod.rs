//! A three-level tree of small frames whose directories are then deleted whole, for the
//! merge tests: `d<i>/` directories of `s<j>/` subdirectories of files, so that with 1 KiB
//! frames each `d<i>/` is a frame and most `s<j>/` a frame below it.

// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use std::collections::BTreeSet;

use holt_core::testing::TreeHarness;

use crate::s3_page::{apply, delete, put, shuffle};

pub const FRAME_BUDGET: usize = 1024;
pub const DIRS: usize = 4;
pub const SUBDIRS: usize = 6;
pub const FILES: usize = 40;

pub fn file(i: usize, j: usize, k: usize) -> Vec<u8> {
    format!("d{i}/s{j}/f{k:03}").into_bytes()
}

/// Builds the tree (one batch per subdirectory); returns the subdirectories in the order
/// `seed` deletes them (a xorshift shuffle).
pub fn build(tree: &TreeHarness, keys: &mut BTreeSet<Vec<u8>>, seed: u64) -> Vec<(usize, usize)> {
    let mut dirs: Vec<(usize, usize)> = (0..DIRS).flat_map(|i| (0..SUBDIRS).map(move |j| (i, j))).collect();
    for &(i, j) in &dirs {
        apply(tree, (0..FILES).map(|k| put(&file(i, j, k))).collect(), keys);
    }
    assert!(tree.frame_count() > DIRS, "seed {seed}: only {} frames", tree.frame_count());
    shuffle(&mut dirs, seed);
    dirs
}

/// Deletes subdirectory `d<i>/s<j>/` in one batch (invariants checked after it).
pub fn delete_dir(tree: &TreeHarness, keys: &mut BTreeSet<Vec<u8>>, (i, j): (usize, usize)) {
    apply(tree, (0..FILES).map(|k| delete(&file(i, j, k))).collect(), keys);
}

/// Deletes what is left of directory `d<i>/` in one batch (invariants checked after it).
pub fn delete_tree(tree: &TreeHarness, keys: &mut BTreeSet<Vec<u8>>, i: usize) {
    let prefix = format!("d{i}/").into_bytes();
    let ops = keys.iter().filter(|k| k.starts_with(&prefix)).map(|k| delete(k)).collect();
    apply(tree, ops, keys);
}
