//! A directory that holds a database's files but no MANIFEST (deleted by hand, or left out of
//! a restore) is refused, and nothing in it is removed: opening it used to delete the log
//! segments and the frames file and start an empty database. Leftovers of a first open that
//! crashed before its manifest was durable (`MANIFEST.tmp`) are still cleared.

use holt_core::{Db, Error, Options};

#[test]
fn a_lost_manifest_refuses_the_open_and_keeps_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    for i in 0..1_000u32 {
        db.put(format!("bucket/object-{i:04}").as_bytes(), b"value").unwrap();
    }
    db.close().unwrap();
    std::fs::remove_file(dir.path().join("MANIFEST")).unwrap();
    let names = |dir: &std::path::Path| {
        let mut n: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        n.sort();
        n
    };
    let before = names(dir.path());
    match Db::open(dir.path(), Options::default()) {
        Err(Error::Corruption { reason, .. }) => {
            assert!(reason.contains("manifest is missing"), "{reason}");
            assert!(reason.contains("frames.dat") || reason.contains("wal-"), "{reason}");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a directory without its manifest was opened as a new database"),
    }
    assert_eq!(names(dir.path()), before, "the refused open changed the directory");
    assert!(before.iter().any(|n| n == "frames.dat"), "{before:?}");
}

#[test]
fn a_first_open_that_crashed_before_its_manifest_is_cleared() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("MANIFEST.tmp"), b"half a manifest").unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.put(b"k", b"v").unwrap();
    db.close().unwrap();
    assert!(!dir.path().join("MANIFEST.tmp").exists());
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.get(b"k").unwrap().map(|e| e.value), Some(b"v".to_vec()));
}

/// A database directory several levels below an existing one is created, each new level
/// synced into its parent (checked here only as "it opens and works").
#[test]
fn nested_new_directories_are_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/c");
    let db = Db::open(&path, Options::default()).unwrap();
    db.put(b"k", b"v").unwrap();
    db.close().unwrap();
    assert!(path.join("MANIFEST").exists());
}
