//! holt-core: a persistent adaptive radix tree sliced into self-describing 512 KiB frames.
//!
//! Layers, in dependency order (each imports only what sits above it):
//!
//! | module        | what it holds                                                        |
//! |---------------|----------------------------------------------------------------------|
//! | `format`      | bytes on disk only: frame header, node encodings, WAL record, manifest |
//! | `io`          | the storage trait and its implementations (file, io_uring, simulated) |
//! | `sync`        | latches and the lock-free primitives (the only racy-read code)       |
//! | `buffer`      | the frame cache: load, pin, evict, dirty tracking                    |
//! | `tree`        | the ART: lookup, insert, erase, scan, list with rollup, split, merge |
//! | `wal`         | record codec, the lock-free ring, group commit, replay               |
//! | `checkpoint`  | dirty frames to fresh slots, manifest switch, log truncation          |
//! | `recovery`    | manifest, frames, then log replay on open                            |
//! | `db`          | the public handle                                                    |
//!
//! ```
//! use holt_core::{Db, Options, ListRequest, ListItem};
//! let db = Db::open_in_memory(Options::default()).unwrap();
//! db.put(b"photos/2024/a.jpg", b"{}").unwrap();
//! db.put(b"photos/2025/b.jpg", b"{}").unwrap();
//! db.put(b"photos/readme.txt", b"{}").unwrap();
//! let page = db
//!     .list(&ListRequest { prefix: b"photos/", delimiter: b"/", limit: 1000, ..Default::default() })
//!     .unwrap();
//! let names: Vec<&[u8]> = page.items.iter().map(ListItem::name).collect();
//! assert_eq!(names, [&b"photos/2024/"[..], b"photos/2025/", b"photos/readme.txt"]);
//! ```

#![warn(missing_docs)]

mod api;
mod buffer;
mod checkpoint;
mod db;
mod error;
mod format;
pub mod io;
mod recovery;
mod sync;
#[doc(hidden)]
pub mod testing;
mod tree;
mod wal;

pub use api::*;
pub use db::{Db, Pending};
pub use error::{Error, Location, Result};
