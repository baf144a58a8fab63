//! Real-process crash harness (driven by `scripts/crash-soak.sh` and `scripts/power-cut.sh`).
//!
//! Modes:
//! - `child DIR`: opens DIR and writes with `Sync` durability from several threads until
//!   killed. Step i of thread t is ONE atomic batch: key `t{t}/d{i%8}/k{i:08}` = value(t, i),
//!   an overwrite or a delete of an earlier step's key (`touch`), and `t{t}/counter` = i.
//!   Each acknowledgement is printed as `ack T I VERSION` on stdout (a pipe or a file on
//!   another filesystem) only after the write returned; the engine's counters as a `stats`
//!   line every 50 ms.
//! - `verify DIR ACKS`: reopens DIR and checks the oracle against the acknowledgements.
//! - `parent DIR ROUNDS [SEED]`: ROUNDS times: spawn the child, SIGKILL it after a random
//!   5–300 ms, verify. Ends with what the children's last counters add up to (writes
//!   recorded in evicted frames, frames checkpointed whole) and `N passed, N failed`.
//!
//! The memory budget (`BUDGET_BYTES`) holds a frame or two, so once the rounds have written more
//! than that the touched keys land in evicted frames: their writes are recorded in change
//! logs, and checkpoints write those frames as deltas or, their chains full, whole from their
//! images on disk, without decoding them.
//!
//! The oracle, per thread t with recovered counter c: every key of steps 0..=c holds what
//! the last of those steps wrote to it (its own value, an overwrite, or nothing after a
//! delete), with the acknowledged version of that step; no step after c left a trace
//! (its own key absent, no key holding its overwrite); every acknowledged step is <= c
//! (nothing acknowledged lost); the listing with delimiter matches; a second reopen gives
//! the same state, and writes are accepted afterwards.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use holt_core::{Batch, Db, ListItem, ListRequest, Options, WriteOptions};

const THREADS: u64 = 4;

/// The frame cache's memory budget: one or two decoded frames (1.3–2.4 MiB each here), a few
/// rounds' writes.
const BUDGET_BYTES: usize = 2 << 20;

fn options() -> Options {
    Options {
        wal_ring_bytes: 1 << 20,
        checkpoint_wal_bytes: 512 << 10,
        checkpoint_interval: Duration::from_millis(200),
        memory_budget_bytes: BUDGET_BYTES,
        ..Options::default()
    }
}

fn value(t: u64, i: u64) -> Vec<u8> {
    format!("{{\"thread\":{t},\"step\":{i},\"etag\":\"{:016x}\"}}", (t << 40) ^ i.wrapping_mul(0x9E37_79B9))
        .into_bytes()
}

fn step_key(t: u64, i: u64) -> Vec<u8> {
    format!("t{t}/d{}/k{i:08}", i % 8).into_bytes()
}

/// What step i of thread t does to an earlier step's key besides writing its own: a key of
/// the whole history at random (so of any frame), overwritten or, one step in eight, deleted.
enum Touch {
    Overwrite(u64),
    Delete(u64),
}

fn touch(t: u64, i: u64) -> Option<Touch> {
    if i == 0 {
        return None;
    }
    let mut state = (t << 48) ^ i;
    let r = next(&mut state);
    let j = r % i;
    Some(if (r >> 32).is_multiple_of(8) { Touch::Delete(j) } else { Touch::Overwrite(j) })
}

/// The value step i of thread t writes over step j's key.
fn overwrite_value(t: u64, j: u64, i: u64) -> Vec<u8> {
    format!("{{\"thread\":{t},\"step\":{j},\"overwritten_by\":{i}}}").into_bytes()
}

/// What steps 0..steps of thread t leave at each step's key: the value (None: deleted) and
/// the step that wrote it last.
fn expected(t: u64, steps: u64) -> Vec<(Option<Vec<u8>>, u64)> {
    let mut keys: Vec<(Option<Vec<u8>>, u64)> = Vec::with_capacity(steps as usize);
    for i in 0..steps {
        keys.push((Some(value(t, i)), i));
        match touch(t, i) {
            Some(Touch::Overwrite(j)) => keys[j as usize] = (Some(overwrite_value(t, j, i)), i),
            Some(Touch::Delete(j)) => keys[j as usize] = (None, i),
            None => {}
        }
    }
    keys
}

fn counter(db: &Db, t: u64) -> Result<Option<u64>, String> {
    let Some(e) = db.get(format!("t{t}/counter").as_bytes()).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let s = String::from_utf8(e.value).map_err(|_| "counter is not UTF-8".to_string())?;
    s.parse().map(Some).map_err(|_| format!("counter {s:?} is not a number"))
}

