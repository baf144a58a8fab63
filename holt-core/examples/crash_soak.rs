//! Real-process crash harness (driven by `scripts/crash-soak.sh` and `scripts/power-cut.sh`).
//!
//! Modes:
//! - `child DIR`: opens DIR and writes with `Sync` durability from several threads until
//!   killed. Step i of thread t is ONE atomic batch: key `t{t}/d{i%8}/k{i:08}` = value(t, i)
//!   and `t{t}/counter` = i. Each acknowledgement is printed as `ack T I VERSION` on stdout
//!   (a pipe or a file on another filesystem) only after the write returned.
//! - `verify DIR ACKS`: reopens DIR and checks the oracle against the acknowledgements.
//! - `parent DIR ROUNDS [SEED]`: ROUNDS times: spawn the child, SIGKILL it after a random
//!   5–300 ms, verify. Ends with `N passed, N failed`.
//!
//! The oracle, per thread t with recovered counter c: keys for steps 0..=c are all present
//! with their exact values (and acknowledged versions), none after c exist, every
//! acknowledged step is <= c (nothing acknowledged lost), the listing with delimiter matches,
//! a second reopen gives the same state, and writes are accepted afterwards.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use holt_core::{Batch, Db, ListItem, ListRequest, Options, WriteOptions};

const THREADS: u64 = 4;

fn options() -> Options {
    Options {
        wal_ring_bytes: 1 << 20,
        checkpoint_wal_bytes: 512 << 10,
        checkpoint_interval: Duration::from_millis(200),
        memory_budget_bytes: 64 << 20,
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
                    batch.put(step_key(t, i), value(t, i)).put(format!("t{t}/counter"), i.to_string());
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
    for h in handles {
        h.join().map_err(|_| "writer panicked".to_string())??;
    }
    Ok(())
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
        for i in 0..steps {
            let e = db.get(&step_key(t, i)).map_err(|e| e.to_string())?;
            let e = e.ok_or_else(|| format!("thread {t}: step {i} missing below counter {c:?} (a hole)"))?;
            if e.value != value(t, i) {
                return Err(format!("thread {t}: step {i} has the wrong value"));
            }
            if let Some(&v) = acks.get(&(t, i)) {
                if e.version.0 != v {
                    return Err(format!(
                        "thread {t}: step {i} has version {} but was acknowledged as {v}",
                        e.version.0
                    ));
                }
            }
        }
        if db.get(&step_key(t, steps)).map_err(|e| e.to_string())?.is_some() {
            return Err(format!("thread {t}: step {steps} present beyond the counter (batch torn)"));
        }
        // Listing with a delimiter: the counter plus one common prefix per directory used.
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
        let mut expect: Vec<String> = (0..steps.min(8)).map(|d| format!("t{t}/d{d}/")).collect();
        if steps > 0 {
            expect.push(format!("t{t}/counter"));
        }
        expect.sort();
        if names != expect {
            return Err(format!("thread {t}: listing {names:?}, expected {expect:?}"));
        }
        expect_keys += steps as usize + usize::from(steps > 0);
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
