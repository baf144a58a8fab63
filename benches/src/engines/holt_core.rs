//! holt-core, the engine under test: native `list` (rollup without visiting skipped keys) and
//! native `scan`.

use std::path::Path;

use holt_core::{Batch, Condition, Db, Durability, ListEntry, ListRequest, Options, WriteOptions};

use super::{BenchResult, Engine, OpenOptions, Page, PutFuture, Step, WriteMode};

pub struct HoltCore {
    db: Db,
    persistent: bool,
}

/// With `HOLT_BENCH_WEIGH=size`, a value weighs the `size` its record names (as the gateway
/// weighs an object record by the object's size): every overwrite changes it, so every
/// write also updates its frame's usage totals and its ancestors'.
fn options(open: OpenOptions, durability: Durability) -> Options {
    let weigher =
        (std::env::var("HOLT_BENCH_WEIGH").as_deref() == Ok("size")).then_some(holt_core::Weigher {
            name: "bench-record-size",
            // `{"size":NNNNNNNN,...`: the eight digits after the field name (`data::value`).
            weigh: |v| v.get(8..16).and_then(|d| std::str::from_utf8(d).ok()?.parse().ok()).unwrap_or(0),
        });
    // `HOLT_BENCH_DIRECT_IO=on|off` overrides `Options::direct_io`: the two side by side.
    let direct_io = match std::env::var("HOLT_BENCH_DIRECT_IO").as_deref() {
        Ok("on") => true,
        Ok("off") => false,
        _ => Options::default().direct_io,
    };
    Options { durability, memory_budget_bytes: open.cache_bytes, weigher, direct_io, ..Options::default() }
}

impl HoltCore {
    pub fn open(dir: &Path, open: OpenOptions) -> BenchResult<HoltCore> {
        Self::open_with(dir, open, true)
    }

    /// `open` with evicted frames' pages read by `pread` instead of through a mapping
    /// (`Options::mapped_reads` off): the two read paths side by side in one process.
    pub fn open_pread(dir: &Path, open: OpenOptions) -> BenchResult<HoltCore> {
        Self::open_with(dir, open, false)
    }

    fn open_with(dir: &Path, open: OpenOptions, mapped_reads: bool) -> BenchResult<HoltCore> {
        let durability = match open.mode {
            WriteMode::LogToPageCache => Durability::Async,
            WriteMode::Fsync => Durability::Sync,
        };
        let options = Options { mapped_reads, ..options(open, durability) };
        Ok(HoltCore { db: Db::open(dir, options)?, persistent: true })
    }

    /// No log and no files: only comparable with peers on reads, never on writes.
    pub fn open_in_memory(open: OpenOptions) -> BenchResult<HoltCore> {
        Ok(HoltCore { db: Db::open_in_memory(options(open, Durability::Memory))?, persistent: false })
    }
}

impl Engine for HoltCore {
    fn load_batch(&self, batch: &[(Vec<u8>, Vec<u8>)]) -> BenchResult<()> {
        let mut b = Batch::new();
        for (k, v) in batch {
            b.put(k.clone(), v.clone());
        }
        self.db.write_batch(&b, WriteOptions::default())?;
        Ok(())
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> BenchResult<bool> {
        // Copied once, straight from the tree, as every other engine's value is.
        let found = self.db.get_with(key, |value, _| {
            out.clear();
            out.extend_from_slice(value);
        })?;
        Ok(found.is_some())
    }

    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        self.db.put(key, value)?;
        Ok(())
    }

    fn put_awaiting<'a>(&'a self, key: &'a [u8], value: &'a [u8]) -> Option<PutFuture<'a>> {
        Some(Box::pin(async move {
            // Applied and logged here; the await ends when the group fdatasync covers it.
            self.db.put_pending(key, value, Condition::None, WriteOptions::default())?.await?;
            Ok(())
        }))
    }

    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        self.db.delete(key)?;
        Ok(())
    }

    fn rename(&self, src: &[u8], dst: &[u8]) -> BenchResult<bool> {
        let Some(entry) = self.db.get(src)? else { return Ok(false) };
        let mut b = Batch::new();
        b.delete_if(src.to_vec(), Condition::Version(entry.version));
        b.put(dst.to_vec(), entry.value);
        self.db.write_batch(&b, WriteOptions::default())?;
        Ok(true)
    }

    fn stats_line(&self) -> Option<String> {
        Some(format!("{:?}", self.db.stats()))
    }

    fn finish(&self) -> BenchResult<()> {
        if self.persistent {
            self.db.checkpoint()?;
        }
        Ok(())
    }

    fn walk(&self, start: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> Step) -> BenchResult<()> {
        // `scan` bounds are exclusive: visit `start` itself first, then page after it.
        let mut cursor = start.to_vec();
        if let Some(entry) = self.db.get(start)? {
            match f(start, &entry.value) {
                Step::Continue => {}
                Step::Stop => return Ok(()),
                Step::Seek(to) => cursor = to,
            }
        }
        loop {
            let page = self.db.scan(b"", &cursor, 256)?;
            if page.is_empty() {
                return Ok(());
            }
            let mut reseek = None;
            for (k, e) in &page {
                match f(k, &e.value) {
                    Step::Continue => cursor.clone_from(k),
                    Step::Stop => return Ok(()),
                    Step::Seek(to) => {
                        reseek = Some(to);
                        break;
                    }
                }
            }
            if let Some(to) = reseek {
                // Seek to `to` inclusive = resume after its predecessor; approximate by
                // visiting `to` if present, then continuing after it.
                if let Some(entry) = self.db.get(&to)? {
                    match f(&to, &entry.value) {
                        Step::Continue => {}
                        Step::Stop => return Ok(()),
                        Step::Seek(_) => {}
                    }
                }
                cursor = to;
            }
        }
    }

    /// Through `list_with` without a delimiter, as the gateway reads: each entry copied once
    /// into `out`, as the other engines' cursors copy it (`Db::scan`'s own result vector is
    /// one more allocation per call, of the page's size).
    fn scan(&self, prefix: &[u8], limit: usize, out: &mut Vec<(Vec<u8>, Vec<u8>)>) -> BenchResult<()> {
        out.clear();
        let request = ListRequest { prefix, limit, with_values: true, ..Default::default() };
        self.db.list_with(&request, &mut |entry| {
            if let ListEntry::Key { key, value, .. } = entry {
                out.push((key.to_vec(), value.to_vec()));
            }
        })?;
        Ok(())
    }

    /// Through `list_with`, the visitor API the gateway uses: each entry is copied once,
    /// straight from the tree into `out`, as every other engine's listing copies it once.
    fn list(&self, prefix: &[u8], delimiter: u8, limit: usize, out: &mut Page) -> BenchResult<()> {
        out.clear();
        let delimiter = [delimiter];
        let request =
            ListRequest { prefix, delimiter: &delimiter, limit, with_values: true, ..Default::default() };
        self.db.list_with(&request, &mut |entry| match entry {
            ListEntry::Key { key, value, .. } => out.push_key(key, value),
            ListEntry::CommonPrefix(p) => out.push_prefix(p),
        })?;
        Ok(())
    }
}
