//! A Bloom filter of a delta's keys, kept with its entry index: a point read looks its key
//! up in every delta of an evicted frame, newest first, and most of those lookups miss (a
//! key loaded once lies in one delta or in the image). Without the filter each miss was a
//! binary search over the delta's body, a key read per probe from pages scattered over the
//! mapped file: about a quarter of a point read's time over data eight times the budget
//! (`paired_get --only warm`, 10M keys).
//!
//! The layout of LevelDB's filter: one 32-bit hash per key (its CRC32C), and the probes
//! stepped from it by a rotation of itself, so a lookup hashes its key once.

/// Bits per key: with `PROBES` probes, about 1% of the keys absent answer "maybe".
const BITS_PER_KEY: usize = 10;

/// Probes per key (about `BITS_PER_KEY` × ln 2, the count that minimizes false positives).
const PROBES: u32 = 6;

/// A set of key hashes that answers "absent" or "maybe present"; never "absent" for a key
/// added.
pub(crate) struct KeyFilter {
    words: Vec<u64>,
}

impl KeyFilter {
    /// A filter of `hashes` (`key_hash` of each key).
    pub(crate) fn new(hashes: impl ExactSizeIterator<Item = u32>) -> KeyFilter {
        let bits = (hashes.len() * BITS_PER_KEY).max(64).next_multiple_of(64);
        let mut words = vec![0u64; bits / 64];
        for hash in hashes {
            for bit in probes(hash, bits) {
                words[bit / 64] |= 1 << (bit % 64);
            }
        }
        KeyFilter { words }
    }

    /// Whether the key whose `key_hash` is `hash` may have been added.
    pub(crate) fn may_contain(&self, hash: u32) -> bool {
        let bits = self.words.len() * 64;
        probes(hash, bits).all(|bit| self.words[bit / 64] & (1 << (bit % 64)) != 0)
    }

    /// Heap bytes it holds.
    pub(crate) fn memory(&self) -> usize {
        self.words.len() * size_of::<u64>()
    }
}

/// The bit positions of `hash` in a filter of `bits` bits.
fn probes(hash: u32, bits: usize) -> impl Iterator<Item = usize> {
    let step = hash.rotate_right(17);
    (0..PROBES).map(move |i| hash.wrapping_add(i.wrapping_mul(step)) as usize % bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::key_hash;

    fn key(i: u32) -> Vec<u8> {
        format!("tenant-{:02}/dir-{:03}/file-{i:08}.bin", i % 20, i % 500).into_bytes()
    }

    #[test]
    fn every_key_added_is_found_and_few_absent_ones_are() {
        for n in [0u32, 1, 7, 1_000, 20_000] {
            let filter = KeyFilter::new((0..n).map(|i| key_hash(&key(i))));
            assert!((0..n).all(|i| filter.may_contain(key_hash(&key(i)))), "{n} keys: one added is missed");
            let tries = 20_000u32;
            let false_positives = (n..n + tries).filter(|&i| filter.may_contain(key_hash(&key(i)))).count();
            // About 1% with ten bits a key; a filter of fewer than seven keys has 64 bits.
            let most = if n >= 1_000 { tries as usize / 40 } else { tries as usize / 10 };
            assert!(
                false_positives <= most,
                "{n} keys: {false_positives} of {tries} absent keys answer maybe"
            );
        }
    }
}
