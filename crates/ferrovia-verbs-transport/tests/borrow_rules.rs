//! Compile-fail tests: each file under `compile_fail/` breaks one rule the
//! safe API promises (a borrow rule of scoped posting, the shared-memory
//! access model, or an unsafe contract) and must not compile.

#[test]
fn borrow_rules_are_enforced_by_the_compiler() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
}
