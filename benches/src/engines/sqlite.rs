//! SQLite (bundled) in WAL mode: `synchronous=NORMAL` logs to the page cache, `FULL` fsyncs
//! each commit. `finish` runs a truncating WAL checkpoint. Connections are not shareable across
//! threads, so the engine keeps a small pool and each call checks one out.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{params, Connection, OptionalExtension};

use super::{feed, walk_in_passes, BenchResult, Engine, OpenOptions, Pass, Step, WriteMode};

pub struct Sqlite {
    path: PathBuf,
    synchronous: &'static str,
    cache_kib: usize,
    pool: Mutex<Vec<Connection>>,
}

impl Sqlite {
    pub fn open(dir: &Path, open: OpenOptions) -> BenchResult<Sqlite> {
        let synchronous = match open.mode {
            WriteMode::LogToPageCache => "NORMAL",
            WriteMode::Fsync => "FULL",
        };
        let engine = Sqlite {
            path: dir.join("data.sqlite"),
            synchronous,
            cache_kib: (open.cache_bytes / 1024).max(64),
            pool: Mutex::new(Vec::new()),
        };
        let conn = engine.connect()?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID;",
        )?;
        engine.give_back(conn);
        Ok(engine)
    }

    fn connect(&self) -> BenchResult<Connection> {
        let conn = Connection::open(&self.path)?;
        conn.busy_timeout(std::time::Duration::from_secs(60))?;
        conn.execute_batch(&format!(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous={}; PRAGMA cache_size=-{};",
            self.synchronous, self.cache_kib
        ))?;
        Ok(conn)
    }

    fn take(&self) -> BenchResult<Connection> {
        let pooled = self.pool.lock().map_err(|_| "sqlite pool lock poisoned")?.pop();
        match pooled {
            Some(c) => Ok(c),
            None => self.connect(),
        }
    }

    fn give_back(&self, conn: Connection) {
        if let Ok(mut pool) = self.pool.lock() {
            pool.push(conn);
        }
    }

    fn with<T>(&self, body: impl FnOnce(&mut Connection) -> BenchResult<T>) -> BenchResult<T> {
        let mut conn = self.take()?;
        let result = body(&mut conn);
        self.give_back(conn);
        result
    }
}

impl Engine for Sqlite {
    fn load_batch(&self, batch: &[(Vec<u8>, Vec<u8>)]) -> BenchResult<()> {
        self.with(|c| {
            let tx = c.transaction()?;
            {
                let mut st = tx.prepare_cached("INSERT OR REPLACE INTO kv (k, v) VALUES (?1, ?2)")?;
                for (k, v) in batch {
                    st.execute(params![k, v])?;
                }
            }
            tx.commit()?;
            Ok(())
        })
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> BenchResult<bool> {
        self.with(|c| {
            let mut st = c.prepare_cached("SELECT v FROM kv WHERE k = ?1")?;
            let found = st
                .query_row(params![key], |row| {
                    let v = row.get_ref(0)?.as_blob()?;
                    out.clear();
                    out.extend_from_slice(v);
                    Ok(())
                })
                .optional()?;
            Ok(found.is_some())
        })
    }

    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        self.with(|c| {
            c.prepare_cached("INSERT OR REPLACE INTO kv (k, v) VALUES (?1, ?2)")?
                .execute(params![key, value])?;
            Ok(())
        })
    }

    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        self.with(|c| {
            c.prepare_cached("DELETE FROM kv WHERE k = ?1")?.execute(params![key])?;
            Ok(())
        })
    }

    fn rename(&self, src: &[u8], dst: &[u8]) -> BenchResult<bool> {
        self.with(|c| {
            let tx = c.transaction()?;
            let moved = tx
                .prepare_cached("INSERT OR REPLACE INTO kv (k, v) SELECT ?2, v FROM kv WHERE k = ?1")?
                .execute(params![src, dst])?;
            if moved == 1 {
                tx.prepare_cached("DELETE FROM kv WHERE k = ?1")?.execute(params![src])?;
            }
            tx.commit()?;
            Ok(moved == 1)
        })
    }

    fn finish(&self) -> BenchResult<()> {
        self.with(|c| {
            c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
            Ok(())
        })
    }

    fn walk(&self, start: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> Step) -> BenchResult<()> {
        self.with(|c| {
            // One read transaction across re-seeks, like the other engines' snapshots.
            let tx = c.transaction()?;
            {
                let mut st = tx.prepare_cached("SELECT k, v FROM kv WHERE k >= ?1 ORDER BY k")?;
                walk_in_passes(start, |from| {
                    let mut rows = st.query(params![from])?;
                    while let Some(row) = rows.next()? {
                        if let Some(end) = feed(f, row.get_ref(0)?.as_blob()?, row.get_ref(1)?.as_blob()?) {
                            return Ok(end);
                        }
                    }
                    Ok(Pass::Done)
                })?;
            }
            tx.commit()?;
            Ok(())
        })
    }
}
