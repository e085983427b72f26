//! The integers the store assigns itself (cursor ids, consumer slots, row
//! indexes) and a fast hasher for them, used where SipHash's resistance to
//! chosen keys buys nothing: callers never choose these keys.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A cursor's identity inside one session's cursor table.
pub(crate) type CursorId = u64;

/// A consumer's slot number in one session (interned by the cursor table).
pub(crate) type ConsumerId = usize;

/// An odd constant with well-spread bits (as in FxHash): multiplying by it
/// moves every input bit into the high bits the hash table probes with.
const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

/// A multiply-rotate hasher for small integer keys. Guarantees: equal
/// inputs hash equally; for one integer the low bits are a bijection of the
/// input's low bits (sequential ids fill distinct buckets) and the high bits
/// are well mixed (the probe tags).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl IdHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.add(u64::from(*byte));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

/// A `HashMap` keyed by store-assigned integers, hashed with [`IdHasher`].
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::hash::BuildHasher;

    #[test]
    fn sequential_ids_land_in_distinct_buckets() {
        let build = BuildHasherDefault::<IdHasher>::default();
        let hashes: Vec<u64> = (0..1024_u64).map(|id| build.hash_one(id)).collect();
        // The table picks a bucket from the low bits: 1024 ids, 1024 buckets.
        let buckets: HashSet<u64> = hashes.iter().map(|hash| hash & 1023).collect();
        assert_eq!(buckets.len(), 1024);
        // It filters probes by the top 7 bits: most of the 128 tags occur.
        let tags: HashSet<u64> = hashes.iter().map(|hash| hash >> 57).collect();
        assert!(tags.len() > 100, "only {} tags used", tags.len());
        let mut map: IdMap<u64, u64> = IdMap::default();
        for id in 0..10_000 {
            map.insert(id, id * 2);
        }
        assert!((0..10_000).all(|id| map.get(&id) == Some(&(id * 2))));
    }
}
