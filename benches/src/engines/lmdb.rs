//! LMDB through heed: a copy-on-write B+tree over mmap. Log-to-page-cache mode is `NO_SYNC`
//! (commits reach the page cache; `force_sync` at the end); fsync mode syncs every commit.

use std::ops::Bound;
use std::path::Path;

use heed::types::Bytes;
use heed::{CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions};

use super::{feed, walk_in_passes, BenchResult, Engine, OpenOptions, Pass, Step, WriteMode};

pub struct Lmdb {
    env: Env,
    db: Database<'static, Bytes, Bytes>,
}

impl Lmdb {
    pub fn open(dir: &Path, open: OpenOptions) -> BenchResult<Lmdb> {
        let mut options = EnvOpenOptions::new();
        // Address space only: LMDB grows the file as needed up to this.
        options.map_size(64 << 30).max_dbs(1);
        if open.mode == WriteMode::LogToPageCache {
            // SAFETY: NO_SYNC only weakens durability after an OS crash, which this
            // benchmark accepts for its log-to-page-cache figures.
            unsafe {
                options.flags(EnvFlags::NO_SYNC);
            }
        }
        if std::env::var_os("HOLT_BENCH_LMDB_NO_READ_AHEAD").is_some_and(|v| v == "1") {
            // SAFETY: MDB_NORDAHEAD only turns off the kernel's read-around on the mapping.
            // Set to compare cold reads with holt-core's, which reads no pages around a fault.
            unsafe {
                options.flags(EnvFlags::NO_READ_AHEAD);
            }
        }
        // SAFETY: the directory is private to this process for the benchmark's lifetime, so
        // nothing else maps or truncates the file.
        let env = unsafe { options.open(dir)? };
        let wtxn = env.write_txn()?;
        let db = match env.create_databases_and_commit(wtxn, |opener, wtxn| {
            opener.create_database::<Bytes, Bytes>(wtxn, None).map(CommitOrAbort::<_, ()>::Commit)
        })? {
            CommitOrAbort::Commit(db) => db,
            CommitOrAbort::Abort(()) => return Err("LMDB database creation aborted".into()),
        };
        Ok(Lmdb { env, db })
    }
}

impl Engine for Lmdb {
    fn load_batch(&self, batch: &[(Vec<u8>, Vec<u8>)]) -> BenchResult<()> {
        let mut wtxn = self.env.write_txn()?;
        for (k, v) in batch {
            self.db.put(&mut wtxn, k, v)?;
        }
        wtxn.commit()?;
        Ok(())
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> BenchResult<bool> {
        let rtxn = self.env.read_txn()?;
        match self.db.get(&rtxn, key)? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        let mut wtxn = self.env.write_txn()?;
        self.db.put(&mut wtxn, key, value)?;
        wtxn.commit()?;
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        let mut wtxn = self.env.write_txn()?;
        self.db.delete(&mut wtxn, key)?;
        wtxn.commit()?;
        Ok(())
    }

    fn rename(&self, src: &[u8], dst: &[u8]) -> BenchResult<bool> {
        let mut wtxn = self.env.write_txn()?;
        let Some(value) = self.db.get(&wtxn, src)?.map(<[u8]>::to_vec) else { return Ok(false) };
        self.db.put(&mut wtxn, dst, &value)?;
        self.db.delete(&mut wtxn, src)?;
        wtxn.commit()?;
        Ok(true)
    }

    fn finish(&self) -> BenchResult<()> {
        self.env.force_sync()?;
        Ok(())
    }

    fn walk(&self, start: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> Step) -> BenchResult<()> {
        let rtxn = self.env.read_txn()?;
        walk_in_passes(start, |from| {
            // LMDB rejects zero-length keys, even as a bound: the empty start is "from the first".
            let lower = if from.is_empty() { Bound::Unbounded } else { Bound::Included(from) };
            for item in self.db.range(&rtxn, &(lower, Bound::Unbounded))? {
                let (k, v) = item?;
                if let Some(end) = feed(f, k, v) {
                    return Ok(end);
                }
            }
            Ok(Pass::Done)
        })
    }
}
