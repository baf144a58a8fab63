//! The data set every engine receives: path-shaped keys, ~62 B JSON values, a seeded random
//! order. Keys and values are computed from an index on demand, so the benchmark process holds
//! no copy of the data set (its resident memory is the engine's, plus a 4 B/key permutation).

/// Buckets in the main data set (`bucket-040` .. `bucket-044`; `bucket-042` is the one listed).
pub const BUCKETS: u64 = 5;
/// Tenants per bucket (`tenant-00` .. `tenant-19`; `tenant-07` is the one listed).
pub const TENANTS: u64 = 20;
/// First bucket number, so that the listed bucket is `bucket-042`.
pub const BUCKET_BASE: u64 = 40;
/// Directories per tenant (`dir-000` .. `dir-049`), each with `SUBS` sub-directories.
pub const DIRS: u64 = 50;
/// Sub-directories per directory (`sub-0` .. `sub-3`).
pub const SUBS: u64 = 4;
/// Common prefixes in the wide data set: one listing page at `bucket-wide/` is all prefixes.
pub const WIDE_PREFIXES: u64 = 1000;

/// SplitMix64: tiny, seedable, good enough to shuffle and pick keys; identical on every run
/// with the same seed, which is what makes a result reproducible.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0); the modulo bias is below 2^-40 for our n.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "Rng::below needs a non-empty range");
        self.next_u64() % n
    }
}

/// The main data set: `keys` path-shaped keys spread evenly over 5 buckets × 20 tenants.
/// Per tenant, 80% are nested (`dir-NNN/sub-N/file-NNNNNNNN.bin` over 50 × 4 directories) and
/// 20% flat (`object-NNNNNNNN.json`), so a tenant root lists 50 prefixes, then flat keys.
#[derive(Debug, Clone, Copy)]
pub struct DataSet {
    pub keys: u64,
}

impl DataSet {
    pub fn new(keys: u64) -> DataSet {
        assert!(keys >= BUCKETS * TENANTS * 10, "data set too small: {keys} keys");
        DataSet { keys }
    }

    fn per_tenant(&self) -> u64 {
        self.keys / (BUCKETS * TENANTS)
    }

