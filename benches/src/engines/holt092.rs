//! The published holt crate (=0.9.2), the predecessor: native delimiter rollup via
//! `scan(prefix).delimiter(b'/')`, deferred work completed by `checkpoint()`.

use std::path::Path;

use holt::{Durability, RangeEntry, Tree, TreeBuilder};

use super::{BenchResult, Engine, OpenOptions, Page, Step, WriteMode};

/// holt's buffer pool is counted in 512 KiB frames.
const FRAME_BYTES: usize = 512 * 1024;

pub struct Holt092 {
    tree: Tree,
}

impl Holt092 {
    pub fn open(dir: &Path, open: OpenOptions) -> BenchResult<Holt092> {
        let sync = open.mode == WriteMode::Fsync;
        let frames = (open.cache_bytes / FRAME_BYTES).max(16);
        let tree =
            TreeBuilder::new(dir).buffer_pool_size(frames).durability(Durability::Wal { sync }).open()?;
        Ok(Holt092 { tree })
    }
}

impl Engine for Holt092 {
    fn load_batch(&self, batch: &[(Vec<u8>, Vec<u8>)]) -> BenchResult<()> {
        // Its multi-key create: one WAL record per batch, same-parent runs applied together.
        let entries: Vec<(&[u8], &[u8])> = batch.iter().map(|(k, v)| (k.as_slice(), v.as_slice())).collect();
        self.tree.put_many_if_absent(&entries)?;
        Ok(())
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> BenchResult<bool> {
        match self.tree.get(key)? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(&v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        self.tree.put(key, value)?;
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        self.tree.delete(key)?;
        Ok(())
    }

    fn rename(&self, src: &[u8], dst: &[u8]) -> BenchResult<bool> {
        match self.tree.rename(src, dst, false) {
            Ok(()) => Ok(true),
            Err(holt::Error::NotFound) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    fn finish(&self) -> BenchResult<()> {
        self.tree.checkpoint()?;
        Ok(())
    }

    fn walk(&self, start: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> Step) -> BenchResult<()> {
        let mut cursor = start.to_vec();
        let mut inclusive = true;
        'outer: loop {
            if inclusive {
                if let Some(v) = self.tree.get(&cursor)? {
                    match f(&cursor, &v) {
                        Step::Continue => {}
                        Step::Stop => return Ok(()),
                        Step::Seek(to) => {
                            cursor = to;
                            continue 'outer;
                        }
                    }
                }
            }
            for entry in self.tree.range().start_after(&cursor) {
                if let RangeEntry::Key { key, value, .. } = entry? {
                    match f(&key, &value) {
                        Step::Continue => {}
                        Step::Stop => return Ok(()),
                        Step::Seek(to) => {
                            cursor = to;
                            inclusive = true;
                            continue 'outer;
                        }
                    }
                }
            }
            return Ok(());
        }
    }

    fn scan(&self, prefix: &[u8], limit: usize, out: &mut Vec<(Vec<u8>, Vec<u8>)>) -> BenchResult<()> {
        out.clear();
        for entry in self.tree.scan(prefix) {
            if out.len() >= limit {
                break;
            }
            if let RangeEntry::Key { key, value, .. } = entry? {
                out.push((key, value));
            }
        }
        Ok(())
    }

    fn list(&self, prefix: &[u8], delimiter: u8, limit: usize, out: &mut Page) -> BenchResult<()> {
        out.clear();
        for entry in self.tree.scan(prefix).delimiter(delimiter) {
            if out.len() >= limit {
                break;
            }
            match entry? {
                RangeEntry::Key { key, value, .. } => out.push_key(&key, &value),
                RangeEntry::CommonPrefix(p) => out.push_prefix(&p),
                // Future entry kinds (non_exhaustive) are not listing entries.
                _ => {}
            }
        }
        Ok(())
    }
}
