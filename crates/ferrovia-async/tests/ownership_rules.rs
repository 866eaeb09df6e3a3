//! Compile-fail tests: each file under `compile_fail/` breaks one rule of
//! async ownership (an operation owns `'static` registered memory; a
//! target is plain memory the engine alone holds; the engine hands back
//! exactly what it was given) and must not compile.

#[test]
fn ownership_rules_are_enforced_by_the_compiler() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
}
