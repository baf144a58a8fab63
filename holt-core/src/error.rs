//! The one error type of holt-core.

use std::fmt;
use std::path::PathBuf;

/// Where corrupt bytes were found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file, relative to the database directory (or a name for in-memory files).
    pub file: PathBuf,
    /// The frame, when the bytes belong to a frame.
    pub frame: Option<u64>,
    /// Byte offset in the file.
    pub offset: u64,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(frame) = self.frame {
            write!(f, " frame {frame}")?;
        }
        write!(f, " at offset {}", self.offset)
    }
}

/// Everything that can go wrong in holt-core.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A key was empty or longer than [`crate::KEY_LEN_MAX`].
    KeyLength {
        /// The rejected key's length in bytes.
        len: usize,
    },
    /// A value was longer than [`crate::VALUE_LEN_MAX`].
    ValueTooLarge {
        /// The rejected value's length in bytes.
        len: usize,
    },
    /// A batch was larger than the write-ahead log can carry in one record.
    BatchTooLarge {
        /// Size of the batch's encoded log record, padding included.
        bytes: usize,
    },
    /// A conditional write's condition did not hold; nothing was written.
    ConditionFailed,
    /// Stored bytes failed a check (checksum, magic, version, structure).
    Corruption {
        /// The file, frame and offset of the bad bytes.
        location: Location,
        /// Which check failed, for the operator.
        reason: String,
    },
    /// An I/O call failed. `may_have_applied` tells a writer whether its write may still
    /// become visible or durable (true once the write reached the log).
    Io {
        /// What the engine was doing (for example "create directory").
        op: &'static str,
        /// The underlying error (usually from the operating system).
        source: std::io::Error,
        /// Whether the write may still become visible or durable.
        may_have_applied: bool,
    },
    /// The disk is full: the write was refused before it was applied, so nothing changed.
    DiskFull,
    /// An earlier log write or fsync failed (or a checkpoint left the manifest unknown); the
    /// database refuses reads and writes until it is reopened (memory may hold writes
    /// recovery will not bring back), and reopening recovers from the write-ahead log.
    Poisoned,
    /// Another process (or handle) holds the database directory's lock.
    Locked {
        /// The database directory.
        path: PathBuf,
    },
    /// The database was closed.
    Closed,
    /// An argument was invalid (for example, an empty delimiter where one is required).
    InvalidArgument(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::KeyLength { len } => {
                write!(f, "key length {len} is outside 1..={}", crate::KEY_LEN_MAX)
            }
            Error::ValueTooLarge { len } => {
                write!(f, "value length {len} exceeds {}", crate::VALUE_LEN_MAX)
            }
            Error::BatchTooLarge { bytes } => write!(f, "batch of {bytes} bytes is too large"),
            Error::ConditionFailed => write!(f, "condition failed"),
            Error::Corruption { location, reason } => write!(f, "corruption in {location}: {reason}"),
            Error::Io { op, source, may_have_applied } => write!(
                f,
                "I/O error during {op}: {source} (write {} have been applied)",
                if *may_have_applied { "may" } else { "has not" }
            ),
            Error::DiskFull => write!(f, "disk full: write refused, nothing was applied"),
            Error::Poisoned => {
                write!(
                    f,
                    "an fsync failed earlier; reads and writes are refused until the database is reopened"
                )
            }
            Error::Locked { path } => {
                write!(f, "database directory {} is locked by another handle or process", path.display())
            }
            Error::Closed => write!(f, "database is closed"),
            Error::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Result alias for holt-core.
pub type Result<T, E = Error> = std::result::Result<T, E>;
