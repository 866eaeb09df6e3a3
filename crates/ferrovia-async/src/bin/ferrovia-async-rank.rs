//! One rank of ferrovia-async's multi-process tests.
fn main() {}
