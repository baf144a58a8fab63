//! The crash oracle shared by the crash, recovery and failpoint tests.
//!
//! After any crash, the recovered database must:
//! 1. contain every acknowledged write with its exact value (and version);
//! 2. equal the writes with version <= k for some k: a prefix of the log, no holes;
//! 3. contain nothing that was never written;
//! 4. answer point reads and delimiter listings exactly like that prefix;
//! 5. read the same after another reopen, and accept writes afterwards.
#![allow(dead_code)]

use std::collections::BTreeMap;

use std::sync::Arc;
use std::time::Duration;

use holt_core::io::{Fault, SimFs, Vfs};
use holt_core::{Batch, Condition, Db, Error, ListItem, ListRequest, Options, WriteOptions};

/// How a write ended, as its caller saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Returned Ok: must survive.
    Acked,
    /// Failed after reaching the log (or never returned): may or may not survive.
    Maybe,
    /// Refused before anything was applied: must not appear.
    Refused,
}

#[derive(Debug, Clone)]
pub struct Write {
    /// (key, Some(value)) for a put, (key, None) for a delete.
    pub ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    pub version: Option<u64>,
    pub outcome: Outcome,
}

/// Writes in log order (one writer thread, or sorted by version).
#[derive(Debug, Default, Clone)]
pub struct History {
    pub writes: Vec<Write>,
}

pub fn classify(result: &Result<u64, Error>) -> (Option<u64>, Outcome) {
    match result {
        Ok(v) => (Some(*v), Outcome::Acked),
        Err(Error::Io { may_have_applied: true, .. }) => (None, Outcome::Maybe),
        Err(_) => (None, Outcome::Refused),
    }
}

impl History {
    pub fn record(&mut self, ops: Vec<(Vec<u8>, Option<Vec<u8>>)>, result: &Result<u64, Error>) {
        let (version, outcome) = classify(result);
        self.writes.push(Write { ops, version, outcome });
    }

    pub fn acked(&self) -> usize {
        self.writes.iter().filter(|w| w.outcome == Outcome::Acked).count()
    }
}

pub type State = BTreeMap<Vec<u8>, (Vec<u8>, Option<u64>)>;

/// Everything in the database, in key order.
pub fn dump(db: &Db) -> Vec<(Vec<u8>, Vec<u8>, u64)> {
    db.scan(b"", b"", usize::MAX)
        .expect("scan after recovery")
        .into_iter()
        .map(|(k, e)| (k, e.value, e.version.0))
        .collect()
}

fn matches(state: &State, got: &[(Vec<u8>, Vec<u8>, u64)]) -> bool {
    state.len() == got.len()
        && state
            .iter()
            .zip(got)
            .all(|((k, (v, ver)), (gk, gv, gver))| k == gk && v == gv && ver.is_none_or(|ver| ver == *gver))
}

/// S3-style listing of a model state.
pub fn model_list(state: &State, prefix: &[u8], delimiter: &[u8], limit: usize) -> Vec<Vec<u8>> {
    model_list_after(state, prefix, delimiter, b"", limit)
}

/// S3-style listing of a model state, of the names (keys and common prefixes) after
/// `start_after`.
pub fn model_list_after(
    state: &State,
    prefix: &[u8],
    delimiter: &[u8],
    start_after: &[u8],
    limit: usize,
) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    for key in state.keys().filter(|k| k.starts_with(prefix)) {
        let rest = &key[prefix.len()..];
        let name = match (!delimiter.is_empty())
            .then(|| rest.windows(delimiter.len()).position(|w| w == delimiter))
        {
            Some(Some(i)) => key[..prefix.len() + i + delimiter.len()].to_vec(),
            _ => key.clone(),
        };
        if name.as_slice() <= start_after {
            continue;
        }
        if out.last() != Some(&name) {
            out.push(name);
        }
        if out.len() == limit {
            break;
        }
    }
    out
}

