//! One adapter per engine behind a common trait, so every workload runs the same code for all.
//!
//! Peers without a native delimiter listing get the best generic method (`generic_list`): a
//! range scan that, on meeting a key with the delimiter after the prefix, emits the common
//! prefix and seeks to the first key past everything under it (the prefix with its last byte
//! incremented), inside one read transaction.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;

pub mod btreemap;
pub mod fjall_engine;
pub mod holt092;
#[cfg(feature = "holt-core")]
pub mod holt_core;
pub mod lmdb;
pub mod redb_engine;
pub mod rocks;
pub mod sqlite;
#[cfg(test)]
mod tests;

/// Errors from any engine, boxed: the benchmark only reports them.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;
pub type BenchResult<T> = Result<T, BenchError>;

/// One write's future, for writers that are tasks on an async runtime.
pub type PutFuture<'a> = Pin<Box<dyn Future<Output = BenchResult<()>> + Send + 'a>>;

/// When a write is acknowledged, matched across engines (PERFORMANCE.md "Matched durability").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// The commit is in the log in the page cache (no fsync per commit).
    LogToPageCache,
    /// Every commit is fsynced (group commit where the engine has it).
    Fsync,
}

/// How to open an engine.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    pub mode: WriteMode,
    /// The engine's cache budget, where it has a knob.
    pub cache_bytes: usize,
}

/// What a walk callback tells the engine to do next.
pub enum Step {
    Continue,
    Stop,
    /// Re-position at the first key >= this.
    Seek(Vec<u8>),
}

/// How one range pass of [`walk_in_passes`] ended.
pub enum Pass {
    /// The callback stopped the walk, or the range ran out.
    Done,
    /// Start a new pass at the first key >= this.
    Reseek(Vec<u8>),
}

/// A walk for engines whose iterators cannot re-position in place: `pass(from)` opens a range
/// at `from` and feeds it to the callback through [`feed`] until the callback stops or seeks.
pub fn walk_in_passes(start: &[u8], mut pass: impl FnMut(&[u8]) -> BenchResult<Pass>) -> BenchResult<()> {
    let mut from = start.to_vec();
    loop {
        match pass(&from)? {
            Pass::Done => return Ok(()),
            Pass::Reseek(to) => from = to,
        }
    }
}

/// Hands one entry to a walk callback: `None` to keep iterating, `Some` to end this pass.
pub fn feed(f: &mut dyn FnMut(&[u8], &[u8]) -> Step, key: &[u8], value: &[u8]) -> Option<Pass> {
    match f(key, value) {
        Step::Continue => None,
        Step::Stop => Some(Pass::Done),
        Step::Seek(to) => Some(Pass::Reseek(to)),
    }
}

/// The first key after every key that starts with `prefix` (`None`: no such key exists, the
/// prefix is all 0xFF).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|&b| b != 0xFF)?;
    let mut next = prefix[..=last].to_vec();
    next[last] += 1;
    Some(next)
}

/// One entry of a delimiter listing, owned (what tests compare).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listed {
    Key(Vec<u8>, Vec<u8>),
    Prefix(Vec<u8>),
}

/// A listing page as every engine fills it: names and values copied once into one byte
/// buffer, as a server copies them into its response. One allocation per entry (two per key)
/// would be the harness's cost, not the engine's, and the same for every engine.
#[derive(Debug, Default)]
pub struct Page {
    bytes: Vec<u8>,
    /// Per entry: where its name ends in `bytes`, where its value ends (equal for a prefix),
    /// and whether it is a common prefix.
    ends: Vec<(usize, usize, bool)>,
}

impl Page {
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }
    pub fn len(&self) -> usize {
        self.ends.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
    pub fn push_key(&mut self, key: &[u8], value: &[u8]) {
        self.bytes.extend_from_slice(key);
        let name_end = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.ends.push((name_end, self.bytes.len(), false));
    }
    pub fn push_prefix(&mut self, prefix: &[u8]) {
        self.bytes.extend_from_slice(prefix);
        self.ends.push((self.bytes.len(), self.bytes.len(), true));
    }
    /// Entries in order: (name, value, is a common prefix).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8], bool)> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().map(|e| e.1));
        starts.zip(&self.ends).map(|(start, &(name_end, end, prefix))| {
            (&self.bytes[start..name_end], &self.bytes[name_end..end], prefix)
        })
    }
    /// The page as owned entries.
    pub fn to_listed(&self) -> Vec<Listed> {
        self.iter()
            .map(|(name, value, prefix)| {
                if prefix {
                    Listed::Prefix(name.to_vec())
                } else {
                    Listed::Key(name.to_vec(), value.to_vec())
                }
            })
            .collect()
    }
}

