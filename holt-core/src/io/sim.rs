//! A simulated, fault-injecting file system for crash tests.
//!
//! Crash model (what `crash()` may leave, and what a real disk may leave after a power cut):
//! - every file keeps its DURABLE bytes: the state at its last successful `sync_data`;
//! - of the writes and length changes made since, an adversarial subset survives: all of them,
//!   none, or a random selection in which any write may be torn at a 512 B or 4 KiB boundary:
//!   only a prefix of it reached the disk, or all of it but one run of sectors or pages in the
//!   middle (the device wrote them out of order);
//! - the directory reverts to its state at the last `sync_dir`: creations, renames and
//!   removals made since are undone (a file created and synced but whose directory entry was
//!   never synced is gone);
//! - handles opened before the crash are dead: every call on them fails with EIO, as if the
//!   process had died.
//!
//! `kill()` models the process dying while the machine runs on: files keep everything written
//! (the next process reads it), but unsynced writes stay unsynced. A sync that fails by
//! injection leaves each of its pending writes durable or not (a random subset) and none of
//! them pending, as Linux marks the pages of a failed writeback clean: no later sync retries
//! them, while the process still reads them.
//!
//! Fault injection: `inject(Fault)` fails the N-th operation (optionally only of one kind and
//! only on paths containing a string) with EIO or ENOSPC, once or forever, or misdirects the
//! N-th write: it reports success, but its bytes land a few pages away in the same file and
//! its own range keeps what it held (a firmware or driver fault no checksum over the write
//! itself can see); `set_capacity` makes writes that would grow the total size past a limit
//! fail with ENOSPC.
//! All randomness comes from the seed given to `new` (print it in tests).

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Vfs, VfsFile};

/// Kinds of operations, for targeting faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// `Vfs::open`, creating or not.
    Open,
    /// `VfsFile::read_exact_at` (and the batched and cached reads built on it).
    Read,
    /// `VfsFile::write_all_at`; the only kind a `Misdirect` fault counts.
    Write,
    /// `VfsFile::sync_data`.
    Sync,
    /// `VfsFile::set_len`.
    SetLen,
    /// `VfsFile::allocate`.
    Allocate,
    /// `Vfs::rename`; a fault's `path_contains` matches the destination.
    Rename,
    /// `Vfs::remove`.
    Remove,
    /// `Vfs::sync_dir`; it has no path, so a fault with a non-empty `path_contains` skips it.
    SyncDir,
}

/// The error an injected fault returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultError {
    /// The operation fails with EIO without taking effect, except that a failed `sync_data`
    /// leaves a random subset of its pending writes durable (as Linux does).
    Eio,
    /// The operation fails with ENOSPC, as on a full disk, likewise.
    Enospc,
    /// The machine stops at this operation: it and every later operation fail with EIO until
    /// `crash()` (models a power cut at exactly this step).
    Freeze,
    /// Not an error: the write succeeds, but lands `pages` 4 KiB pages away from its offset
    /// (earlier when negative, never before the file's start; a write at offset 0 always
    /// lands later). Counts writes only, whatever the fault's `op`.
    Misdirect {
        /// How far the write moves, in 4 KiB pages (negative: towards the file's start).
        pages: i64,
    },
}

/// Fail the `nth` (1-based) matching operation counted from when the fault is injected.
#[derive(Debug, Clone)]
pub struct Fault {
    /// Only operations of this kind count (all kinds when `None`).
    pub op: Option<OpKind>,
    /// Only operations on paths containing this count (all paths when `None`).
    pub path_contains: Option<String>,
    /// Which matching operation fires the fault, counting from 1.
    pub nth: u64,
    /// What happens to the operation that fires it.
    pub error: FaultError,
    /// Keep failing every later matching operation too.
    pub forever: bool,
}

