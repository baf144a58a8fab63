//! The public handle in memory mode: limits are enforced with their errors, conditional writes
//! change nothing when the condition fails, batches are all-or-nothing, versions increase, and
//! a key and the same key followed by 0x00 coexist.

use holt_core::{Batch, Condition, Db, Error, Options, Version, WriteOptions, KEY_LEN_MAX, VALUE_LEN_MAX};

fn db() -> Db {
    Db::open_in_memory(Options::default()).unwrap()
}

#[test]
fn limits_are_enforced() {
    let db = db();
    assert!(matches!(db.put(b"", b"v"), Err(Error::KeyLength { len: 0 })));
    let long = vec![b'k'; KEY_LEN_MAX + 1];
    assert!(matches!(db.put(&long, b"v"), Err(Error::KeyLength { .. })));
    assert!(matches!(db.get(&long), Err(Error::KeyLength { .. })));
    assert!(matches!(db.put(b"k", &vec![0; VALUE_LEN_MAX + 1]), Err(Error::ValueTooLarge { .. })));
    // The largest key and value are accepted and read back.
    let key = vec![0u8; KEY_LEN_MAX];
    db.put(&key, &vec![7; VALUE_LEN_MAX]).unwrap();
    assert_eq!(db.get(&key).unwrap().unwrap().value.len(), VALUE_LEN_MAX);
    assert_eq!(db.stats().keys, 1);
}

#[test]
fn key_and_key_with_zero_byte_coexist() {
    let db = db();
    for k in [&b"k"[..], b"k\0", b"k\0\0", b"\0"] {
        db.put(k, k).unwrap();
    }
    for k in [&b"k"[..], b"k\0", b"k\0\0", b"\0"] {
        assert_eq!(db.get(k).unwrap().unwrap().value, k);
    }
    assert!(db.delete(b"k\0").unwrap());
    assert!(!db.delete(b"k\0").unwrap());
    assert_eq!(db.get(b"k").unwrap().unwrap().value, b"k");
    assert_eq!(db.get(b"k\0\0").unwrap().unwrap().value, b"k\0\0");
    assert_eq!(db.scan(b"", b"", 10).unwrap().len(), 3);
}

#[test]
fn conditional_writes() {
    let db = db();
    let w = WriteOptions::default();
    let v1 = db.put_with(b"obj", b"one", Condition::Absent, w).unwrap();
    assert!(matches!(db.put_with(b"obj", b"two", Condition::Absent, w), Err(Error::ConditionFailed)));
    assert!(matches!(db.put_with(b"other", b"x", Condition::Present, w), Err(Error::ConditionFailed)));
    assert!(matches!(
        db.put_with(b"obj", b"two", Condition::Version(Version(v1.0 + 1)), w),
        Err(Error::ConditionFailed)
    ));
    assert_eq!(db.get(b"obj").unwrap().unwrap().value, b"one");
    let v2 = db.put_with(b"obj", b"two", Condition::Version(v1), w).unwrap();
    assert!(v2 > v1);
    assert_eq!(db.get(b"obj").unwrap().unwrap().version, v2);
    assert!(matches!(db.delete_with(b"obj", Condition::Version(v1), w), Err(Error::ConditionFailed)));
    assert!(db.delete_with(b"obj", Condition::Version(v2), w).unwrap());
    assert!(db.get(b"obj").unwrap().is_none());
    assert!(db.get(b"other").unwrap().is_none());
}

#[test]
fn batches_are_all_or_nothing() {
    let db = db();
    db.put(b"a", b"1").unwrap();
    let mut batch = Batch::new();
    batch.put(b"b", b"2").delete(b"a").put_if(b"c", b"3", Condition::Present);
    assert!(matches!(db.write_batch(&batch, WriteOptions::default()), Err(Error::ConditionFailed)));
    assert_eq!(db.get(b"a").unwrap().unwrap().value, b"1");
    assert!(db.get(b"b").unwrap().is_none());
    let mut batch = Batch::new();
    batch.put(b"b", b"2").delete(b"a").put_if(b"c", b"3", Condition::Absent);
    let v = db.write_batch(&batch, WriteOptions::default()).unwrap();
    assert!(db.get(b"a").unwrap().is_none());
    assert_eq!(db.get(b"b").unwrap().unwrap().version, v);
    assert_eq!(db.get(b"c").unwrap().unwrap().version, v);
    assert_eq!(db.stats().keys, 2);
    assert!(db.stats().last_lsn >= v.0);
}
