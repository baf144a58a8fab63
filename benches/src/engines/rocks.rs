//! RocksDB 7.8 (Debian's librocksdb) through the rocksdb crate 0.19: WAL on in both modes;
//! `sync=false` logs to the page cache, `sync=true` fsyncs each commit (RocksDB group-commits
//! concurrent writers). `finish` syncs the WAL and flushes the memtable.

use std::path::Path;

use rocksdb::{BlockBasedOptions, Cache, Options, WriteBatch, WriteOptions, DB};

use super::{BenchResult, Engine, OpenOptions, Step, WriteMode};

pub struct Rocks {
    db: DB,
    write: WriteOptions,
    // Kept alive for the lifetime of the table factory that points at it.
    _cache: Cache,
}

impl Rocks {
    pub fn open(dir: &Path, open: OpenOptions) -> BenchResult<Rocks> {
        let cache = Cache::new_lru_cache(open.cache_bytes)?;
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        table.set_bloom_filter(10.0, false);
        let mut options = Options::default();
        options.create_if_missing(true);
        options.increase_parallelism(2);
        options.set_block_based_table_factory(&table);
        let db = DB::open(&options, dir)?;
        let mut write = WriteOptions::default();
        write.set_sync(open.mode == WriteMode::Fsync);
        Ok(Rocks { db, write, _cache: cache })
    }
}

impl Engine for Rocks {
    fn load_batch(&self, batch: &[(Vec<u8>, Vec<u8>)]) -> BenchResult<()> {
        let mut b = WriteBatch::default();
        for (k, v) in batch {
            b.put(k, v);
        }
        self.db.write_opt(b, &self.write)?;
        Ok(())
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> BenchResult<bool> {
        match self.db.get_pinned(key)? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        self.db.put_opt(key, value, &self.write)?;
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        self.db.delete_opt(key, &self.write)?;
        Ok(())
    }

    fn rename(&self, src: &[u8], dst: &[u8]) -> BenchResult<bool> {
        // Read, then one atomic batch (the mix is single-threaded, so nothing races the read).
        let Some(value) = self.db.get_pinned(src)?.map(|v| v.to_vec()) else { return Ok(false) };
        let mut b = WriteBatch::default();
        b.put(dst, value);
        b.delete(src);
        self.db.write_opt(b, &self.write)?;
        Ok(true)
    }

    fn finish(&self) -> BenchResult<()> {
        self.db.flush_wal(true)?;
        self.db.flush()?;
        Ok(())
    }

    fn walk(&self, start: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> Step) -> BenchResult<()> {
        let mut it = self.db.raw_iterator();
        it.seek(start);
        while it.valid() {
            let (Some(k), Some(v)) = (it.key(), it.value()) else { break };
            match f(k, v) {
                Step::Continue => it.next(),
                Step::Stop => return Ok(()),
                Step::Seek(to) => it.seek(&to),
            }
        }
        it.status()?;
        Ok(())
    }
}