#[derive(Debug, Clone)]
enum Pending {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

/// Contents with a logical length; bytes past `data.len()` (but before `len`) read as zeros,
/// so preallocated space costs no memory.
#[derive(Debug, Clone, Default)]
struct Content {
    data: Vec<u8>,
    len: u64,
}

impl Content {
    fn apply(&mut self, p: &Pending) {
        match p {
            Pending::Write { offset, bytes } => {
                let end = *offset as usize + bytes.len();
                if self.data.len() < end {
                    self.data.resize(end, 0);
                }
                self.data[*offset as usize..end].copy_from_slice(bytes);
                self.len = self.len.max(end as u64);
            }
            Pending::SetLen(len) => {
                self.data.truncate(*len as usize);
                self.len = *len;
            }
        }
    }
}

#[derive(Debug, Default)]
struct Node {
    current: Content,
    durable: Content,
    pending: Vec<Pending>,
    allocated: u64,
}

type NodeRef = Arc<Mutex<Node>>;

struct Armed {
    fault: Fault,
    seen: u64,
    fired: bool,
}

struct State {
    rng: u64,
    /// The directory as the running process sees it.
    names: BTreeMap<String, NodeRef>,
    /// The directory as of the last `sync_dir`.
    durable_names: BTreeMap<String, NodeRef>,
    faults: Vec<Armed>,
    ops: u64,
    /// Handles from an older generation belong to a "dead process".
    generation: u64,
    capacity_bytes: Option<u64>,
    locked: bool,
    frozen: bool,
    /// Set by `check` when a `Misdirect` fault hits the write it counted: how far to move it.
    misdirect: Option<i64>,
    /// Every misdirected write: file, intended offset, offset written, length.
    misdirected: Vec<(String, u64, u64, usize)>,
}

/// The simulated file system (cheap to clone through its `Arc`).
pub struct SimFs {
    seed: u64,
    state: Arc<Mutex<State>>,
}

struct SimFile {
    node: NodeRef,
    name: String,
    generation: u64,
    state: Arc<Mutex<State>>,
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn dead() -> io::Error {
    io::Error::other("simulated crash: handle from before the crash")
}

impl State {
    /// Counts an operation and returns the injected error, if any.
    fn check(&mut self, kind: OpKind, path: &str) -> io::Result<()> {
        self.ops += 1;
        if self.frozen {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        for armed in &mut self.faults {
            let f = &armed.fault;
            let kind_matches = match f.error {
                FaultError::Misdirect { .. } => kind == OpKind::Write,
                _ => f.op.is_none_or(|k| k == kind),
            };
            if !kind_matches || f.path_contains.as_deref().is_some_and(|p| !path.contains(p)) {
                continue;
            }
            armed.seen += 1;
            let hit = armed.seen == f.nth || (f.forever && armed.seen > f.nth);
            if hit && (!armed.fired || f.forever) {
                armed.fired = true;
                return match f.error {
                    FaultError::Eio => Err(io::Error::from_raw_os_error(libc::EIO)),
                    FaultError::Freeze => {
                        self.frozen = true;
                        Err(io::Error::from_raw_os_error(libc::EIO))
                    }
                    FaultError::Enospc => Err(io::Error::from_raw_os_error(libc::ENOSPC)),
                    FaultError::Misdirect { pages } => {
                        self.misdirect = Some(pages);
                        Ok(())
                    }
                };
            }
        }
        Ok(())
    }

    fn used_bytes(&self) -> u64 {
        self.names
            .values()
            .map(|n| {
                let n = n.lock();
                n.current.len.max(n.allocated)
            })
            .sum()
    }

    /// `used` is `used_bytes()`, taken before `node` was locked (lock order: state, then nodes).
    fn check_space(&self, used: u64, node: &Node, new_len: u64) -> io::Result<()> {
        if let Some(cap) = self.capacity_bytes {
            let old = node.current.len.max(node.allocated);
            if new_len > old && used + (new_len - old) > cap {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
        }
        Ok(())
    }
}

impl SimFs {
    /// An empty simulated directory; all crash choices derive from `seed`.
    pub fn new(seed: u64) -> Arc<SimFs> {
        Arc::new(SimFs {
            seed,
            state: Arc::new(Mutex::new(State {
                rng: seed,
                names: BTreeMap::new(),
                durable_names: BTreeMap::new(),
                faults: Vec::new(),
                ops: 0,
                generation: 0,
                capacity_bytes: None,
                locked: false,
                frozen: false,
                misdirect: None,
                misdirected: Vec::new(),
            })),
        })
    }

    /// The seed given to `new`: print it so a failing run replays exactly.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Operations performed so far (every kind).
    pub fn op_count(&self) -> u64 {
        self.state.lock().ops
    }

    /// Arms a fault.
    pub fn inject(&self, fault: Fault) {
        self.state.lock().faults.push(Armed { fault, seen: 0, fired: false });
    }

    /// The writes misdirected so far: file, intended offset, offset written, length.
    pub fn misdirected(&self) -> Vec<(String, u64, u64, usize)> {
        self.state.lock().misdirected.clone()
    }

    /// How many armed faults have fired at least once.
    pub fn faults_fired(&self) -> usize {
        self.state.lock().faults.iter().filter(|a| a.fired).count()
    }

    /// Removes every armed fault (the "disk" is healthy again).
    pub fn clear_faults(&self) {
        self.state.lock().faults.clear();
    }

    /// Limits the total size of all files (ENOSPC past it); `None` removes the limit.
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.state.lock().capacity_bytes = bytes;
    }

    /// Simulates a power cut (see the module docs for what survives). Faults are cleared and
    /// the directory lock is released, as after a reboot.
    pub fn crash(&self) {
        let mut st = self.state.lock();
        st.generation += 1;
        st.faults.clear();
        st.locked = false;
        st.frozen = false;
        // 0: drop every unsynced change; 1: keep them all; 2: keep a random subset, tearing some.
        let mode = splitmix(&mut st.rng) % 3;
        let names = st.durable_names.clone();
        for node in names.values() {
            let mut n = node.lock();
            let mut content = n.durable.clone();
            let pending = std::mem::take(&mut n.pending);
            for p in &pending {
                let keep: Vec<Pending> = match mode {
                    0 => Vec::new(),
                    1 => vec![p.clone()],
                    _ => match (splitmix(&mut st.rng) % 5, p) {
                        (0, _) => Vec::new(),
                        (1, Pending::Write { offset, bytes }) if bytes.len() > 512 => {
                            // Torn write: only a sector- or page-aligned prefix reached the disk.
                            let unit = if splitmix(&mut st.rng) & 1 == 0 { 512 } else { 4096 };
                            let cut = (splitmix(&mut st.rng) as usize % bytes.len()) / unit * unit;
                            vec![Pending::Write { offset: *offset, bytes: bytes[..cut].to_vec() }]
                        }
                        (2, Pending::Write { offset, bytes }) if bytes.len() > 512 => {
                            // Torn out of order: one aligned run of sectors or pages inside the
                            // write never reached the disk, while those before and after it did.
                            let unit = if splitmix(&mut st.rng) & 1 == 0 { 512 } else { 4096 };
                            let units = bytes.len().div_ceil(unit);
                            let first = splitmix(&mut st.rng) as usize % units;
                            let count = 1 + splitmix(&mut st.rng) as usize % (units - first);
                            let (lost_from, lost_to) =
                                (first * unit, ((first + count) * unit).min(bytes.len()));
                            let rest = lost_to as u64;
                            [
                                Pending::Write { offset: *offset, bytes: bytes[..lost_from].to_vec() },
                                Pending::Write { offset: offset + rest, bytes: bytes[lost_to..].to_vec() },
                            ]
                            .into_iter()
                            .filter(|w| matches!(w, Pending::Write { bytes, .. } if !bytes.is_empty()))
                            .collect()
                        }
                        _ => vec![p.clone()],
                    },
                };
                for p in &keep {
                    content.apply(p);
                }
            }
            n.current = content.clone();
            n.durable = content;
            n.allocated = 0;
        }
        st.names = names;
    }

    /// Simulates the process dying (SIGKILL) while the machine keeps running: its handles
    /// are dead and its directory lock is released, but every file keeps what the process
    /// wrote, synced or not (the page cache survives the process), and the next process reads
    /// it. Unsynced writes stay unsynced: a later `crash()` may still lose them, unless some
    /// process syncs the file first. Faults are cleared.
    pub fn kill(&self) {
        let mut st = self.state.lock();
        st.generation += 1;
        st.faults.clear();
        st.locked = false;
        st.frozen = false;
    }

    fn file(&self, name: &str, node: NodeRef, generation: u64) -> Arc<dyn VfsFile> {
        Arc::new(SimFile { node, name: name.to_owned(), generation, state: self.state.clone() })
    }
}

fn name_of(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

impl SimFile {
    fn live(&self, kind: OpKind) -> io::Result<parking_lot::MutexGuard<'_, State>> {
        let mut st = self.state.lock();
        if st.generation != self.generation {
            return Err(dead());
        }
        st.check(kind, &self.name)?;
        Ok(st)
    }
}

impl VfsFile for SimFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let _st = self.live(OpKind::Read)?;
        let n = self.node.lock();
        let end = offset + buf.len() as u64;
        if end > n.current.len {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        buf.fill(0);
        let data = &n.current.data;
        let start = (offset as usize).min(data.len());
        let stop = (end as usize).min(data.len());
        buf[..stop - start].copy_from_slice(&data[start..stop]);
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut st = self.live(OpKind::Write)?;
        let offset = match st.misdirect.take() {
            None => offset,
            Some(pages) => {
                let moved = offset as i64 + pages * 4096;
                let moved = if moved >= 0 && moved as u64 != offset {
                    moved as u64
                } else {
                    offset + pages.unsigned_abs().max(1) * 4096
                };
                st.misdirected.push((self.name.clone(), offset, moved, buf.len()));
                moved
            }
        };
        let used = if st.capacity_bytes.is_some() { st.used_bytes() } else { 0 };
        let mut n = self.node.lock();
        st.check_space(used, &n, offset + buf.len() as u64)?;
        let p = Pending::Write { offset, bytes: buf.to_vec() };
        n.current.apply(&p);
        n.pending.push(p);
        Ok(())
    }

