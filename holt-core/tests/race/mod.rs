//! Forcing a race at a named failpoint: the first time the failpoint is reached, a writer runs
//! on a thread of its own while the thread that reached the point waits for it (up to a
//! timeout, since the code under test may rightly make the writer wait for that very thread).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A writer armed at a failpoint.
pub struct WriterAt {
    name: &'static str,
    fired: Arc<AtomicBool>,
    finished_inside: Arc<AtomicBool>,
    handle: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl WriterAt {
    /// Arms `name`: its first hit starts `write` and waits up to `wait` for it to finish.
    pub fn arm(name: &'static str, wait: Duration, write: impl FnOnce() + Send + 'static) -> WriterAt {
        let fired = Arc::new(AtomicBool::new(false));
        let finished_inside = Arc::new(AtomicBool::new(false));
        let handle: Arc<Mutex<Option<JoinHandle<()>>>> = Arc::default();
        let write = Mutex::new(Some(write));
        let (f, inside, h) = (Arc::clone(&fired), Arc::clone(&finished_inside), Arc::clone(&handle));
        fail::cfg_callback(name, move || {
            if f.swap(true, Ordering::SeqCst) {
                return;
            }
            let Some(write) = write.lock().unwrap().take() else { return };
            let (done_tx, done_rx) = mpsc::channel::<()>();
            let writer = std::thread::spawn(move || {
                write();
                let _ = done_tx.send(());
            });
            inside.store(done_rx.recv_timeout(wait).is_ok(), Ordering::SeqCst);
            *h.lock().unwrap() = Some(writer);
        })
        .expect("failpoint");
        WriterAt { name, fired, finished_inside, handle }
    }

    /// Disarms the failpoint and waits for the writer; panics if the failpoint was never hit
    /// or the writer panicked. Returns whether the writer finished inside the window.
    pub fn join(self) -> bool {
        fail::remove(self.name);
        assert!(self.fired.load(Ordering::SeqCst), "failpoint {} was never reached", self.name);
        let writer = self.handle.lock().unwrap().take().expect("the writer was started");
        writer.join().expect("the writer panicked");
        self.finished_inside.load(Ordering::SeqCst)
    }
}