/// Checks the recovered `db` against `history`; returns the prefix length that matched.
/// Panics with `context` (which should contain the seed) on any violation.
pub fn check(db: &Db, history: &History, context: &str) -> State {
    let got = dump(db);
    let candidates: Vec<&Write> = history.writes.iter().filter(|w| w.outcome != Outcome::Refused).collect();
    let last_acked = candidates.iter().rposition(|w| w.outcome == Outcome::Acked).map_or(0, |i| i + 1);
    let mut state = State::new();
    let mut found = None;
    for (i, w) in candidates.iter().enumerate() {
        if i >= last_acked && matches(&state, &got) {
            found = Some(state.clone());
            break;
        }
        for (k, v) in &w.ops {
            match v {
                Some(v) => state.insert(k.clone(), (v.clone(), w.version)),
                None => state.remove(k),
            };
        }
    }
    let state = match found {
        Some(s) => s,
        None if matches(&state, &got) => state,
        None => {
            let acked_missing: Vec<String> = {
                let mut s = State::new();
                for w in candidates.iter().take(last_acked) {
                    for (k, v) in &w.ops {
                        match v {
                            Some(v) => s.insert(k.clone(), (v.clone(), w.version)),
                            None => s.remove(k),
                        };
                    }
                }
                s.iter()
                    .filter(|(k, (v, _))| !got.iter().any(|(gk, gv, _)| gk == *k && gv == v))
                    .take(5)
                    .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                    .collect()
            };
            panic!(
                "{context}: recovered state ({} keys) is no prefix of the {} writes ({} acked); \
                 acked writes missing or different: {acked_missing:?}",
                got.len(),
                candidates.len(),
                history.acked()
            );
        }
    };
    // Point reads and delimiter listings agree with the same prefix.
    for (k, (v, _)) in state.iter().take(200) {
        let e = db.get(k).expect("get").unwrap_or_else(|| panic!("{context}: get misses a scanned key"));
        assert_eq!(&e.value, v, "{context}: get disagrees with scan");
    }
    for (prefix, delimiter) in [(&b""[..], &b"/"[..]), (b"t0/", b"/"), (b"t1/d", b"/"), (b"t2/", b"")] {
        let page = db
            .list(&ListRequest { prefix, delimiter, limit: 1000, ..Default::default() })
            .expect("list after recovery");
        let names: Vec<Vec<u8>> = page.items.iter().map(|i| ListItem::name(i).to_vec()).collect();
        assert_eq!(names, model_list(&state, prefix, delimiter, 1000), "{context}: listing differs");
        // The same listing in pages of 7, each starting after the last name of the one
        // before, as a client pages with start-after or a continuation token.
        let mut paged: Vec<Vec<u8>> = Vec::new();
        loop {
            let after = paged.last().cloned().unwrap_or_default();
            let page = db
                .list(&ListRequest { prefix, delimiter, start_after: &after, limit: 7, ..Default::default() })
                .expect("list a page after recovery");
            paged.extend(page.items.iter().map(|i| ListItem::name(i).to_vec()));
            if !page.truncated {
                break;
            }
        }
        assert_eq!(
            paged,
            model_list(&state, prefix, delimiter, usize::MAX),
            "{context}: paged listing differs"
        );
        // Starting inside the listing: after a key the state holds, and after a name that
        // falls inside a common prefix (the prefix itself is then at or before it).
        let middle = state.keys().filter(|k| k.starts_with(prefix)).nth(state.len() / 3).cloned();
        for after in middle.into_iter().chain([[prefix, b"d1/x"].concat()]) {
            let page = db
                .list(&ListRequest {
                    prefix,
                    delimiter,
                    start_after: &after,
                    limit: 1000,
                    ..Default::default()
                })
                .expect("list after a start point");
            let names: Vec<Vec<u8>> = page.items.iter().map(|i| ListItem::name(i).to_vec()).collect();
            assert_eq!(
                names,
                model_list_after(&state, prefix, delimiter, &after, 1000),
                "{context}: listing after {:?} differs",
                String::from_utf8_lossy(&after)
            );
        }
    }
    state
}