    /// A failed sync behaves as Linux's does: the writes it was to make durable reached the
    /// disk or not, each one (a random subset), and none of them is pending any more, so no
    /// later sync writes them; the running process still reads them (they stay in `current`,
    /// as pages stay in the page cache marked clean).
    fn sync_data(&self) -> io::Result<()> {
        let mut st = self.state.lock();
        if st.generation != self.generation {
            return Err(dead());
        }
        let checked = st.check(OpKind::Sync, &self.name);
        if st.frozen {
            // A power cut at this sync: `crash()` decides what of the pending writes survives.
            return checked;
        }
        let mut n = self.node.lock();
        let pending = std::mem::take(&mut n.pending);
        for p in &pending {
            if checked.is_ok() || splitmix(&mut st.rng) & 1 == 0 {
                n.durable.apply(p);
            }
        }
        checked
    }

    fn len(&self) -> io::Result<u64> {
        let st = self.state.lock();
        if st.generation != self.generation {
            return Err(dead());
        }
        Ok(self.node.lock().current.len)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let st = self.live(OpKind::SetLen)?;
        let used = if st.capacity_bytes.is_some() { st.used_bytes() } else { 0 };
        let mut n = self.node.lock();
        st.check_space(used, &n, len)?;
        let p = Pending::SetLen(len);
        n.current.apply(&p);
        n.pending.push(p);
        Ok(())
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        let st = self.live(OpKind::Allocate)?;
        let used = if st.capacity_bytes.is_some() { st.used_bytes() } else { 0 };
        let mut n = self.node.lock();
        st.check_space(used, &n, len)?;
        n.allocated = n.allocated.max(len);
        Ok(())
    }

