//! Model test with crashes: random puts, deletes, batches (sync and async), conditional
//! writes, reads, delimiter listings, checkpoints, clean reopens, power cuts and frozen
//! disks, run against the engine on the simulated file system and a `BTreeMap` model.
//!
//! Invariants checked:
//! - while no I/O has failed, every read and listing agrees with the model of all writes;
//! - a clean reopen (drop, which flushes the log) recovers exactly the model;
//! - after a crash, the recovered state is the state at the last recovery plus a PREFIX of the
//!   writes since (in log order), and that prefix contains every acknowledged `Sync` write:
//!   no acknowledged sync write lost, no holes, nothing that was never written (versions of
//!   acknowledged writes included); point reads and delimiter listings agree with it; reopening
//!   again gives the same state, and writes are accepted afterwards.
//!
//! Crash model: `SimFs::crash` (src/io/sim.rs) keeps the synced bytes of every file plus an
//! adversarial subset of the unsynced writes (none, all, or a random selection with writes
//! torn at 512 B / 4 KiB) and undoes unsynced directory changes. A `Freeze` step first stops
//! the disk at the n-th I/O operation from then on (every later operation fails), so writes
//! and checkpoints in flight fail part-way before the crash.
//!
//! PROPTEST_CASES overrides the case count (256 by default); failures are kept in
//! `proptest-regressions/prop_crash.txt` and replay first. Each case's SimFs seed is part of
//! the generated case and is printed with any failure.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use holt_core::io::{Fault, FaultError, SimFs, Vfs};
use holt_core::{
    Batch, Condition, Db, Durability, Error, ListItem, ListRequest, Options, Version, WriteOptions,
};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

/// Keys: 3 tenants × 3 directories × 6 files, so delimiter listings roll up often.
fn key_of(i: u8) -> Vec<u8> {
    let i = i % 54;
    format!("t{}/d{}/f{}", i % 3, (i / 3) % 3, i / 9).into_bytes()
}

#[derive(Debug, Clone)]
enum Op {
    /// Put key, sync (else async), only if absent.
    Put(u8, bool, bool),
    Delete(u8, bool),
    /// A two-key batch, sync or async.
    Batch(u8, u8, bool),
    Get(u8),
    List(u8),
    Checkpoint,
    /// Drop the handle (the log is flushed) and reopen.
    Reopen,
    /// Stop the disk at the n-th I/O operation from now on.
    Freeze(u8),
    /// Power cut, then recover.
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (any::<u8>(), any::<bool>(), prop::bool::weighted(0.1)).prop_map(|(k, s, a)| Op::Put(k, s, a)),
        4 => (any::<u8>(), any::<bool>()).prop_map(|(k, s)| Op::Delete(k, s)),
        3 => (any::<u8>(), any::<u8>(), any::<bool>()).prop_map(|(a, b, s)| Op::Batch(a, b, s)),
        2 => any::<u8>().prop_map(Op::Get),
        2 => any::<u8>().prop_map(Op::List),
        2 => Just(Op::Checkpoint),
        1 => Just(Op::Reopen),
        1 => (1..40u8).prop_map(Op::Freeze),
        2 => Just(Op::Crash),
    ]
}

/// key → (value, version if known).
type Model = BTreeMap<Vec<u8>, (Vec<u8>, Option<u64>)>;

/// Every key, value and version in a database, in key order.
type Dump = Vec<(Vec<u8>, Vec<u8>, u64)>;

/// A write since the last recovery that may be in the log, in log order.
#[derive(Debug, Clone)]
struct Logged {
    ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    version: Option<u64>,
    /// Acknowledged with `Sync` durability: it must survive any crash.
    required: bool,
}

fn apply(model: &mut Model, w: &Logged) {
    for (k, v) in &w.ops {
        match v {
            Some(v) => model.insert(k.clone(), (v.clone(), w.version)),
            None => model.remove(k),
        };
    }
}

