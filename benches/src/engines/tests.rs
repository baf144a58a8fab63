//! Every adapter against a `BTreeMap` oracle: the same small data set, then gets, scans and
//! delimiter listings must match what the oracle says S3 semantics give. These keep the
//! benchmark honest: an engine that listed the wrong page would otherwise look fast.

use std::collections::BTreeMap;

use super::*;
use crate::data::{self, DataSet, Rng};

/// The oracle is the `btreemap` engine: an ordered map behind a lock, walked like any other.
type Oracle = btreemap::BTreeMapEngine;

/// S3 ListObjectsV2 semantics computed directly from the sorted keys, without seeking.
fn expected_list(m: &BTreeMap<Vec<u8>, Vec<u8>>, prefix: &[u8], limit: usize) -> Vec<Listed> {
    let mut out: Vec<Listed> = Vec::new();
    for (k, v) in m.range(prefix.to_vec()..) {
        if !k.starts_with(prefix) || out.len() >= limit {
            break;
        }
        match k[prefix.len()..].iter().position(|&b| b == b'/') {
            Some(pos) => {
                let p = k[..prefix.len() + pos + 1].to_vec();
                if !matches!(out.last(), Some(Listed::Prefix(last)) if *last == p) {
                    out.push(Listed::Prefix(p));
                }
            }
            None => out.push(Listed::Key(k.clone(), v.clone())),
        }
    }
    out
}

/// Key-value pairs in load order.
type Items = Vec<(Vec<u8>, Vec<u8>)>;

fn small_set() -> (DataSet, Items) {
    let set = DataSet::new(20_000);
    let mut rng = Rng::new(11);
    let order = data::permutation(set.len(), &mut rng);
    let items = order
        .iter()
        .map(|&i| {
            let mut v = Vec::new();
            data::value(i as u64, 0, &mut v);
            (set.key_vec(i as u64), v)
        })
        .collect();
    (set, items)
}

const PREFIXES: &[&[u8]] =
    &[b"", b"bucket-042/", b"bucket-042/tenant-07/", b"bucket-042/tenant-07/dir-013/", b"bucket-9"];

/// The published holt 0.9.2 lists some delimiter pages wrongly (at a bucket root it skips
/// common prefixes: `bucket-041/` comes back first, `bucket-040/` is missing). The benchmark
/// flags such pages by digest; here its listings are reported, not asserted, and everything
/// else about it still is.
const KNOWN_WRONG_LISTINGS: &[&str] = &["holt-0.9.2"];

fn check_engine(engine: &dyn Engine, name: &str) {
    let (set, items) = small_set();
    for chunk in items.chunks(1000) {
        engine.load_batch(chunk).expect("load");
    }
    engine.finish().expect("finish");
    let oracle: BTreeMap<Vec<u8>, Vec<u8>> = items.into_iter().collect();
    let mut out = Vec::new();
    for i in [0u64, 1, 4_999, 19_999] {
        let k = set.key_vec(i);
        assert!(engine.get(&k, &mut out).expect("get"), "{name}: key {i} missing");
        assert_eq!(&out, &oracle[&k], "{name}: value of key {i}");
    }
    assert!(!engine.get(b"bucket-042/absent", &mut out).expect("get"), "{name}: absent key found");
    for prefix in PREFIXES {
        for limit in [1usize, 7, 1000] {
            let mut page = Page::default();
            engine.list(prefix, b'/', limit, &mut page).expect("list");
            let page = page.to_listed();
            let want = expected_list(&oracle, prefix, limit);
            if KNOWN_WRONG_LISTINGS.contains(&name) {
                if page != want {
                    eprintln!(
                        "{name}: known-wrong listing of {:?} limit {limit}",
                        String::from_utf8_lossy(prefix)
                    );
                }
                continue;
            }
            assert_eq!(page, want, "{name}: list {:?} limit {limit}", String::from_utf8_lossy(prefix));
        }
        let mut scanned = Vec::new();
        engine.scan(prefix, 100, &mut scanned).expect("scan");
        let want: Vec<(Vec<u8>, Vec<u8>)> = oracle
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .take(100)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(scanned, want, "{name}: scan {:?}", String::from_utf8_lossy(prefix));
    }
    // Writes: overwrite, rename, delete, each visible afterwards.
    let k = set.key_vec(3);
    engine.put(&k, b"new").expect("put");
    assert!(engine.get(&k, &mut out).expect("get") && out == b"new", "{name}: overwrite not visible");
    assert!(engine.rename(&k, b"bucket-042/renamed").expect("rename"), "{name}: rename source missing");
    assert!(!engine.get(&k, &mut out).expect("get"), "{name}: rename left the source");
    assert!(
        engine.get(b"bucket-042/renamed", &mut out).expect("get") && out == b"new",
        "{name}: rename target"
    );
    engine.delete(b"bucket-042/renamed").expect("delete");
    assert!(!engine.get(b"bucket-042/renamed", &mut out).expect("get"), "{name}: delete not visible");
    assert!(!engine.rename(b"bucket-042/never", b"x").expect("rename"), "{name}: rename of a missing key");
}

#[test]
fn generic_list_matches_s3_semantics_on_the_oracle() {
    check_engine(&Oracle::new(), "oracle");
}

#[test]
fn every_engine_agrees_with_the_oracle() {
    let root = std::env::temp_dir().join(format!("holt-bench-engine-tests-{}", std::process::id()));
    let options = OpenOptions { mode: WriteMode::LogToPageCache, cache_bytes: 32 << 20 };
    for name in ENGINE_NAMES {
        let engine = match open(name, &root.join(name), options) {
            Ok(e) => e,
            // holt-core may be compiled out (feature off); every other engine must open.
            Err(e) if name.starts_with("holt-core") && !cfg!(feature = "holt-core") => {
                eprintln!("skipping {name}: {e}");
                continue;
            }
            Err(e) => panic!("{name}: open failed: {e}"),
        };
        check_engine(&*engine, name);
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn prefix_successor_is_the_first_key_past_the_prefix() {
    assert_eq!(prefix_successor(b"a/"), Some(b"a0".to_vec()));
    assert_eq!(prefix_successor(b"a\xff\xff"), Some(b"b".to_vec()));
    assert_eq!(prefix_successor(b"\xff"), None);
}

#[test]
fn generic_list_skips_keys_with_high_bytes_under_a_rolled_up_prefix() {
    // A seek to "prefix + 0xFF" would land on "d/\xff\xff" and emit "d/" twice.
    let oracle = Oracle::new();
    let keys: [&[u8]; 4] = [b"d/a", b"d/\xff", b"d/\xff\xff", b"e"];
    oracle.load_batch(&keys.iter().map(|k| (k.to_vec(), b"v".to_vec())).collect::<Vec<_>>()).unwrap();
    let mut out = Page::default();
    generic_list(&oracle, b"", b'/', 10, &mut out).unwrap();
    assert_eq!(
        out.to_listed(),
        vec![Listed::Prefix(b"d/".to_vec()), Listed::Key(b"e".to_vec(), b"v".to_vec())]
    );
}
