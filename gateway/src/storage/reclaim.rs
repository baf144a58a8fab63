//! The reclaimer: unlinks replaced and deleted bodies off the request path once the change
//! that stopped naming them is durable, with one log sync for a whole batch of bodies.
//!
//! Under `Async` durability a committed change is acknowledged before the log is on disk, so
//! a crash could bring back the record that named a body unlinked too early, and GET would
//! find its file missing. The reclaimer waits for bodies, takes everything queued, runs one
//! `Db::sync` for all of them and only then unlinks them. If the sync fails, the files stay
//! for the start-up sweep, which removes whatever no record names after recovery.

use std::sync::{Arc, Weak};

use holt_core::Db;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::bodies::BodyStore;
use super::meta::BodyRef;

/// Bodies queued for the reclaimer at most. Past it, `try_queue` refuses and the caller syncs
/// and unlinks itself, so a burst of deletes cannot grow memory without bound.
pub const RECLAIM_QUEUE_MAX: usize = 4096;

enum Job {
    /// Unlink this body file once the log is durable.
    Unlink(BodyRef),
    /// Finish what is queued and stop; later bodies take the caller's path.
    Stop,
}

/// The handle on the background reclaimer task.
pub struct Reclaimer {
    queue: mpsc::Sender<Job>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Reclaimer {
    /// Starts the task on the current tokio runtime; `None` outside one. The task holds the
    /// engine only while it syncs, so it never keeps the engine from being closed.
    pub fn spawn(db: Weak<Db>, bodies: Arc<BodyStore>) -> Option<Reclaimer> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (queue, jobs) = mpsc::channel(RECLAIM_QUEUE_MAX);
        let task = runtime.spawn(run(jobs, db, bodies));
        Some(Reclaimer { queue, task: Mutex::new(Some(task)) })
    }

    /// Queues a body file; false when the queue is full or the reclaimer has stopped.
    pub fn try_queue(&self, body: &BodyRef) -> bool {
        self.queue.try_send(Job::Unlink(body.clone())).is_ok()
    }

    /// Syncs the log once for every body queued, unlinks them and stops the task. Later bodies
    /// are refused by `try_queue`. Idempotent.
    pub async fn stop(&self) {
        let Some(task) = self.task.lock().take() else { return };
        // Fails only if the task is gone already (it never exits on its own while a sender
        // lives, so only after a panic); awaiting it then reports that.
        let _ = self.queue.send(Job::Stop).await;
        if let Err(e) = task.await {
            tracing::error!(error = %e, "the body reclaimer failed; unlinked bodies are left for the start-up sweep");
        }
    }
}

async fn run(mut jobs: mpsc::Receiver<Job>, db: Weak<Db>, bodies: Arc<BodyStore>) {
    let mut received = Vec::with_capacity(RECLAIM_QUEUE_MAX);
    let mut batch = Vec::with_capacity(RECLAIM_QUEUE_MAX);
    loop {
        // Waits for a job, then takes all queued (at most the queue's size: bounded batches).
        // Zero: every sender is gone and the queue is empty.
        if jobs.recv_many(&mut received, RECLAIM_QUEUE_MAX).await == 0 {
            return;
        }
        let mut stop = false;
        for job in received.drain(..) {
            match job {
                Job::Unlink(body) => batch.push(body),
                Job::Stop => stop = true,
            }
        }
        if stop {
            // Nothing can be queued once closed; what is queued already is still taken (at
            // most the queue's size).
            jobs.close();
            while let Ok(job) = jobs.try_recv() {
                if let Job::Unlink(body) = job {
                    batch.push(body);
                }
            }
        }
        unlink_when_durable(&db, &bodies, &mut batch).await;
        if stop {
            return;
        }
    }
}

/// One log sync for all of `batch`, then the unlinks; on failure the files stay.
async fn unlink_when_durable(db: &Weak<Db>, bodies: &BodyStore, batch: &mut Vec<BodyRef>) {
    if batch.is_empty() {
        return;
    }
    let synced = match db.upgrade() {
        Some(db) => {
            // The wait holds the log, not the engine: `Store::try_into_db` may go ahead.
            let synced = db.sync_pending();
            drop(db);
            synced.await.map_err(|e| e.to_string())
        }
        None => Err("the engine is closed".to_owned()),
    };
    match synced {
        Ok(()) => {
            for body in batch.drain(..) {
                bodies.remove(&body).await;
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, files = batch.len(), "log sync failed; body files left for the start-up sweep");
            batch.clear();
        }
    }
}
