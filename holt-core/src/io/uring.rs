//! Batched frame I/O through io_uring (feature `io-uring`, Linux): `read_many_at` and
//! `write_many_at` submit every request of a batch with one system call; everything else
//! (and any short transfer) goes through pread/pwrite. Used for the frames file when
//! `Options::use_io_uring` is set and the kernel allows it (`UringFile::new` fails otherwise,
//! and the caller keeps the pread/pwrite file).
#![expect(unsafe_code, reason = "io_uring submissions hand raw buffer pointers to the kernel")]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use io_uring::{opcode, types, IoUring};
use parking_lot::Mutex;

use super::VfsFile;

/// Submission queue depth: a batch larger than this is submitted in several rounds.
const QUEUE_DEPTH: u32 = 64;
/// Consecutive unexpected errors from waiting on requests in flight before the process
/// aborts (each after a 1 ms pause); EINTR, EAGAIN and EBUSY are retried without counting.
const SUBMIT_FAILURES_MAX: u32 = 1000;

pub(crate) struct UringFile {
    file: File,
    ring: Mutex<IoUring>,
}

impl UringFile {
    /// Wraps `file`; fails where io_uring is unavailable (old kernel, seccomp, sysctl).
    pub(crate) fn new(file: File) -> io::Result<UringFile> {
        let ring = IoUring::new(QUEUE_DEPTH)?;
        Ok(UringFile { file, ring: Mutex::new(ring) })
    }

    /// Runs `entries` (one per request, `user_data` = request index) and returns each
    /// request's result: bytes transferred, or the error.
    fn run(&self, entries: &[io_uring::squeue::Entry]) -> io::Result<Vec<io::Result<usize>>> {
        let mut results: Vec<io::Result<usize>> = (0..entries.len()).map(|_| Ok(0)).collect();
        let mut ring = self.ring.lock();
        for chunk_start in (0..entries.len()).step_by(QUEUE_DEPTH as usize) {
            let chunk = &entries[chunk_start..(chunk_start + QUEUE_DEPTH as usize).min(entries.len())];
            // Every call leaves the queues empty (below), and a chunk fits the queue.
            let mut pushed = 0;
            let mut push_failed = false;
            for entry in chunk {
                // SAFETY: every entry points into a buffer borrowed by the caller of
                // `read_many_at`/`write_many_at` for the whole call, and this function
                // waits below for the completion of every entry it pushed before
                // returning, so the kernel never touches a buffer after the borrow ends.
                if unsafe { ring.submission().push(entry) }.is_err() {
                    push_failed = true;
                    break;
                }
                pushed += 1;
            }
            // Whatever happens, every pushed entry is waited for: returning early would free
            // or reuse buffers the kernel may still read or fill.
            let mut done = 0;
            let mut failures = 0u32;
            while done < pushed {
                match ring.submit_and_wait(pushed - done) {
                    Ok(_) => failures = 0,
                    Err(e) => match e.raw_os_error() {
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY) => {}
                        _ => {
                            failures += 1;
                            if failures > SUBMIT_FAILURES_MAX {
                                // The kernel may still use the buffers; no way to return safely.
                                tracing::error!(error = %e, "io_uring cannot wait for requests in flight");
                                std::process::abort();
                            }
                            std::thread::sleep(std::time::Duration::from_millis(1));
                        }
                    },
                }
                for cqe in ring.completion() {
                    let idx = cqe.user_data() as usize;
                    let res = cqe.result();
                    if let Some(slot) = results.get_mut(idx) {
                        *slot =
                            if res < 0 { Err(io::Error::from_raw_os_error(-res)) } else { Ok(res as usize) };
                    }
                    done += 1;
                }
            }
            if push_failed {
                return Err(io::Error::other("io_uring submission queue full"));
            }
        }
        Ok(results)
    }
}

fn len_u32(len: usize) -> io::Result<u32> {
    u32::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

impl VfsFile for UringFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        super::std_fs::allocate(&self.file, len)
    }

    fn release(&self, offset: u64, len: u64) -> io::Result<()> {
        super::std_fs::punch_hole(&self.file, offset, len)
    }
    fn allocated_len(&self, offset: u64, len: u64) -> io::Result<u64> {
        super::std_fs::allocated_len(&self.file, offset, len)
    }

    fn read_many_at(&self, requests: &mut [(&mut [u8], u64)]) -> io::Result<()> {
        let fd = types::Fd(self.file.as_raw_fd());
        let mut entries = Vec::with_capacity(requests.len());
        for (i, (buf, offset)) in requests.iter_mut().enumerate() {
            entries.push(
                opcode::Read::new(fd, buf.as_mut_ptr(), len_u32(buf.len())?)
                    .offset(*offset)
                    .build()
                    .user_data(i as u64),
            );
        }
        let results = self.run(&entries)?;
        for ((buf, offset), result) in requests.iter_mut().zip(results) {
            let n = result?;
            if n < buf.len() {
                // Short read (end of file or a partial transfer): finish it synchronously.
                self.file.read_exact_at(&mut buf[n..], *offset + n as u64)?;
            }
        }
        Ok(())
    }

    fn write_many_at(&self, requests: &[(&[u8], u64)]) -> io::Result<()> {
        let fd = types::Fd(self.file.as_raw_fd());
        let mut entries = Vec::with_capacity(requests.len());
        for (i, (buf, offset)) in requests.iter().enumerate() {
            entries.push(
                opcode::Write::new(fd, buf.as_ptr(), len_u32(buf.len())?)
                    .offset(*offset)
                    .build()
                    .user_data(i as u64),
            );
        }
        let results = self.run(&entries)?;
        for ((buf, offset), result) in requests.iter().zip(results) {
            let n = result?;
            if n < buf.len() {
                self.file.write_all_at(&buf[n..], *offset + n as u64)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batched_writes_and_reads_round_trip() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("f"))
            .expect("open");
        let Ok(uring) = UringFile::new(file) else {
            println!("skipped: io_uring unavailable here");
            return;
        };
        let bufs: Vec<Vec<u8>> = (0..100u8).map(|i| vec![i; 4096]).collect();
        let writes: Vec<(&[u8], u64)> =
            bufs.iter().enumerate().map(|(i, b)| (&b[..], (i as u64) * 8192)).collect();
        uring.write_many_at(&writes).expect("write_many_at");
        let mut out: Vec<Vec<u8>> = (0..100).map(|_| vec![0u8; 4096]).collect();
        let mut reads: Vec<(&mut [u8], u64)> =
            out.iter_mut().enumerate().map(|(i, b)| (&mut b[..], (i as u64) * 8192)).collect();
        uring.read_many_at(&mut reads).expect("read_many_at");
        assert_eq!(out, bufs);
        let mut past_end = [0u8; 16];
        let mut reads = [(&mut past_end[..], 1 << 30)];
        assert!(uring.read_many_at(&mut reads).is_err(), "a read past the end must fail");
    }
}