/// Reopen-twice and write-afterwards checks: `open` reopens the same storage.
pub fn check_stable(open: impl Fn() -> Db, expected: &State, context: &str) {
    for round in 0..2 {
        let db = open();
        let got = dump(&db);
        assert!(matches(expected, &got), "{context}: reopen {round} changed the state");
        db.put(b"zz/after-recovery", format!("{round}").as_bytes())
            .unwrap_or_else(|e| panic!("{context}: write after recovery failed: {e}"));
        db.delete(b"zz/after-recovery").expect("delete after recovery");
        drop(db);
    }
}

/// Deterministic key for step `i` of a workload: a few tenants, directories, files.
pub fn key(rng: &mut u64, space: u64) -> Vec<u8> {
    let r = next(rng) % space;
    format!("t{}/d{}/f{:04}", r % 3, (r / 3) % 4, r).into_bytes()
}

pub fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The seed for a randomized test: `HOLT_SEED` if set, else time-derived. Printed.
pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("HOLT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    println!("{test}: seed {seed} (rerun with HOLT_SEED={seed})");
    seed
}

pub fn opts() -> Options {
    Options {
        wal_ring_bytes: 4096,
        wal_flush_interval: Duration::from_millis(1),
        // Also the most log a checkpoint keeps its segment for: small, so the workloads'
        // checkpoints move the log to new segments (the roll steps) as well as stay in one.
        checkpoint_wal_bytes: 4 << 10,
        checkpoint_interval: Duration::from_secs(3600),
        ..Options::default()
    }
}

/// Runs `writes` random writes, injecting `fault` before write `inject_at`; returns history.
pub fn workload(
    db: &Db,
    fs: &SimFs,
    rng: &mut u64,
    writes: usize,
    inject_at: usize,
    fault: Option<Fault>,
) -> History {
    let mut history = History::default();
    for i in 0..writes {
        if i == inject_at {
            if let Some(f) = fault.clone() {
                fs.inject(f);
            }
        }
        let r = next(rng) % 100;
        let k = key(rng, 300);
        if r < 75 {
            let v = format!("v{i}-{}", next(rng) % 1000).into_bytes();
            let res = db.put(&k, &v).map(|v| v.0);
            history.record(vec![(k, Some(v))], &res);
        } else if r < 90 {
            let res = db.delete_with(&k, Condition::None, WriteOptions::default()).map(|_| 0);
            // A delete's version is not observable; record it as unversioned.
            let (_, outcome) = classify(&res);
            history.writes.push(Write { ops: vec![(k, None)], version: None, outcome });
        } else {
            let k2 = key(rng, 300);
            let mut b = Batch::new();
            b.put(k.clone(), b"batch-a".to_vec()).put(k2.clone(), b"batch-b".to_vec());
            let res = db.write_batch(&b, WriteOptions::default()).map(|v| v.0);
            history.record(vec![(k, Some(b"batch-a".to_vec())), (k2, Some(b"batch-b".to_vec()))], &res);
        }
        if i % 41 == 40 {
            let _ = db.checkpoint();
        }
    }
    history
}

/// One crash case: workload, crash, reopen, oracle, reopen twice.
pub fn crash_case(seed: u64, writes: usize, inject_at: usize, fault: Option<Fault>, label: &str) {
    let fs = SimFs::new(seed);
    let vfs: Arc<dyn Vfs> = fs.clone();
    let mut rng = seed;
    let db = Db::open_with_vfs(vfs.clone(), opts()).expect("open fresh");
    let history = workload(&db, &fs, &mut rng, writes, inject_at, fault);
    fs.crash();
    drop(db);
    let context = format!("{label} seed {seed}");
    let db =
        Db::open_with_vfs(vfs.clone(), opts()).unwrap_or_else(|e| panic!("{context}: reopen failed: {e}"));
    let state = check(&db, &history, &context);
    drop(db);
    check_stable(|| Db::open_with_vfs(vfs.clone(), opts()).expect("reopen"), &state, &context);
}
