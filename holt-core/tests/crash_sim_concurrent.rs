//! Invariant: with several threads writing at once (group commit), or many tasks on a
//! two-thread async runtime awaiting their writes (`Db::put_pending`), a power cut at a random
//! moment loses no acknowledged sync write, and what survives is a prefix of the log:
//! - every write acknowledged with `Sync` durability is present with its value and version;
//! - no surviving write has a larger lsn than a lost acknowledged write (no holes);
//! - each thread's surviving writes are a prefix of its own writes (program order);
//! - nothing appears that no thread wrote.
//!
//! Crash model: `SimFs::crash` (src/io/sim.rs) while writer threads, the flusher and the
//! background checkpointer are in the middle of their I/O: synced bytes survive, unsynced
//! writes are dropped, kept or torn, and every handle of the "dead process" fails from then
//! on. Acknowledgements are recorded only for writes that returned before the threads saw
//! the crash, so an acknowledgement always means an fdatasync completed before the cut.

mod oracle;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use holt_core::io::{SimFs, Vfs};
use holt_core::{Condition, Db, Durability, WriteOptions};

/// Who writes: blocking writer threads, or tasks that await their durability.
#[derive(Clone, Copy, Debug)]
enum Writers {
    Threads,
    Tasks,
}

impl Writers {
    fn count(self) -> u64 {
        match self {
            Writers::Threads => 4,
            Writers::Tasks => 16,
        }
    }
}

/// Most writes per writer.
const WRITES: u64 = 5_000;

/// One write as its thread saw it: step, sync or not, and the version if it returned Ok.
struct Step {
    sync: bool,
    version: Option<u64>,
}

fn key(t: u64, i: u64) -> Vec<u8> {
    format!("c{t}/k{i:06}").into_bytes()
}

fn value(t: u64, i: u64) -> Vec<u8> {
    format!("{t}:{i}").into_bytes()
}

/// Writer `t`'s writes, the same for both kinds of writer: (index, sync, options), two in
/// three sync, until `WRITES` or until `stop` is set.
struct Script {
    rng: u64,
    next: u64,
    stop: Arc<AtomicBool>,
}

impl Script {
    fn new(seed: u64, t: u64, stop: &Arc<AtomicBool>) -> Script {
        Script { rng: seed ^ (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15), next: 0, stop: stop.clone() }
    }
}

impl Iterator for Script {
    type Item = (u64, bool, WriteOptions);

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= WRITES || self.stop.load(Ordering::Acquire) {
            return None;
        }
        let i = self.next;
        self.next += 1;
        let sync = !oracle::next(&mut self.rng).is_multiple_of(3);
        let durability = if sync { Durability::Sync } else { Durability::Async };
        Some((i, sync, WriteOptions { durability: Some(durability) }))
    }
}

/// Starts the writers; joining the returned handle gives each writer's steps once `stop` is set.
fn start_writers(
    writers: Writers,
    db: &Arc<Db>,
    stop: &Arc<AtomicBool>,
    seed: u64,
) -> Box<dyn FnOnce() -> Vec<Vec<Step>>> {
    match writers {
        Writers::Threads => {
            let handles: Vec<_> = (0..writers.count())
                .map(|t| {
                    let (db, script) = (db.clone(), Script::new(seed, t, stop));
                    std::thread::spawn(move || -> Vec<Step> {
                        script
                            .map(|(i, sync, options)| {
                                let result = db.put_with(&key(t, i), &value(t, i), Condition::None, options);
                                Step { sync, version: result.ok().map(|v| v.0) }
                            })
                            .collect()
                    })
                })
                .collect();
            Box::new(move || handles.into_iter().map(|w| w.join().expect("writer")).collect())
        }
        Writers::Tasks => {
            let runtime =
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().expect("runtime");
            let tasks: Vec<_> = (0..writers.count())
                .map(|t| {
                    let (db, script) = (db.clone(), Script::new(seed, t, stop));
                    runtime.spawn(async move {
                        let mut steps = Vec::new();
                        for (i, sync, options) in script {
                            // Applied and logged here; acknowledged only once the await returns.
                            let result =
                                match db.put_pending(&key(t, i), &value(t, i), Condition::None, options) {
                                    Ok(pending) => pending.await,
                                    Err(e) => Err(e),
                                };
                            steps.push(Step { sync, version: result.ok().map(|v| v.0) });
                        }
                        steps
                    })
                })
                .collect();
            Box::new(move || {
                let steps = runtime.block_on(async {
                    let mut all = Vec::new();
                    for task in tasks {
                        all.push(task.await.expect("writer task"));
                    }
                    all
                });
                drop(runtime);
                steps
            })
        }
    }
}

