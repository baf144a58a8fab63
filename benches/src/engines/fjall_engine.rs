//! fjall: a pure-Rust LSM tree. Log-to-page-cache mode is its default (each write reaches the
//! journal in OS buffers); fsync mode adds `persist(SyncData)` per write. `finish` syncs the
//! journal and flushes the memtable to a table file.

use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};

use super::{feed, walk_in_passes, BenchResult, Engine, OpenOptions, Pass, Step, WriteMode};

pub struct Fjall {
    db: Database,
    ks: Keyspace,
    fsync: bool,
}

impl Fjall {
    pub fn open(dir: &Path, open: OpenOptions) -> BenchResult<Fjall> {
        let db = Database::builder(dir).cache_size(open.cache_bytes as u64).open()?;
        let ks = db.keyspace("kv", KeyspaceCreateOptions::default)?;
        Ok(Fjall { db, ks, fsync: open.mode == WriteMode::Fsync })
    }

    fn sync_if_durable(&self) -> BenchResult<()> {
        if self.fsync {
            self.db.persist(PersistMode::SyncData)?;
        }
        Ok(())
    }
}

impl Engine for Fjall {
    fn load_batch(&self, batch: &[(Vec<u8>, Vec<u8>)]) -> BenchResult<()> {
        let mut b = self.db.batch();
        for (k, v) in batch {
            b.insert(&self.ks, k.as_slice(), v.as_slice());
        }
        b.commit()?;
        self.sync_if_durable()
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> BenchResult<bool> {
        match self.ks.get(key)? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        self.ks.insert(key, value)?;
        self.sync_if_durable()
    }

    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        self.ks.remove(key)?;
        self.sync_if_durable()
    }

    fn rename(&self, src: &[u8], dst: &[u8]) -> BenchResult<bool> {
        // An atomic batch: fjall has no read-modify-write transaction on a plain keyspace, so
        // the read precedes the batch (single-threaded use in the mix makes that exact).
        let Some(value) = self.ks.get(src)? else { return Ok(false) };
        let mut b = self.db.batch();
        b.insert(&self.ks, dst, value);
        b.remove(&self.ks, src);
        b.commit()?;
        self.sync_if_durable()?;
        Ok(true)
    }

    fn finish(&self) -> BenchResult<()> {
        self.db.persist(PersistMode::SyncAll)?;
        self.ks.rotate_memtable_and_wait()?;
        Ok(())
    }

    fn walk(&self, start: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> Step) -> BenchResult<()> {
        let snapshot = self.db.snapshot();
        walk_in_passes(start, |from| {
            for guard in snapshot.range(&self.ks, from..) {
                let (k, v) = guard.into_inner()?;
                if let Some(end) = feed(f, &k, &v) {
                    return Ok(end);
                }
            }
            Ok(Pass::Done)
        })
    }
}