fn child(dir: &Path) -> Result<(), String> {
    let db = std::sync::Arc::new(Db::open(dir, options()).map_err(|e| format!("open: {e}"))?);
    let out = std::sync::Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let db = db.clone();
            let out = out.clone();
            std::thread::spawn(move || -> Result<(), String> {
                let mut i = counter(&db, t)?.map_or(0, |c| c + 1);
                loop {
                    let mut batch = Batch::new();
                    batch.put(step_key(t, i), value(t, i));
                    match touch(t, i) {
                        Some(Touch::Overwrite(j)) => {
                            batch.put(step_key(t, j), overwrite_value(t, j, i));
                        }
                        Some(Touch::Delete(j)) => {
                            batch.delete(step_key(t, j));
                        }
                        None => {}
                    }
                    batch.put(format!("t{t}/counter"), i.to_string());
                    let v =
                        db.write_batch(&batch, WriteOptions::default()).map_err(|e| format!("write: {e}"))?;
                    let mut o = out.lock().map_err(|_| "stdout lock".to_string())?;
                    writeln!(o, "ack {t} {i} {}", v.0).map_err(|e| e.to_string())?;
                    o.flush().map_err(|e| e.to_string())?;
                    i += 1;
                }
            })
        })
        .collect();
    // The engine's counters, for the parent's summary of what the rounds exercised.
    {
        let (db, out) = (db.clone(), out.clone());
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(50));
            let s = db.stats();
            let line = format!(
                "stats {} {} {} {} {}",
                s.frame_unloaded_writes,
                s.frame_dirty_evictions,
                s.checkpoints,
                s.checkpoint_frames_whole,
                s.checkpoint_frames_delta
            );
            let Ok(mut o) = out.lock() else { return };
            if writeln!(o, "{line}").and_then(|()| o.flush()).is_err() {
                return;
            }
        });
    }
    for h in handles {
        h.join().map_err(|_| "writer panicked".to_string())??;
    }
    Ok(())
}

/// The engine's counters a child printed last (`stats` lines): writes recorded in evicted
/// frames, dirty evictions, checkpoints, frames they wrote whole and as deltas.
fn last_stats(text: &str) -> [u64; 5] {
    let parse = |line: &str| -> Option<[u64; 5]> {
        let mut fields = line.strip_prefix("stats ")?.split_whitespace().map(|f| f.parse().ok());
        let mut out = [0; 5];
        for slot in &mut out {
            *slot = fields.next()??;
        }
        Some(out)
    };
    text.lines().rev().find_map(parse).unwrap_or_default()
}

/// (thread, step) → version of every acknowledged write.
fn parse_acks(text: &str) -> BTreeMap<(u64, u64), u64> {
    let mut acks = BTreeMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        // The last line may be cut by the kill: only whole lines count as acknowledgements.
        if let ["ack", t, i, v] = parts[..] {
            if let (Ok(t), Ok(i), Ok(v)) = (t.parse(), i.parse(), v.parse()) {
                acks.insert((t, i), v);
            }
        }
    }
    acks
}

/// (key, value, version) of every stored key, in key order.
type Dump = Vec<(Vec<u8>, Vec<u8>, u64)>;

fn dump(db: &Db) -> Result<Dump, String> {
    Ok(db
        .scan(b"", b"", usize::MAX)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(k, e)| (k, e.value, e.version.0))
        .collect())
}