fn run_case(seed: u64, writers: Writers) {
    let fs = SimFs::new(seed);
    let vfs: Arc<dyn Vfs> = fs.clone();
    let db = Arc::new(Db::open_with_vfs(vfs.clone(), oracle::opts()).expect("open"));
    let stop = Arc::new(AtomicBool::new(false));
    let join = start_writers(writers, &db, &stop, seed);
    let mut rng = seed;
    std::thread::sleep(Duration::from_micros(500 + oracle::next(&mut rng) % 20_000));
    fs.crash();
    stop.store(true, Ordering::Release);
    let steps = join();
    drop(db);

    let context = format!("{writers:?}, seed {seed}");
    let db =
        Db::open_with_vfs(vfs.clone(), oracle::opts()).unwrap_or_else(|e| panic!("{context}: reopen: {e}"));
    let got: BTreeMap<Vec<u8>, (Vec<u8>, u64)> =
        oracle::dump(&db).into_iter().map(|(k, v, ver)| (k, (v, ver))).collect();
    // Nothing that no thread wrote, with the value that thread wrote.
    for (k, (v, _)) in &got {
        let name = String::from_utf8_lossy(k);
        let parsed = name
            .strip_prefix('c')
            .and_then(|rest| rest.split_once("/k"))
            .and_then(|(t, i)| Some((t.parse::<u64>().ok()?, i.parse::<u64>().ok()?)));
        let Some((t, i)) = parsed else { panic!("{context}: phantom key {name}") };
        assert!(
            t < writers.count() && (i as usize) < steps[t as usize].len(),
            "{context}: key {name} was never written"
        );
        assert_eq!(v, &value(t, i), "{context}: {name} has a value nobody wrote");
    }
    let mut lowest_lost_acked = u64::MAX;
    let mut highest_present = 0u64;
    let mut acked_sync = 0usize;
    for (t, thread_steps) in steps.iter().enumerate() {
        let t = t as u64;
        let mut lost_from = None;
        for (i, step) in thread_steps.iter().enumerate() {
            let i = i as u64;
            match (got.get(&key(t, i)), lost_from) {
                (Some((_, version)), None) => {
                    if let Some(acked) = step.version {
                        assert_eq!(*version, acked, "{context}: c{t}/k{i} came back with another version");
                    }
                    highest_present = highest_present.max(*version);
                }
                (Some(_), Some(first)) => {
                    panic!("{context}: thread {t} lost step {first} but step {i} survived (a hole)")
                }
                (None, _) => {
                    assert!(
                        !(step.sync && step.version.is_some()),
                        "{context}: acknowledged sync write c{t}/k{i} (version {:?}) was lost",
                        step.version
                    );
                    if let Some(v) = step.version {
                        lowest_lost_acked = lowest_lost_acked.min(v);
                    }
                    lost_from.get_or_insert(i);
                }
            }
            if step.sync && step.version.is_some() {
                acked_sync += 1;
            }
        }
    }
    // Across threads: the log was cut at one position.
    assert!(
        highest_present < lowest_lost_acked,
        "{context}: lsn {highest_present} survived but acknowledged lsn {lowest_lost_acked} was lost"
    );
    drop(db);
    let state: oracle::State = got.into_iter().map(|(k, (v, ver))| (k, (v, Some(ver)))).collect();
    oracle::check_stable(
        || Db::open_with_vfs(vfs.clone(), oracle::opts()).expect("reopen"),
        &state,
        &context,
    );
    println!("{context}: {acked_sync} acknowledged sync writes checked, {} keys recovered", state.len());
}

#[test]
fn power_cut_during_concurrent_sync_and_async_writes() {
    let base = oracle::seed("power_cut_during_concurrent_sync_and_async_writes");
    for case in 0..20u64 {
        run_case(base.wrapping_add(case), Writers::Threads);
    }
}

/// The same cut with 16 tasks on a two-thread runtime, each awaiting its writes: a task's
/// acknowledgement (its await returning) must mean the same as a blocking writer's.
#[test]
fn power_cut_during_writes_awaited_by_tasks() {
    let base = oracle::seed("power_cut_during_writes_awaited_by_tasks");
    for case in 0..20u64 {
        run_case(base.wrapping_add(case), Writers::Tasks);
    }
}
