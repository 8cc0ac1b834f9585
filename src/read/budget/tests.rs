//! Tests of charging a request's read budget.

use super::ReadBudget;

#[test]
fn charges_add_up_and_a_refused_one_takes_nothing() {
    let budget = ReadBudget::new(100);
    budget.charge(60, || "a".into()).unwrap();
    let err = budget.charge(41, || "\"b.*\" matches 41 series x 1 points".into());
    let message = err.unwrap_err().to_string();
    assert!(
        message.contains(
            "read budget: \"b.*\" matches 41 series x 1 points = 41 values on top of the 60"
        ),
        "{message}"
    );
    assert!(message.contains("at most 100"), "{message}");
    assert!(budget.exceeded());
    assert_eq!(budget.used(), 60);
    budget.charge(40, || "c".into()).unwrap();
    assert_eq!(budget.used(), 100);
    assert!(budget.charge(u128::MAX, || "d".into()).is_err());
    assert!(ReadBudget::unlimited()
        .charge(u128::from(u64::MAX), String::new)
        .is_ok());
}
