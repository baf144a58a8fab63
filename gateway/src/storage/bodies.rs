//! The body store: object and part bodies as files under `DATA/bodies/xx/<32 hex>` named by
//! random ids (never by keys, so `../../etc/passwd` is an ordinary key), written under
//! `DATA/tmp/` first.
//!
//! Durability protocol for a new body: write to `tmp/<id>`, fsync the file, rename into
//! `bodies/xx/<id>`, fsync `bodies/xx`; only then is the metadata that names the body
//! committed. A crash before the metadata commit leaves an unreferenced file, removed by the
//! start-up sweep. A body that is replaced or deleted is unlinked only after the metadata change
//! is durable (`Store::reclaim`), so a committed record never names a missing file, not even
//! after a crash (a reader that raced with the unlink still holds its open descriptor). Bodies
//! of at most `inline_max` bytes are kept inside the metadata value and never touch the file
//! system.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::StreamExt as _;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt, BufWriter};

use super::meta::{BodyId, BodyRef};

/// Bodies up to this size live inside the metadata value.
pub const INLINE_MAX_DEFAULT: usize = 4096;
/// Read and write buffer for body files.
const IO_CHUNK_BYTES: usize = 256 * 1024;

/// The directory of body files under the data directory, and the inline threshold.
pub struct BodyStore {
    bodies: PathBuf,
    tmp: PathBuf,
    inline_max: usize,
}

fn fsync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

impl BodyStore {
    /// Creates `DATA/bodies` (with its 256 fan-out directories) and `DATA/tmp`, and empties
    /// `tmp`: anything there belongs to an upload that never committed.
    pub fn open(data_dir: &Path, inline_max: usize) -> io::Result<Arc<Self>> {
        let bodies = data_dir.join("bodies");
        let tmp = data_dir.join("tmp");
        std::fs::create_dir_all(&bodies)?;
        std::fs::create_dir_all(&tmp)?;
        for i in 0..=255u8 {
            let d = bodies.join(format!("{i:02x}"));
            if !d.exists() {
                std::fs::create_dir(&d)?;
            }
        }
        fsync_dir(&bodies)?;
        let mut removed = 0usize;
        for entry in std::fs::read_dir(&tmp)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                std::fs::remove_file(entry.path())?;
                removed += 1;
            }
        }
        if removed > 0 {
            tracing::info!(removed, "removed uncommitted uploads from tmp");
        }
        Ok(Arc::new(BodyStore { bodies, tmp, inline_max }))
    }

    fn path(&self, id: BodyId) -> PathBuf {
        let hex = id.to_hex();
        self.bodies.join(&hex[..2]).join(hex)
    }

    /// A writer for a new body: kept in memory while it fits `inline_max`, then spilled to a
    /// file in `tmp/`.
    pub fn writer(self: &Arc<Self>) -> BodyWriter {
        BodyWriter { store: Arc::clone(self), buf: Vec::new(), file: None, len: 0 }
    }

    /// Unlinks a body whose metadata no longer names it. Failures are logged, not returned:
    /// the metadata change has committed already, and the start-up sweep retries. Only the
    /// `Store` calls this: for a body a record named, once that change is durable
    /// (`reclaim`); for one never named, at once (`discard`).
    pub(super) async fn remove(&self, body: &BodyRef) {
        if let Some(id) = body.file_id() {
            if let Err(e) = tokio::fs::remove_file(self.path(id)).await {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(body = %id.to_hex(), error = %e, "could not remove body file");
                }
            }
        }
    }

    /// Every body id on disk (for the start-up sweep).
    pub fn ids_on_disk(&self) -> io::Result<Vec<BodyId>> {
        let mut ids = Vec::new();
        for dir in std::fs::read_dir(&self.bodies)? {
            let dir = dir?;
            if !dir.file_type()?.is_dir() {
                continue;
            }
            for f in std::fs::read_dir(dir.path())? {
                let f = f?;
                if let Some(id) = f.file_name().to_str().and_then(BodyId::from_hex) {
                    ids.push(id);
                }
            }
        }
        Ok(ids)
    }

    /// Removes every body file not in `referenced`; returns how many were removed.
    pub fn sweep(&self, referenced: &HashSet<BodyId>) -> io::Result<usize> {
        let mut removed = 0;
        for id in self.ids_on_disk()? {
            if !referenced.contains(&id) {
                std::fs::remove_file(self.path(id))?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Streams `len` bytes of `body` starting at `offset`. The file is opened before this
    /// returns, so a concurrent unlink cannot take the body away mid-response.
    pub async fn read_range(
        &self,
        body: &BodyRef,
        offset: u64,
        len: u64,
    ) -> io::Result<BoxStream<'static, io::Result<Bytes>>> {
        enum Source {
            Mem(Bytes),
            File(tokio::fs::File),
        }
        let source = match body {
            BodyRef::Inline(data) => {
                let start = usize::try_from(offset).unwrap_or(usize::MAX).min(data.len());
                let end = usize::try_from(offset.saturating_add(len)).unwrap_or(usize::MAX).min(data.len());
                Source::Mem(Bytes::copy_from_slice(&data[start..end]))
            }
            BodyRef::File(id) => {
                let mut f = tokio::fs::File::open(self.path(*id)).await?;
                f.seek(io::SeekFrom::Start(offset)).await?;
                Source::File(f)
            }
            BodyRef::Upstream(_) => {
                return Err(io::Error::new(io::ErrorKind::Unsupported, "the body is held upstream"))
            }
        };
        Ok(futures_util::stream::unfold((source, len), |(source, remaining)| async move {
            if remaining == 0 {
                return None;
            }
            match source {
                Source::Mem(b) => Some((Ok(b), (Source::Mem(Bytes::new()), 0))),
                Source::File(mut f) => {
                    let want = usize::try_from(remaining).unwrap_or(usize::MAX).min(IO_CHUNK_BYTES);
                    let mut buf = vec![0u8; want];
                    match f.read(&mut buf).await {
                        Ok(0) => Some((
                            Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "body file shorter than its metadata",
                            )),
                            (Source::File(f), 0),
                        )),
                        Ok(n) => {
                            buf.truncate(n);
                            Some((Ok(Bytes::from(buf)), (Source::File(f), remaining - n as u64)))
                        }
                        Err(e) => Some((Err(e), (Source::File(f), 0))),
                    }
                }
            }
        })
        .boxed())
    }
}

