//! A checkpoint marks the frames it wrote clean before it lets the next checkpoint in. When it
//! marked them after releasing the manifest lock, a checkpoint that started in between
//! captured the same frames again (still dirty, at the same generation) and rewrote them
//! after the first had let the cache evict them: the slots of a clean, evicted frame changed
//! under a point read walking its pages and deltas (seen as "frame has no delta 3 in the
//! manifest" from a get at 10M keys while the load's checkpoints ran).
//!
//! The first checkpoint pauses right after releasing the lock (failpoint
//! `checkpoint-unlocked`); a second checkpoint then runs and must find nothing to write and
//! finish (with the old order it captured the frames and then waited on the paused one).
//! Without the `failpoints` feature nothing pauses, and the second must still write nothing.
//! The paused checkpoint is reported running (`Stats::checkpoint_running`) until it returns.

use std::sync::Arc;
use std::time::Duration;

use holt_core::{Batch, Db, Durability, Options, WriteOptions};

#[test]
fn the_next_checkpoint_does_not_capture_frames_just_written() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        durability: Durability::Async,
        checkpoint_interval: Duration::from_secs(3600),
        ..Options::default()
    };
    let db = Arc::new(Db::open(dir.path(), options).unwrap());
    let mut batch = Batch::new();
    for i in 0..20_000u32 {
        batch.put(format!("bucket/dir-{:02}/object-{i:06}", i % 13), vec![b'v'; 100]);
    }
    db.write_batch(&batch, WriteOptions::default()).unwrap();
    let written = |db: &Db| {
        let s = db.stats();
        s.checkpoint_frames_whole + s.checkpoint_frames_delta
    };

    #[cfg(feature = "failpoints")]
    let scenario = fail::FailScenario::setup();
    #[cfg(feature = "failpoints")]
    fail::cfg("checkpoint-unlocked", "pause").unwrap();
    let first = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || db.checkpoint().unwrap())
    };
    // Long enough for the first checkpoint to write its frames and reach the pause.
    std::thread::sleep(Duration::from_millis(500));
    let by_first = written(&db);
    let (done, finished) = std::sync::mpsc::channel();
    let second = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || {
            db.checkpoint().unwrap();
            let _ = done.send(());
        })
    };
    // Bounded: a second checkpoint that waits on the paused first one fails the test.
    let second_finished = finished.recv_timeout(Duration::from_secs(20)).is_ok();
    let by_second = written(&db) - by_first;
    // The paused checkpoint has not returned: it is still running.
    #[cfg(feature = "failpoints")]
    let running_while_paused = db.stats().checkpoint_running;
    #[cfg(feature = "failpoints")]
    {
        fail::cfg("checkpoint-unlocked", "off").unwrap();
        scenario.teardown();
    }
    first.join().unwrap();
    second.join().unwrap();
    #[cfg(feature = "failpoints")]
    assert!(running_while_paused, "a paused checkpoint was not reported running");
    assert!(!db.stats().checkpoint_running, "no checkpoint runs, yet one is reported running");
    // With the frames still dirty, the second checkpoint captures them and then waits for
    // the first (paused) one to finish with the log before it can write them again.
    assert!(
        second_finished,
        "the second checkpoint did not finish: it captured frames the first had written"
    );
    println!("the first checkpoint wrote {by_first} frames, the second {by_second}");
    assert!(by_first > 0, "the first checkpoint wrote nothing before the second ran");
    assert_eq!(by_second, 0, "the second checkpoint rewrote frames the first had just written");
}
