//! Compile-fail tests: each file under `compile_fail/` breaks one borrow
//! rule the scoped API promises, and must not compile.

#[test]
fn borrow_rules_are_enforced_by_the_compiler() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
}
