//! `std::collections::BTreeMap` behind a read-write lock: the in-memory ordered-map baseline
//! (no files, no log), compared on reads and listings only, like `holt-core-mem`. It is also
//! the oracle the adapter tests hold every other engine against.

use std::collections::BTreeMap;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{feed, walk_in_passes, BenchResult, Engine, Pass, Step};

#[derive(Default)]
pub struct BTreeMapEngine(RwLock<BTreeMap<Vec<u8>, Vec<u8>>>);

impl BTreeMapEngine {
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> BenchResult<RwLockReadGuard<'_, BTreeMap<Vec<u8>, Vec<u8>>>> {
        Ok(self.0.read().map_err(|_| "poisoned")?)
    }

    fn write(&self) -> BenchResult<RwLockWriteGuard<'_, BTreeMap<Vec<u8>, Vec<u8>>>> {
        Ok(self.0.write().map_err(|_| "poisoned")?)
    }
}

impl Engine for BTreeMapEngine {
    fn load_batch(&self, batch: &[(Vec<u8>, Vec<u8>)]) -> BenchResult<()> {
        let mut m = self.write()?;
        for (k, v) in batch {
            m.insert(k.clone(), v.clone());
        }
        Ok(())
    }

    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> BenchResult<bool> {
        Ok(self.read()?.get(key).map(|v| out.clone_from(v)).is_some())
    }

    fn put(&self, key: &[u8], value: &[u8]) -> BenchResult<()> {
        self.write()?.insert(key.to_vec(), value.to_vec());
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> BenchResult<()> {
        self.write()?.remove(key);
        Ok(())
    }

    fn rename(&self, src: &[u8], dst: &[u8]) -> BenchResult<bool> {
        let mut m = self.write()?;
        match m.remove(src) {
            Some(v) => {
                m.insert(dst.to_vec(), v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn finish(&self) -> BenchResult<()> {
        Ok(())
    }

    fn walk(&self, start: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> Step) -> BenchResult<()> {
        let m = self.read()?;
        walk_in_passes(start, |from| {
            for (k, v) in m.range::<[u8], _>((std::ops::Bound::Included(from), std::ops::Bound::Unbounded)) {
                if let Some(end) = feed(f, k, v) {
                    return Ok(end);
                }
            }
            Ok(Pass::Done)
        })
    }
}