fn dump(db: &Db) -> Result<Dump, TestCaseError> {
    let all = db.scan(b"", b"", usize::MAX).map_err(|e| TestCaseError::fail(format!("scan: {e}")))?;
    Ok(all.into_iter().map(|(k, e)| (k, e.value, e.version.0)).collect())
}

fn same(model: &Model, got: &[(Vec<u8>, Vec<u8>, u64)]) -> bool {
    model.len() == got.len()
        && model
            .iter()
            .zip(got)
            .all(|((k, (v, ver)), (gk, gv, gver))| k == gk && v == gv && ver.is_none_or(|ver| ver == *gver))
}

/// The S3-style listing of a model.
fn model_list(model: &Model, prefix: &[u8], delimiter: &[u8]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    for key in model.keys().filter(|k| k.starts_with(prefix)) {
        let rest = &key[prefix.len()..];
        let cut = (!delimiter.is_empty())
            .then(|| rest.windows(delimiter.len()).position(|w| w == delimiter))
            .flatten();
        let name = match cut {
            Some(i) => key[..prefix.len() + i + delimiter.len()].to_vec(),
            None => key.clone(),
        };
        if out.last() != Some(&name) {
            out.push(name);
        }
    }
    out
}

const LISTINGS: [(&[u8], &[u8]); 4] = [(b"", b"/"), (b"t1/", b"/"), (b"t2/d", b"/"), (b"t0/", b"")];

/// Point reads and every listing shape agree with `model`.
fn check_reads(db: &Db, model: &Model, context: &str) -> Result<(), TestCaseError> {
    for (k, (v, _)) in model {
        let got = db.get(k).map_err(|e| TestCaseError::fail(format!("{context}: get: {e}")))?;
        prop_assert_eq!(got.map(|e| e.value), Some(v.clone()), "{}: get {:?}", context, k);
    }
    for (prefix, delimiter) in LISTINGS {
        let page = db
            .list(&ListRequest { prefix, delimiter, limit: 1000, ..Default::default() })
            .map_err(|e| TestCaseError::fail(format!("{context}: list: {e}")))?;
        let names: Vec<Vec<u8>> = page.items.iter().map(|i| ListItem::name(i).to_vec()).collect();
        prop_assert_eq!(names, model_list(model, prefix, delimiter), "{}: listing {:?}", context, prefix);
    }
    Ok(())
}

fn opts() -> Options {
    Options {
        wal_ring_bytes: 4096,
        wal_flush_interval: Duration::from_millis(1),
        // Background checkpoints start every dozen writes or so, racing the foreground ones;
        // a checkpoint moves the log to a new segment once this much of the current one is
        // used, so the cases roll segments as well as checkpoint in place.
        checkpoint_wal_bytes: 2 << 10,
        checkpoint_interval: Duration::from_secs(3600),
        ..Options::default()
    }
}

struct Machine {
    fs: Arc<SimFs>,
    db: Option<Db>,
    /// The state every recovery must start from (what was recovered last).
    base: Model,
    /// Writes since that recovery that may be in the log.
    logged: Vec<Logged>,
    /// Every write applied in memory (exact while nothing has failed).
    live: Model,
    /// An I/O error happened since the last recovery: memory may hold writes the log lost,
    /// so reads and conditions are no longer predicted.
    uncertain: bool,
    frozen: bool,
    counter: u64,
}

impl Machine {
    fn db(&self) -> &Db {
        self.db.as_ref().expect("the machine always holds an open handle between steps")
    }

    fn context(&self, step: usize) -> String {
        format!("SimFs seed {} step {step}", self.fs.seed())
    }

