//! Heavy work (`Inner::run_heavy`): one step per user at a time, on a heavy-work thread, in
//! arrival order; work that is not heavy never waits for it.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::Gw;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_heavy_step_per_user_and_light_work_never_waits() {
    let gw = Gw::new();
    let inner = std::sync::Arc::clone(&gw.state.0);
    let (release, held) = mpsc::channel::<()>();
    let (started, starts) = mpsc::channel::<&'static str>();

    // User a's first step runs on a heavy-work thread and blocks until released.
    let first = {
        let (inner, started) = (std::sync::Arc::clone(&inner), started.clone());
        tokio::spawn(async move {
            inner
                .run_heavy("a", true, move || {
                    started.send("first").ok();
                    held.recv_timeout(Duration::from_secs(10)).ok();
                    Ok(std::thread::current().name().map(str::to_owned))
                })
                .await
        })
    };
    assert_eq!(starts.recv_timeout(Duration::from_secs(10)), Ok("first"));
    // User a's second step waits for the first.
    let second = {
        let (inner, started) = (std::sync::Arc::clone(&inner), started.clone());
        tokio::spawn(async move {
            inner
                .run_heavy("a", true, move || {
                    started.send("second").ok();
                    Ok(())
                })
                .await
        })
    };
    // Light work of any user runs at once, on the calling thread.
    let light = inner.run_heavy("a", false, || Ok(std::thread::current().name().map(str::to_owned))).await;
    assert!(!light.expect("light work").unwrap_or_default().starts_with("holt-heavy"));
    assert!(
        starts.recv_timeout(Duration::from_millis(300)).is_err(),
        "a user's second heavy step started while its first was running"
    );
    release.send(()).expect("release the first step");
    let thread = first.await.expect("first task").expect("first step");
    assert!(
        thread.unwrap_or_default().starts_with("holt-heavy"),
        "heavy work ran off the heavy-work threads"
    );
    assert_eq!(starts.recv_timeout(Duration::from_secs(10)), Ok("second"));
    second.await.expect("second task").expect("second step");
}