    /// Zeroes the range (a real hole reads as zeros), as an unsynced change: a crash may
    /// bring the old bytes back, which the contract allows. Never fails by injection:
    /// releasing space is best effort everywhere it is called.
    fn release(&self, offset: u64, len: u64) -> io::Result<()> {
        let st = self.state.lock();
        if st.generation != self.generation {
            return Err(dead());
        }
        let mut n = self.node.lock();
        let end = offset.saturating_add(len).min(n.current.len);
        if offset >= end {
            return Ok(());
        }
        let p = Pending::Write { offset, bytes: vec![0; (end - offset) as usize] };
        n.current.apply(&p);
        n.pending.push(p);
        Ok(())
    }
}

impl Vfs for SimFs {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn VfsFile>> {
        let name = name_of(path);
        let mut st = self.state.lock();
        st.check(OpKind::Open, &name)?;
        let generation = st.generation;
        if let Some(node) = st.names.get(&name) {
            let node = node.clone();
            drop(st);
            return Ok(self.file(&name, node, generation));
        }
        if !create {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        let node: NodeRef = Arc::default();
        st.names.insert(name.clone(), node.clone());
        drop(st);
        Ok(self.file(&name, node, generation))
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        Ok(self.state.lock().names.contains_key(&name_of(path)))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let (from, to) = (name_of(from), name_of(to));
        let mut st = self.state.lock();
        st.check(OpKind::Rename, &to)?;
        let node = st.names.remove(&from).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        st.names.insert(to, node);
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let name = name_of(path);
        let mut st = self.state.lock();
        st.check(OpKind::Remove, &name)?;
        st.names.remove(&name).map(|_| ()).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.state.lock().names.keys().cloned().collect())
    }

