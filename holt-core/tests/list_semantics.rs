//! Listing follows S3 ListObjectsV2: byte order, common prefixes that count one entry each and
//! include the whole delimiter, delimiters of any length searched from the end of the prefix,
//! exclusive `start_after` (a prefix it falls inside is not returned again), and `truncated`
//! decided by looking one entry past the page.

use holt_core::{Db, ListItem, ListRequest, Options};

fn db_with(keys: &[&str]) -> Db {
    let db = Db::open_in_memory(Options::default()).unwrap();
    for k in keys {
        db.put(k.as_bytes(), k.as_bytes()).unwrap();
    }
    db
}

fn names(db: &Db, prefix: &str, delimiter: &str, start_after: &str, limit: usize) -> (Vec<String>, bool) {
    let page = db
        .list(&ListRequest {
            prefix: prefix.as_bytes(),
            delimiter: delimiter.as_bytes(),
            start_after: start_after.as_bytes(),
            limit,
            with_values: false,
        })
        .unwrap();
    let names = page
        .items
        .iter()
        .map(|i| match i {
            ListItem::Key { key, .. } => String::from_utf8_lossy(key).into_owned(),
            ListItem::CommonPrefix(p) => format!("{}*", String::from_utf8_lossy(p)),
        })
        .collect();
    (names, page.truncated)
}

#[test]
fn byte_order_puts_plus_before_slash() {
    let db = db_with(&["foo/x", "foo+1/y", "foo"]);
    assert_eq!(names(&db, "", "", "", 10).0, ["foo", "foo+1/y", "foo/x"]);
    assert_eq!(names(&db, "", "/", "", 10).0, ["foo", "foo+1/*", "foo/*"]);
}

#[test]
fn common_prefixes_count_once_and_page_boundaries_are_exclusive() {
    let db = db_with(&["a/1", "a/2", "b", "c/1", "c/2/x", "d"]);
    assert_eq!(names(&db, "", "/", "", 2), (vec!["a/*".into(), "b".into()], true));
    assert_eq!(names(&db, "", "/", "b", 2), (vec!["c/*".into(), "d".into()], false));
    // Resuming after a common prefix skips everything under it.
    assert_eq!(names(&db, "", "/", "a/", 10).0, ["b", "c/*", "d"]);
    // `start_after` inside a rolled-up prefix does not return that prefix again.
    assert_eq!(names(&db, "", "/", "c/1", 10).0, ["d"]);
    assert_eq!(names(&db, "", "/", "c", 10).0, ["c/*", "d"]);
    // Exactly filling the page is not truncated; a zero limit is an empty, complete page.
    assert_eq!(names(&db, "", "/", "", 4), (vec!["a/*".into(), "b".into(), "c/*".into(), "d".into()], false));
    assert_eq!(names(&db, "", "/", "", 0), (vec![], false));
    // `start_after` past the end, or not present, is fine.
    assert_eq!(names(&db, "", "/", "zzz", 10), (vec![], false));
    assert_eq!(names(&db, "", "", "b0", 10).0, ["c/1", "c/2/x", "d"]);
}

#[test]
fn delimiter_is_searched_from_the_end_of_the_prefix() {
    let db = db_with(&["bar", "baza/1", "bazb", "ba/x"]);
    // Prefix `ba` ends mid-segment: `bar` is a key, `baza...` rolls up to `baza`.
    assert_eq!(names(&db, "ba", "a", "", 10).0, ["ba/x", "bar", "baza*", "bazb"]);
    // The occurrence inside the prefix does not count.
    assert_eq!(names(&db, "ba/", "/", "", 10).0, ["ba/x"]);
}

#[test]
fn multi_byte_delimiters_and_zero_bytes() {
    let db = db_with(&["x--y--z", "x-y", "x--", "w"]);
    assert_eq!(names(&db, "", "--", "", 10).0, ["w", "x--*", "x-y"]);
    assert_eq!(names(&db, "x--", "--", "", 10).0, ["x--", "x--y--*"]);
    let db = Db::open_in_memory(Options::default()).unwrap();
    for k in [&b"k"[..], b"k\0", b"k\0\0", b"k\0a", b"ka"] {
        db.put(k, b"v").unwrap();
    }
    let page = db.list(&ListRequest { delimiter: b"\0", limit: 10, ..Default::default() }).unwrap();
    let got: Vec<&[u8]> = page.items.iter().map(ListItem::name).collect();
    assert_eq!(got, [&b"k"[..], b"k\0", b"ka"]);
    assert!(matches!(page.items[1], ListItem::CommonPrefix(_)));
}

#[test]
fn values_are_copied_only_when_asked() {
    let db = db_with(&["k1", "k2"]);
    let with = db.list(&ListRequest { limit: 10, with_values: true, ..Default::default() }).unwrap();
    let without = db.list(&ListRequest { limit: 10, with_values: false, ..Default::default() }).unwrap();
    match (&with.items[0], &without.items[0]) {
        (ListItem::Key { entry: a, .. }, ListItem::Key { entry: b, .. }) => {
            assert_eq!(a.value, b"k1");
            assert!(b.value.is_empty());
            assert_eq!(a.version, b.version);
        }
        other => panic!("unexpected {other:?}"),
    }
    let scanned = db.scan(b"k", b"k1", 10).unwrap();
    assert_eq!(scanned.len(), 1);
    assert_eq!(scanned[0].0, b"k2");
    assert_eq!(scanned[0].1.value, b"k2");
}

/// `list_with` visits exactly the page `list` returns (values and versions included), in the
/// same order, and reports the same `truncated`, for every page size around the data's size.
#[test]
fn list_with_visits_the_same_page_as_list() {
    let keys = ["a/1", "a/2", "a/b/3", "ab", "b", "b/c/d", "c", "c\0", "d/e", "e"];
    let db = db_with(&keys);
    for limit in 0..=keys.len() + 1 {
        for delimiter in ["", "/", "b/"] {
            let request = ListRequest {
                prefix: b"",
                delimiter: delimiter.as_bytes(),
                start_after: b"a/1",
                limit,
                with_values: true,
            };
            let page = db.list(&request).unwrap();
            let mut visited = Vec::new();
            let truncated = db
                .list_with(&request, &mut |entry| {
                    visited.push(match entry {
                        holt_core::ListEntry::Key { key, value, version } => ListItem::Key {
                            key: key.to_vec(),
                            entry: holt_core::Entry { value: value.to_vec(), version },
                        },
                        holt_core::ListEntry::CommonPrefix(p) => ListItem::CommonPrefix(p.to_vec()),
                    })
                })
                .unwrap();
            assert_eq!(visited, page.items, "limit {limit}, delimiter {delimiter:?}");
            assert_eq!(truncated, page.truncated, "limit {limit}, delimiter {delimiter:?}");
            assert!(visited.len() <= limit);
        }
    }
}

/// An unbounded page (`usize::MAX`, what a full scan asks for) walks every entry without the
/// look-ahead arithmetic overflowing.
#[test]
fn unbounded_limit_lists_everything() {
    let keys = ["a/1", "a/2", "b", "c/d"];
    let db = db_with(&keys);
    assert_eq!(names(&db, "", "", "", usize::MAX), (keys.iter().map(|k| k.to_string()).collect(), false));
    assert_eq!(names(&db, "", "/", "", usize::MAX), (vec!["a/*".into(), "b".into(), "c/*".into()], false));
    assert_eq!(db.scan(b"", b"", usize::MAX).unwrap().len(), keys.len());
}
