//! redb: a copy-on-write B-tree without a separate log. Log-to-page-cache mode commits with
//! `Durability::None` (written, not fsynced) and `finish` makes one `Immediate` commit; fsync
//! mode commits every transaction with `Durability::Immediate`.

use std::path::Path;

use redb::{Database, Durability, ReadableDatabase, TableDefinition};

use super::{feed, walk_in_passes, BenchResult, Engine, OpenOptions, Pass, Step, WriteMode};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

pub struct Redb {
    db: Database,
    durability: Durability,
}

impl Redb {
    pub fn open(dir: &Path, open: OpenOptions) -> BenchResult<Redb> {
        let db = Database::builder().set_cache_size(open.cache_bytes).create(dir.join("data.redb"))?;
        let durability = match open.mode {
            WriteMode::LogToPageCache => Durability::None,
            WriteMode::Fsync => Durability::Immediate,
        };
        let engine = Redb { db, durability };
        // Create the table up front so readers never meet a missing table.
        engine.write(|_| Ok(()))?;
        Ok(engine)
    }

    fn write(&self, body: impl FnOnce(&mut redb::Table<&[u8], &[u8]>) -> BenchResult<()>) -> BenchResult<()> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(self.durability)?;
        {
            let mut table = txn.open_table(TABLE)?;
            body(&mut table)?;
        }
        txn.commit()?;
        Ok(())
    }
}

impl Engine for Redb {
    fn load_batch(&self, batch: &[(Vec<u8>, Vec<u8>)]) -> BenchResult<()> {
        self.write(|t| {
            for (k, v) in batch {
                t.insert(k.as_slice(), v.as_slice())?;
            }
            Ok(())
        })
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> BenchResult<bool> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(TABLE)?;
        match table.get(key)? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(v.value());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        self.write(|t| {
            t.insert(key, value)?;
            Ok(())
        })
    }

    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        self.write(|t| {
            t.remove(key)?;
            Ok(())
        })
    }

    fn rename(&self, src: &[u8], dst: &[u8]) -> BenchResult<bool> {
        let mut found = false;
        self.write(|t| {
            let value = t.remove(src)?.map(|v| v.value().to_vec());
            if let Some(value) = value {
                t.insert(dst, value.as_slice())?;
                found = true;
            }
            Ok(())
        })?;
        Ok(found)
    }

    fn finish(&self) -> BenchResult<()> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        txn.commit()?;
        Ok(())
    }

    fn walk(&self, start: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> Step) -> BenchResult<()> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(TABLE)?;
        walk_in_passes(start, |from| {
            for item in table.range::<&[u8]>(from..)? {
                let (k, v) = item?;
                if let Some(end) = feed(f, k.value(), v.value()) {
                    return Ok(end);
                }
            }
            Ok(Pass::Done)
        })
    }
}
