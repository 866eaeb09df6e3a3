//! Compile-fail tests: each file under `compile_fail/` breaks one borrow
//! rule of batches (a batch leaving its scope, the segment touched while
//! the device may use it, a lease or list that does not outlive the
//! scope, the engine dropped under an owned batch) and must not compile.

#[test]
fn borrow_rules_are_enforced_by_the_compiler() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
}
