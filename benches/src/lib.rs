//! Criterion benchmarks of every a2 store backend; see `benches/`.