    fn sync_dir(&self) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check(OpKind::SyncDir, "")?;
        st.durable_names = st.names.clone();
        Ok(())
    }

    fn try_lock(&self, path: &Path) -> io::Result<Box<dyn std::any::Any + Send + Sync>> {
        let mut st = self.state.lock();
        if st.locked {
            return Err(io::Error::new(io::ErrorKind::WouldBlock, format!("{} is locked", path.display())));
        }
        st.locked = true;
        Ok(Box::new(SimLock { state: self.state.clone(), generation: st.generation }))
    }
}

struct SimLock {
    state: Arc<Mutex<State>>,
    generation: u64,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut st = self.state.lock();
        // A lock from before a crash died with its process.
        if st.generation == self.generation {
            st.locked = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(f: &Arc<dyn VfsFile>) -> Vec<u8> {
        let mut v = vec![0; f.len().unwrap() as usize];
        f.read_exact_at(&mut v, 0).unwrap();
        v
    }

    #[test]
    fn synced_data_and_dir_survive_every_crash() {
        for seed in 0..32 {
            let fs = SimFs::new(seed);
            let f = fs.open(Path::new("a"), true).unwrap();
            f.write_all_at(b"durable!", 0).unwrap();
            f.sync_data().unwrap();
            fs.sync_dir().unwrap();
            f.write_all_at(&[7u8; 9000], 8).unwrap();
            fs.open(Path::new("b"), true).unwrap();
            fs.crash();
            assert!(f.write_all_at(b"x", 0).is_err(), "old handles are dead");
            assert!(!fs.exists(Path::new("b")).unwrap(), "unsynced create undone (seed {seed})");
            let got = read_all(&fs.open(Path::new("a"), false).unwrap());
            assert_eq!(&got[..8], b"durable!");
            // Of the unsynced write, whole sectors survive or read as never written (zeros).
            for (i, sector) in got[8..].chunks(512).enumerate() {
                let whole = sector.iter().all(|&b| b == 7) || sector.iter().all(|&b| b == 0);
                assert!(whole, "sector {i} of the unsynced write is mixed (seed {seed})");
            }
        }
    }

    /// A crash may tear a write out of order: a run of sectors in its middle is lost while
    /// later ones reached the disk. Over enough seeds every shape shows up.
    #[test]
    fn a_crash_may_lose_sectors_in_the_middle_of_a_write() {
        let (mut holes, mut prefixes) = (0, 0);
        for seed in 0..400 {
            let fs = SimFs::new(seed);
            let f = fs.open(Path::new("a"), true).unwrap();
            f.write_all_at(&[0u8; 16384], 0).unwrap();
            f.sync_data().unwrap();
            fs.sync_dir().unwrap();
            f.write_all_at(&[7u8; 16384], 0).unwrap();
            fs.crash();
            let got = read_all(&fs.open(Path::new("a"), false).unwrap());
            let written: Vec<bool> = got.chunks(512).map(|s| s[0] == 7).collect();
            let first_lost = written.iter().position(|w| !w);
            match first_lost {
                Some(i) if written[i..].iter().any(|&w| w) => holes += 1,
                Some(i) if i > 0 => prefixes += 1,
                _ => {}
            }
        }
        assert!(holes > 0 && prefixes > 0, "holes {holes}, torn prefixes {prefixes}");
    }

    #[test]
    fn unsynced_rename_is_undone() {
        let fs = SimFs::new(1);
        let f = fs.open(Path::new("tmp"), true).unwrap();
        f.write_all_at(b"new", 0).unwrap();
        f.sync_data().unwrap();
        fs.sync_dir().unwrap();
        fs.rename(Path::new("tmp"), Path::new("final")).unwrap();
        fs.crash();
        assert!(fs.exists(Path::new("tmp")).unwrap());
        assert!(!fs.exists(Path::new("final")).unwrap());
    }

    #[test]
    fn faults_fire_once_or_forever() {
        let fs = SimFs::new(2);
        let f = fs.open(Path::new("a"), true).unwrap();
        fs.inject(Fault {
            op: Some(OpKind::Sync),
            path_contains: None,
            nth: 2,
            error: FaultError::Eio,
            forever: false,
        });
        assert!(f.sync_data().is_ok());
        assert_eq!(f.sync_data().unwrap_err().raw_os_error(), Some(libc::EIO));
        assert!(f.sync_data().is_ok());
        fs.inject(Fault {
            op: Some(OpKind::Write),
            path_contains: None,
            nth: 1,
            error: FaultError::Enospc,
            forever: true,
        });
        for _ in 0..3 {
            assert_eq!(f.write_all_at(b"x", 0).unwrap_err().raw_os_error(), Some(libc::ENOSPC));
        }
        fs.clear_faults();
        fs.set_capacity(Some(10));
        assert!(f.write_all_at(&[1; 10], 0).is_ok());
        assert!(f.write_all_at(&[1; 1], 10).is_err());
    }

    /// A misdirected write succeeds, leaves its own range as it was and lands pages away;
    /// other kinds of operation do not count towards it.
    #[test]
    fn a_misdirected_write_lands_elsewhere() {
        let fs = SimFs::new(3);
        let f = fs.open(Path::new("a"), true).unwrap();
        f.write_all_at(&[7; 8192], 0).unwrap();
        fs.inject(Fault {
            op: None,
            path_contains: None,
            nth: 2,
            error: FaultError::Misdirect { pages: -1 },
            forever: false,
        });
        f.sync_data().unwrap();
        f.write_all_at(&[1; 100], 4096).unwrap();
        f.write_all_at(&[2; 100], 4096).unwrap();
        f.write_all_at(&[3; 100], 4096 + 200).unwrap();
        let bytes = read_all(&f);
        assert_eq!(&bytes[..100], &[2; 100][..], "the second write landed a page earlier");
        assert_eq!(&bytes[4096..4196], &[1; 100][..], "its own range kept the first write");
        assert_eq!(&bytes[4296..4396], &[3; 100][..], "later writes land where they are sent");
        f.sync_data().unwrap();
        fs.sync_dir().unwrap();
        fs.crash();
        let f = fs.open(Path::new("a"), false).unwrap();
        assert_eq!(&read_all(&f)[..100], &[2; 100][..], "a synced misdirected write is durable");
    }

    #[test]
    fn lock_is_exclusive_until_dropped_or_crash() {
        let fs = SimFs::new(3);
        let l = fs.try_lock(Path::new("LOCK")).unwrap();
        assert!(fs.try_lock(Path::new("LOCK")).is_err());
        drop(l);
        let _l = fs.try_lock(Path::new("LOCK")).unwrap();
        fs.crash();
        assert!(fs.try_lock(Path::new("LOCK")).is_ok());
    }
}
