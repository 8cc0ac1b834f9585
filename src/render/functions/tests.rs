//! The dispatch table against itself and the evaluator: every listed function parses its
//! signature, and names in errors are graphite-web's.

use super::table::FUNCTIONS;

#[test]
fn every_signature_parses_and_names_are_unique() {
    let mut names: Vec<&str> = FUNCTIONS.iter().map(|f| f.name).collect();
    let listed = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), listed, "a function is listed twice");
    for f in FUNCTIONS {
        let params = f.params();
        for (i, p) in params.iter().enumerate() {
            assert!(
                !p.name.is_empty() && !p.kind.is_empty(),
                "{}: {p:?}",
                f.name
            );
            assert!(
                !p.multiple || i + 1 == params.len(),
                "{}: only the last parameter repeats",
                f.name
            );
        }
        let required = params.iter().take_while(|p| p.required).count();
        assert!(
            params[required..].iter().all(|p| !p.required),
            "{}: required parameters come first",
            f.name
        );
    }
}
