//! Benchmarks of holt-core against embedded engines (and of the gateway against MinIO and a
//! bare HTTP server). Its own package, outside the product's workspace, so that RocksDB, LMDB,
//! SQLite and friends never enter the product's dependency graph.
//!
//! - `data`: the path-shaped key set and values, generated from an index.
//! - `engines`: one adapter per engine behind the `Engine` trait.
//! - `workloads`: the measured phases, shared by the per-engine process and criterion.
//! - `measure`: percentiles, resident memory, bytes on disk.

pub mod data;
pub mod engines;
pub mod measure;
pub mod workloads;
