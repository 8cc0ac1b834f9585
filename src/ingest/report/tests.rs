use super::{IngestReport, FIRST_ERRORS};

#[test]
fn a_report_keeps_the_refusals_of_the_lowest_lines_in_line_order() {
    let mut report = IngestReport::default();
    // Refusals caught while parsing come first; the batch's own come at its flush.
    for line in [3, 9, 14, 20, 21, 22, 23, 24, 25, 26, 27] {
        report.note(line, "invalid_value", || format!("line {line}"));
    }
    for line in [1, 5, 5] {
        report.note(line, "series_limit", String::new);
    }
    let lines: Vec<usize> = report.errors.iter().map(|e| e.line).collect();
    assert_eq!(lines, [1, 3, 5, 5, 9, 14, 20, 21, 22, 23]);
    assert_eq!(lines.len(), FIRST_ERRORS);
    assert_eq!(report.errors[2].reason, "series_limit");
}
