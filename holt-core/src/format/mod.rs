//! Bytes on disk only: the frame header, the node encodings, frame deltas, the WAL record and
//! the manifest.
//! Nothing here does I/O; every decoder validates its input and never panics.
//!
//! The byte tables live in `holt-core/docs/format.md`.

pub(crate) mod delta;
pub(crate) mod frame;
pub(crate) mod manifest;
pub(crate) mod node;
pub(crate) mod wal;

/// Size of one frame on disk: every frame is exactly this many bytes, self-describing.
pub(crate) const FRAME_SIZE: usize = 512 * 1024;

/// Identifies a frame for its whole life (a frame keeps its id when it is rewritten).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct FrameId(pub u64);

impl FrameId {
    /// The frame holding the root of the tree.
    pub(crate) const ROOT: FrameId = FrameId(0);
}

impl std::fmt::Display for FrameId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}
