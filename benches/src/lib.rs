//! Benchmarks for ferrovia. Criterion benches live in `benches/`; the
//! perftest-style tool arrives with the performance work.