    /// Records the result of a write of `ops`.
    fn record(
        &mut self,
        ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
        sync: bool,
        result: Result<Option<u64>, Error>,
        condition_expected: Option<bool>,
        context: &str,
    ) -> Result<(), TestCaseError> {
        match result {
            Ok(version) => {
                if let Some(holds) = condition_expected {
                    prop_assert!(holds || self.uncertain, "{}: condition passed but should fail", context);
                }
                let w = Logged { ops, version, required: sync };
                apply(&mut self.live, &w);
                self.logged.push(w);
            }
            Err(Error::ConditionFailed) => {
                prop_assert!(
                    condition_expected == Some(false) || self.uncertain,
                    "{}: condition failed but should hold",
                    context
                );
            }
            Err(Error::Io { may_have_applied: true, .. }) => {
                // Reached the log (or memory) but not acknowledged: may or may not survive.
                prop_assert!(self.frozen, "{}: I/O error without an injected fault", context);
                self.uncertain = true;
                self.logged.push(Logged { ops, version: None, required: false });
            }
            Err(e) => {
                prop_assert!(self.frozen, "{}: write refused without an injected fault: {}", context, e);
                self.uncertain = true;
            }
        }
        Ok(())
    }

    fn open(&mut self, context: &str) -> Result<(), TestCaseError> {
        let vfs: Arc<dyn Vfs> = self.fs.clone();
        let db = Db::open_with_vfs(vfs, opts())
            .map_err(|e| TestCaseError::fail(format!("{context}: open: {e}")))?;
        self.db = Some(db);
        Ok(())
    }

    /// Power cut and recovery, checked against the prefix oracle.
    fn crash(&mut self, context: &str) -> Result<(), TestCaseError> {
        self.fs.crash();
        drop(self.db.take());
        self.frozen = false;
        self.open(context)?;
        let got = dump(self.db())?;
        let required = self.logged.iter().rposition(|w| w.required).map_or(0, |i| i + 1);
        let mut state = self.base.clone();
        let mut found = false;
        for k in 0..=self.logged.len() {
            if k >= required && same(&state, &got) {
                found = true;
                break;
            }
            if let Some(w) = self.logged.get(k) {
                apply(&mut state, w);
            }
        }
        if !found {
            return Err(TestCaseError::fail(format!(
                "{context}: recovered {} keys, which is no prefix of the {} writes since the last \
                 recovery containing the first {required} (every acknowledged sync write)",
                got.len(),
                self.logged.len()
            )));
        }
        // Versions of writes that were never acknowledged are now known.
        let state: Model = got.into_iter().map(|(k, v, ver)| (k, (v, Some(ver)))).collect();
        check_reads(self.db(), &state, context)?;
        // Reopening again changes nothing.
        drop(self.db.take());
        self.open(context)?;
        prop_assert!(same(&state, &dump(self.db())?), "{}: a second reopen changed the state", context);
        self.base = state.clone();
        self.live = state;
        self.logged.clear();
        self.uncertain = false;
        Ok(())
    }