/// The operations every workload needs. All methods take `&self`: the fsync workload shares
/// one handle among many writer threads.
pub trait Engine: Send + Sync {
    /// Inserts a batch of new keys in one transaction (bulk load).
    fn load_batch(&self, batch: &[(Vec<u8>, Vec<u8>)]) -> BenchResult<()>;
    /// Reads `key`, copying its value into `out`; false when absent.
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> BenchResult<bool>;
    /// Stores one key in its own commit, with the durability the engine was opened with.
    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()>;
    /// `put` for a writer that is a task on an async runtime: an engine that can await a
    /// write's durability without holding a thread returns the write's future; the others
    /// return `None` (their writers are threads, and the task workload skips them).
    fn put_awaiting<'a>(&'a self, _key: &'a [u8], _value: &'a [u8]) -> Option<PutFuture<'a>> {
        None
    }
    /// Deletes one key in its own commit.
    fn delete(&self, key: &[u8]) -> BenchResult<()>;
    /// Moves `src` to `dst` atomically (one commit); false when `src` is absent.
    fn rename(&self, src: &[u8], dst: &[u8]) -> BenchResult<bool>;
    /// Completes every piece of deferred write work (WAL flush, memtable flush, checkpoint),
    /// so that write timings include it.
    fn finish(&self) -> BenchResult<()>;
    /// The engine's own counters on one line, for watching a run (`HOLT_BENCH_STATS`); `None`
    /// for an engine without any.
    fn stats_line(&self) -> Option<String> {
        None
    }
    /// Walks keys in order from the first key >= `start` until the callback stops it.
    fn walk(&self, start: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> Step) -> BenchResult<()>;

    /// The first `limit` keys (with values) starting with `prefix`.
    fn scan(&self, prefix: &[u8], limit: usize, out: &mut Vec<(Vec<u8>, Vec<u8>)>) -> BenchResult<()> {
        out.clear();
        self.walk(prefix, &mut |k, v| {
            if !k.starts_with(prefix) {
                return Step::Stop;
            }
            out.push((k.to_vec(), v.to_vec()));
            if out.len() >= limit {
                Step::Stop
            } else {
                Step::Continue
            }
        })
    }

    /// The first `limit` entries under `prefix` rolled up at `delimiter`, values included.
    fn list(&self, prefix: &[u8], delimiter: u8, limit: usize, out: &mut Page) -> BenchResult<()> {
        generic_list(self, prefix, delimiter, limit, out)
    }
}

/// The best generic delimiter listing over an ordered walk: emit a common prefix on meeting
/// it and seek past everything under it.
pub fn generic_list<E: Engine + ?Sized>(
    engine: &E,
    prefix: &[u8],
    delimiter: u8,
    limit: usize,
    out: &mut Page,
) -> BenchResult<()> {
    out.clear();
    if limit == 0 {
        return Ok(());
    }
    engine.walk(prefix, &mut |k, v| {
        if !k.starts_with(prefix) {
            return Step::Stop;
        }
        let rest = &k[prefix.len()..];
        match rest.iter().position(|&b| b == delimiter) {
            Some(pos) => {
                let common = &k[..prefix.len() + pos + 1];
                out.push_prefix(common);
                if out.len() >= limit {
                    return Step::Stop;
                }
                match prefix_successor(common) {
                    Some(past) => Step::Seek(past),
                    None => Step::Stop,
                }
            }
            None => {
                out.push_key(k, v);
                if out.len() >= limit {
                    Step::Stop
                } else {
                    Step::Continue
                }
            }
        }
    })
}

/// Every engine this harness knows, by the name used on the command line.
pub const ENGINE_NAMES: &[&str] = &[
    "holt-core",
    "holt-core-mem",
    "holt-core-pread",
    "btreemap",
    "holt-0.9.2",
    "lmdb",
    "redb",
    "rocksdb",
    "sqlite",
    "fjall",
];

/// Opens engine `name` in `dir` (created if missing).
pub fn open(name: &str, dir: &Path, options: OpenOptions) -> BenchResult<Box<dyn Engine>> {
    std::fs::create_dir_all(dir)?;
    Ok(match name {
        #[cfg(feature = "holt-core")]
        "holt-core" => Box::new(holt_core::HoltCore::open(dir, options)?),
        #[cfg(feature = "holt-core")]
        "holt-core-mem" => Box::new(holt_core::HoltCore::open_in_memory(options)?),
        #[cfg(feature = "holt-core")]
        "holt-core-pread" => Box::new(holt_core::HoltCore::open_pread(dir, options)?),
        #[cfg(not(feature = "holt-core"))]
        "holt-core" | "holt-core-mem" | "holt-core-pread" => {
            return Err("built without the `holt-core` feature (holt-core did not compile)".into())
        }
        "btreemap" => Box::new(btreemap::BTreeMapEngine::new()),
        "holt-0.9.2" => Box::new(holt092::Holt092::open(dir, options)?),
        "lmdb" => Box::new(lmdb::Lmdb::open(dir, options)?),
        "redb" => Box::new(redb_engine::Redb::open(dir, options)?),
        "rocksdb" => Box::new(rocks::Rocks::open(dir, options)?),
        "sqlite" => Box::new(sqlite::Sqlite::open(dir, options)?),
        "fjall" => Box::new(fjall_engine::Fjall::open(dir, options)?),
        other => return Err(format!("unknown engine {other:?}; known: {ENGINE_NAMES:?}").into()),
    })
}

/// Whether the engine keeps its data in files (in-memory engines skip reopen-based phases).
pub fn is_persistent(name: &str) -> bool {
    !matches!(name, "holt-core-mem" | "btreemap")
}

/// The engine's cache knob, described for RESULTS.md.
pub fn cache_knob(name: &str) -> &'static str {
    match name {
        "holt-core" | "holt-core-mem" => "Options::memory_budget_bytes",
        "btreemap" => "none (in memory)",
        "holt-0.9.2" => "buffer_pool_size (512 KiB frames)",
        "lmdb" => "none (mmap; the page cache is the cache)",
        "redb" => "Builder::set_cache_size",
        "rocksdb" => "LRU block cache",
        "sqlite" => "PRAGMA cache_size",
        "fjall" => "Database::builder().cache_size",
        _ => "?",
    }
}
