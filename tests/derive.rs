//! The `FinalAnswer` derive refuses what it must refuse: its compile-fail cases
//! (`tests/ui/`), checked against the compiler's messages beside them.

#[test]
fn a_plain_string_field_in_a_final_answer_does_not_compile() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