    /// Number of keys actually generated (a multiple of 100).
    pub fn len(&self) -> u64 {
        self.per_tenant() * BUCKETS * TENANTS
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key with index `i` (0 ≤ i < len), written into `out`.
    pub fn key(&self, i: u64, out: &mut Vec<u8>) {
        use std::io::Write;
        let per_tenant = self.per_tenant();
        let tenant_index = i / per_tenant;
        let j = i % per_tenant;
        let bucket = BUCKET_BASE + tenant_index / TENANTS;
        let tenant = tenant_index % TENANTS;
        out.clear();
        // Writing into a Vec cannot fail.
        if j < per_tenant * 8 / 10 {
            let dir = j % DIRS;
            let sub = (j / DIRS) % SUBS;
            let _ =
                write!(out, "bucket-{bucket:03}/tenant-{tenant:02}/dir-{dir:03}/sub-{sub}/file-{i:08}.bin");
        } else {
            let _ = write!(out, "bucket-{bucket:03}/tenant-{tenant:02}/object-{i:08}.json");
        }
    }

    pub fn key_vec(&self, i: u64) -> Vec<u8> {
        let mut k = Vec::with_capacity(64);
        self.key(i, &mut k);
        k
    }

    /// A random directory prefix `bucket-NNN/tenant-NN/dir-NNN/` (holds 80% / 50 of a tenant).
    pub fn random_dir_prefix(&self, rng: &mut Rng) -> Vec<u8> {
        let bucket = BUCKET_BASE + rng.below(BUCKETS);
        let tenant = rng.below(TENANTS);
        let dir = rng.below(DIRS);
        format!("bucket-{bucket:03}/tenant-{tenant:02}/dir-{dir:03}/").into_bytes()
    }

    /// A random tenant root `bucket-NNN/tenant-NN/`.
    pub fn random_tenant_prefix(&self, rng: &mut Rng) -> Vec<u8> {
        let bucket = BUCKET_BASE + rng.below(BUCKETS);
        let tenant = rng.below(TENANTS);
        format!("bucket-{bucket:03}/tenant-{tenant:02}/").into_bytes()
    }

    /// Logical bytes: the sum of key and value lengths over the data set.
    pub fn logical_bytes(&self) -> u64 {
        let mut k = Vec::new();
        let mut total = 0u64;
        for i in 0..self.len() {
            self.key(i, &mut k);
            total += k.len() as u64 + VALUE_LEN as u64;
        }
        total
    }
}

/// The wide data set: `WIDE_PREFIXES` prefixes under `bucket-wide/`, `per_prefix` keys each, so
/// that a delimiter listing at `bucket-wide/` is 1000 common prefixes each hiding many keys.
#[derive(Debug, Clone, Copy)]
pub struct WideSet {
    pub per_prefix: u64,
}

/// Keys under each wide prefix at full size: "thousands of keys" behind every rollup of the
/// page (the issue's rollup-heavy listing), as at 10M keys.
pub const WIDE_KEYS_PER_PREFIX: u64 = 2000;

impl WideSet {
    /// The wide set beside a main set of `main_len` keys: `WIDE_KEYS_PER_PREFIX` per prefix
    /// from 1M main keys up, proportionally fewer below (quick runs).
    pub fn beside(main_len: u64) -> WideSet {
        WideSet { per_prefix: (main_len / 500).clamp(1, WIDE_KEYS_PER_PREFIX) }
    }
    pub fn len(&self) -> u64 {
        WIDE_PREFIXES * self.per_prefix
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn key(&self, i: u64, out: &mut Vec<u8>) {
        use std::io::Write;
        out.clear();
        let user = i % WIDE_PREFIXES;
        let file = i / WIDE_PREFIXES;
        let _ = write!(out, "bucket-wide/user-{user:04}/file-{file:06}.bin");
    }
}

/// Every value is exactly this long (a small JSON object-metadata record).
pub const VALUE_LEN: usize = 62;

/// The value for key index `i` at write generation `generation` (0 = initial load), so that an
/// overwrite really changes the stored bytes.
pub fn value(i: u64, generation: u64, out: &mut Vec<u8>) {
    use std::io::Write;
    out.clear();
    let etag = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ generation;
    let _ = write!(
        out,
        r#"{{"size":{:08},"etag":"{:016x}","mtime":{:010}}}"#,
        (i * 7919 + generation) % 100_000_000,
        etag,
        1_700_000_000 + generation
    );
    debug_assert_eq!(out.len(), VALUE_LEN);
}

/// A Fisher–Yates permutation of `0..n` (the load order and the order of random reads).
pub fn permutation(n: u64, rng: &mut Rng) -> Vec<u32> {
    assert!(n <= u32::MAX as u64, "permutation of {n} does not fit u32 indices");
    let mut order: Vec<u32> = (0..n as u32).collect();
    for i in (1..order.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_shapes_match_the_documented_layout() {
        let d = DataSet::new(1_000_000);
        assert_eq!(d.len(), 1_000_000);
        let k = String::from_utf8(d.key_vec(0)).unwrap();
        assert_eq!(k, "bucket-040/tenant-00/dir-000/sub-0/file-00000000.bin");
        let k = String::from_utf8(d.key_vec(9_999)).unwrap();
        assert_eq!(k, "bucket-040/tenant-00/object-00009999.json");
        // tenant index 47 = bucket 42, tenant 7.
        let k = String::from_utf8(d.key_vec(47 * 10_000 + 13)).unwrap();
        assert!(k.starts_with("bucket-042/tenant-07/dir-013/sub-0/"), "{k}");
    }

    #[test]
    fn values_have_a_fixed_length_and_change_with_generation() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        value(123_456, 0, &mut a);
        value(123_456, 1, &mut b);
        assert_eq!(a.len(), VALUE_LEN);
        assert_eq!(b.len(), VALUE_LEN);
        assert_ne!(a, b);
    }

    #[test]
    fn permutation_is_a_permutation() {
        let mut rng = Rng::new(7);
        let mut p = permutation(1000, &mut rng);
        assert_ne!(p, (0..1000).collect::<Vec<u32>>(), "seed 7 must shuffle");
        p.sort_unstable();
        assert_eq!(p, (0..1000).collect::<Vec<u32>>());
    }

    #[test]
    fn mean_key_length_is_about_fifty_bytes() {
        let d = DataSet::new(100_000);
        let logical = d.logical_bytes();
        let mean_key = logical as f64 / d.len() as f64 - VALUE_LEN as f64;
        assert!((49.0..51.0).contains(&mean_key), "mean key {mean_key}");
    }
}