/// A body being received. Dropping it without `commit` removes its temporary file.
pub struct BodyWriter {
    store: Arc<BodyStore>,
    buf: Vec<u8>,
    file: Option<(BufWriter<tokio::fs::File>, PathBuf, BodyId)>,
    len: u64,
}

impl BodyWriter {
    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing has been written yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `data`. The first write past `inline_max` creates the temporary file; an error
    /// leaves the writer unusable (drop it, which removes the file).
    pub async fn write(&mut self, data: &[u8]) -> io::Result<()> {
        self.len += data.len() as u64;
        if self.file.is_none() {
            if self.buf.len() + data.len() <= self.store.inline_max {
                self.buf.extend_from_slice(data);
                return Ok(());
            }
            let id = BodyId::random();
            let path = self.store.tmp.join(id.to_hex());
            let f = tokio::fs::OpenOptions::new().write(true).create_new(true).open(&path).await?;
            // Record the file before writing, so Drop removes it whatever fails next.
            self.file = Some((BufWriter::with_capacity(IO_CHUNK_BYTES, f), path, id));
            let pending = std::mem::take(&mut self.buf);
            if let Some((w, _, _)) = self.file.as_mut() {
                w.write_all(&pending).await?;
            }
        }
        match self.file.as_mut() {
            Some((w, _, _)) => w.write_all(data).await,
            None => Ok(()),
        }
    }

    /// Makes the body durable and returns where it lives. After this returns, the caller owns
    /// the file: it must commit metadata naming it or `Store::discard` it.
    pub async fn commit(mut self) -> io::Result<BodyRef> {
        let Some((mut w, tmp_path, id)) = self.file.take() else {
            return Ok(BodyRef::Inline(std::mem::take(&mut self.buf)));
        };
        let result: io::Result<()> = async {
            w.flush().await?;
            let f = w.into_inner().into_std().await;
            let final_path = self.store.path(id);
            let tmp = tmp_path.clone();
            tokio::task::spawn_blocking(move || -> io::Result<()> {
                f.sync_all()?;
                drop(f);
                std::fs::rename(&tmp, &final_path)?;
                match final_path.parent() {
                    Some(dir) => fsync_dir(dir),
                    None => Ok(()),
                }
            })
            .await
            .map_err(io::Error::other)?
        }
        .await;
        match result {
            Ok(()) => Ok(BodyRef::File(id)),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp_path);
                let _ = std::fs::remove_file(self.store.path(id));
                Err(e)
            }
        }
    }
}

impl Drop for BodyWriter {
    fn drop(&mut self) {
        if let Some((_, path, _)) = self.file.take() {
            // Unlink is quick and must happen even when the request future is dropped.
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    async fn read_all(store: &BodyStore, body: &BodyRef, off: u64, len: u64) -> Vec<u8> {
        let s = store.read_range(body, off, len).await.unwrap();
        let chunks: Vec<_> = s.collect().await;
        chunks.into_iter().flat_map(|c| c.unwrap().to_vec()).collect()
    }

    #[tokio::test]
    async fn small_bodies_inline_large_bodies_in_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = BodyStore::open(dir.path(), 8).unwrap();
        let mut w = store.writer();
        w.write(b"abc").await.unwrap();
        assert_eq!(w.commit().await.unwrap(), BodyRef::Inline(b"abc".to_vec()));

        let mut w = store.writer();
        w.write(b"0123456").await.unwrap();
        w.write(b"789abcdef").await.unwrap();
        let body = w.commit().await.unwrap();
        let id = body.file_id().expect("spilled to a file");
        assert_eq!(read_all(&store, &body, 0, 16).await, b"0123456789abcdef");
        assert_eq!(read_all(&store, &body, 3, 4).await, b"3456");
        assert_eq!(std::fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);

        // Unreferenced files are swept; referenced ones stay.
        assert_eq!(store.sweep(&[id].into_iter().collect()).unwrap(), 0);
        assert_eq!(store.sweep(&HashSet::new()).unwrap(), 1);
        assert!(store.ids_on_disk().unwrap().is_empty());
    }

    #[tokio::test]
    async fn dropped_writer_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = BodyStore::open(dir.path(), 0).unwrap();
        let mut w = store.writer();
        w.write(b"some bytes").await.unwrap();
        assert_eq!(std::fs::read_dir(dir.path().join("tmp")).unwrap().count(), 1);
        drop(w);
        assert_eq!(std::fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
        assert!(store.ids_on_disk().unwrap().is_empty());
    }
}