fn verify(dir: &Path, acks: &BTreeMap<(u64, u64), u64>) -> Result<(), String> {
    let db = Db::open(dir, options()).map_err(|e| format!("reopen: {e}"))?;
    let all = dump(&db)?;
    let mut expect_keys = 0usize;
    for t in 0..THREADS {
        let c = counter(&db, t)?;
        let steps = c.map_or(0, |c| c + 1);
        if let Some((&(_, i), _)) = acks.range((t, 0)..(t + 1, 0)).next_back() {
            if i + 1 > steps {
                return Err(format!("thread {t}: step {i} was acknowledged but the counter is {c:?}"));
            }
        }
        let keys = expected(t, steps);
        for (j, (want, writer)) in keys.iter().enumerate() {
            let got = db.get(&step_key(t, j as u64)).map_err(|e| e.to_string())?;
            let got = match (got, want) {
                (None, None) => continue,
                (Some(e), Some(want)) if e.value == *want => e,
                (None, Some(_)) => {
                    return Err(format!("thread {t}: step {j}'s key missing below counter {c:?} (a hole)"))
                }
                (Some(_), None) => {
                    return Err(format!("thread {t}: step {j}'s key present after step {writer} deleted it"))
                }
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "thread {t}: step {j}'s key has the wrong value (last written by step {writer})"
                    ))
                }
            };
            if let Some(&v) = acks.get(&(t, *writer)) {
                if got.version.0 != v {
                    return Err(format!(
                        "thread {t}: step {j}'s key has version {} but step {writer} was acknowledged as {v}",
                        got.version.0
                    ));
                }
            }
        }
        if db.get(&step_key(t, steps)).map_err(|e| e.to_string())?.is_some() {
            return Err(format!("thread {t}: step {steps} present beyond the counter (batch torn)"));
        }
        // Listing with a delimiter: the counter plus one common prefix per directory holding a key.
        let prefix = format!("t{t}/");
        let page = db
            .list(&ListRequest {
                prefix: prefix.as_bytes(),
                delimiter: b"/",
                limit: 1000,
                ..Default::default()
            })
            .map_err(|e| e.to_string())?;
        let names: Vec<String> =
            page.items.iter().map(|i| String::from_utf8_lossy(ListItem::name(i)).into_owned()).collect();
        let present = keys.iter().enumerate().filter(|(_, (want, _))| want.is_some());
        let mut expect: Vec<String> = present.clone().map(|(j, _)| format!("t{t}/d{}/", j % 8)).collect();
        if steps > 0 {
            expect.push(format!("t{t}/counter"));
        }
        expect.sort();
        expect.dedup();
        if names != expect {
            return Err(format!("thread {t}: listing {names:?}, expected {expect:?}"));
        }
        expect_keys += present.count() + usize::from(steps > 0);
    }
    let others: Vec<_> = all.iter().filter(|(k, _, _)| !k.starts_with(b"t")).collect();
    if all.len() - others.len() != expect_keys {
        return Err(format!("{} keys recovered, {expect_keys} expected: phantoms", all.len() - others.len()));
    }
    drop(db);
    // Reopen twice: same state; writes accepted afterwards.
    let db = Db::open(dir, options()).map_err(|e| format!("second reopen: {e}"))?;
    if dump(&db)? != all {
        return Err("second reopen changed the state".into());
    }
    db.put(b"verify/marker", b"ok").map_err(|e| format!("write after recovery: {e}"))?;
    db.close().map_err(|e| format!("close: {e}"))?;
    Ok(())
}

fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn parent(dir: &Path, rounds: u64, seed: u64) -> Result<(u64, u64), String> {
    println!("crash-soak: seed {seed}, {rounds} rounds, dir {}", dir.display());
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut rng = seed;
    let (mut passed, mut failed) = (0, 0);
    let mut exercised = [0u64; 5];
    for round in 0..rounds {
        let delay = Duration::from_millis(5 + next(&mut rng) % 296);
        let mut child = Command::new(&exe)
            .arg("child")
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("spawn: {e}"))?;
        let stdout = child.stdout.take().ok_or("no child stdout")?;
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        text.push_str(&l);
                        text.push('\n');
                    }
                    Err(_) => break,
                }
            }
            text
        });
        let start = Instant::now();
        std::thread::sleep(delay);
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        let text = reader.join().map_err(|_| "reader panicked")?;
        let acks = parse_acks(&text);
        for (sum, n) in exercised.iter_mut().zip(last_stats(&text)) {
            *sum += n;
        }
        match verify(dir, &acks) {
            Ok(()) => passed += 1,
            Err(e) => {
                failed += 1;
                println!(
                    "round {round} FAILED (killed after {:?}, {} acks): {e}",
                    start.elapsed(),
                    acks.len()
                );
            }
        }
        if round % 20 == 19 {
            println!("round {}: {passed} passed, {failed} failed so far", round + 1);
        }
    }
    let [unloaded, dirty_evictions, checkpoints, whole, deltas] = exercised;
    println!(
        "the children's last counters, summed: {unloaded} writes recorded in evicted frames, \
         {dirty_evictions} dirty evictions, {checkpoints} checkpoints writing {whole} frames whole \
         and {deltas} as deltas"
    );
    Ok((passed, failed))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let result = match args.get(1).map(String::as_str) {
        Some("child") if args.len() == 3 => child(Path::new(&args[2])).map(|_| ()),
        Some("verify") if args.len() == 4 => std::fs::read_to_string(&args[3])
            .map_err(|e| format!("read acks: {e}"))
            .and_then(|text| verify(Path::new(&args[2]), &parse_acks(&text)))
            .map(|()| println!("verified")),
        Some("parent") if args.len() >= 4 => {
            let rounds = args[3].parse().unwrap_or(200);
            let seed = args.get(4).and_then(|s| s.parse().ok()).unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
            parent(Path::new(&args[2]), rounds, seed).map(|(passed, failed)| {
                println!("{passed} passed, {failed} failed");
                if failed > 0 {
                    std::process::exit(1);
                }
            })
        }
        _ => Err("usage: crash_soak child DIR | verify DIR ACKS | parent DIR ROUNDS [SEED]".into()),
    };
    if let Err(e) = result {
        eprintln!("crash_soak: {e}");
        std::process::exit(2);
    }
}