    fn step(&mut self, op: Op, step: usize) -> Result<(), TestCaseError> {
        let context = self.context(step);
        self.counter += 1;
        let value = |k: &[u8], n: u64| [k, format!("={n}").as_bytes()].concat();
        let durability = |sync: bool| WriteOptions {
            durability: Some(if sync { Durability::Sync } else { Durability::Async }),
        };
        match op {
            Op::Put(k, sync, if_absent) => {
                let key = key_of(k);
                let v = value(&key, self.counter);
                let (condition, expected) = if if_absent {
                    (Condition::Absent, Some(!self.live.contains_key(&key)))
                } else {
                    (Condition::None, None)
                };
                let result = self.db().put_with(&key, &v, condition, durability(sync)).map(|v| Some(v.0));
                self.record(vec![(key, Some(v))], sync, result, expected, &context)?;
            }
            Op::Delete(k, sync) => {
                let key = key_of(k);
                let result = self.db().delete_with(&key, Condition::None, durability(sync)).map(|_| None);
                self.record(vec![(key, None)], sync, result, None, &context)?;
            }
            Op::Batch(a, b, sync) => {
                let (ka, kb) = (key_of(a), key_of(b));
                let (va, vb) = (value(&ka, self.counter), value(&kb, self.counter + 1_000_000));
                let mut batch = Batch::new();
                batch.put(ka.clone(), va.clone()).put(kb.clone(), vb.clone());
                let result = self.db().write_batch(&batch, durability(sync)).map(|v| Some(v.0));
                self.record(vec![(ka, Some(va)), (kb, Some(vb))], sync, result, None, &context)?;
            }
            Op::Get(k) if !self.uncertain => {
                let key = key_of(k);
                let got = match self.db().get(&key) {
                    // A frozen disk fails the log's background flush: the database then
                    // refuses reads, since it may hold writes recovery will not bring back.
                    Err(Error::Poisoned) if self.frozen => {
                        self.uncertain = true;
                        return Ok(());
                    }
                    other => other.map_err(|e| TestCaseError::fail(format!("{context}: get: {e}")))?,
                };
                let want = self.live.get(&key);
                prop_assert_eq!(got.as_ref().map(|e| &e.value), want.map(|(v, _)| v), "{}: get", context);
                if let (Some(e), Some((_, Some(ver)))) = (&got, want) {
                    prop_assert_eq!(e.version, Version(*ver), "{}: version", context);
                }
            }
            Op::List(p) if !self.uncertain => {
                let (prefix, delimiter) = LISTINGS[p as usize % LISTINGS.len()];
                let page = match self.db().list(&ListRequest {
                    prefix,
                    delimiter,
                    limit: 1000,
                    ..Default::default()
                }) {
                    Err(Error::Poisoned) if self.frozen => {
                        self.uncertain = true;
                        return Ok(());
                    }
                    other => other.map_err(|e| TestCaseError::fail(format!("{context}: list: {e}")))?,
                };
                let names: Vec<Vec<u8>> = page.items.iter().map(|i| ListItem::name(i).to_vec()).collect();
                prop_assert_eq!(names, model_list(&self.live, prefix, delimiter), "{}: listing", context);
            }
            Op::Get(_) | Op::List(_) => {}
            Op::Checkpoint => {
                let result = self.db().checkpoint();
                prop_assert!(result.is_ok() || self.frozen, "{}: checkpoint failed: {:?}", context, result);
            }
            // A frozen disk cannot flush on drop: the process "exits" by losing power.
            Op::Reopen if self.frozen || self.uncertain => self.crash(&context)?,
            Op::Reopen => {
                drop(self.db.take());
                self.open(&context)?;
                let got = dump(self.db())?;
                prop_assert!(same(&self.live, &got), "{}: clean reopen lost or invented writes", context);
                self.base = self.live.clone();
                self.logged.clear();
            }
            Op::Freeze(nth) if !self.frozen => {
                self.fs.inject(Fault {
                    op: None,
                    path_contains: None,
                    nth: nth as u64,
                    error: FaultError::Freeze,
                    forever: true,
                });
                self.frozen = true;
            }
            Op::Freeze(_) => {}
            Op::Crash => self.crash(&context)?,
        }
        Ok(())
    }
}

fn run(seed: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let fs = SimFs::new(seed);
    let mut m = Machine {
        fs,
        db: None,
        base: Model::new(),
        logged: Vec::new(),
        live: Model::new(),
        uncertain: false,
        frozen: false,
        counter: 0,
    };
    m.open("fresh open")?;
    let steps = ops.len();
    for (i, op) in ops.into_iter().enumerate() {
        m.step(op, i)?;
    }
    // Every case ends with a crash, so every case checks the prefix oracle at least once.
    m.crash(&m.context(steps))?;
    let db = m.db();
    db.put(b"zz/after", b"1").map_err(|e| TestCaseError::fail(format!("write after recovery: {e}")))?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(256),
        // Integration tests have no `src/` parent, so proptest's default would put the file
        // beside this one under another name: name it explicitly.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/proptest-regressions/prop_crash.txt"
        )))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn crashes_recover_a_prefix_with_every_acked_sync_write(
        seed in any::<u64>(),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        run(seed, ops)?;
    }
}
