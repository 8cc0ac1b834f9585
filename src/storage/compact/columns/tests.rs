//! Version 5 columns and lists: round trips of every form, and refusal of cut or damaged
//! bytes without a panic.

use super::*;

#[test]
fn pco_writes_the_wrapped_format_version_5_reads() {
    let mut header = Vec::new();
    pco::wrapped::FileCompressor::default()
        .write_header(&mut header)
        .unwrap();
    assert_eq!(header, PCO_WRAPPED_HEADER);
}

fn round_trip<T: ColumnValue>(values: &[T]) -> Vec<u8> {
    let mut out = Vec::new();
    push_column(&mut out, values).unwrap();
    out.push(0xee);
    let mut rest = &out[..];
    let found: Vec<T> = take_column(&mut rest, values.len(), "test").unwrap();
    let bits = |v: &[T]| v.iter().map(|&x| x.bits()).collect::<Vec<_>>();
    assert_eq!(bits(&found), bits(values));
    assert_eq!(rest, [0xee], "the column ends where it should");
    out.pop();
    out
}

#[test]
fn columns_round_trip_in_every_form() {
    assert!(
        round_trip::<u64>(&[]).is_empty(),
        "an empty column takes nothing"
    );
    assert_eq!(round_trip(&[6u64; 360]), [COLUMN_CONSTANT, 6]);
    assert_eq!(round_trip(&[50u64; 1]), [COLUMN_CONSTANT, 50]);
    assert_eq!(round_trip(&[-3i64; 7]), [COLUMN_CONSTANT, 5]);
    assert_eq!(round_trip(&[u64::MAX; 2]).len(), 11);
    assert_eq!(round_trip(&[-0.0f64; 3]).len(), 11);
    round_trip(&[0.0f64, -0.0]);
    round_trip(&[i64::MIN, i64::MAX, 0, -1]);
    let walk: Vec<f64> = (0..500).map(|i| f64::from(i % 37) * 0.25 - 3.0).collect();
    assert_eq!(round_trip(&walk)[0], COLUMN_PCO);
    round_trip(&[f64::NAN, f64::INFINITY, 5e-324]);
}

#[test]
fn lists_round_trip_as_varints() {
    for list in [
        vec![],
        vec![0],
        vec![47],
        vec![0, 1, 2, 1439],
        vec![u32::MAX - 1],
    ] {
        let mut out = Vec::new();
        push_list(&mut out, &list);
        let mut rest = &out[..];
        assert_eq!(take_list(&mut rest, u32::MAX, "test").unwrap(), list);
        assert!(rest.is_empty());
    }
    let mut out = Vec::new();
    push_list(&mut out, &[]);
    assert_eq!(out, [0], "an empty list is one byte");
    push_list(&mut out, &[3, 10]);
    assert_eq!(out, [0, 2, 3, 6]);
}

#[test]
fn cut_or_damaged_columns_and_lists_are_refused() {
    let walk: Vec<f64> = (0..300).map(|i| f64::from(i * 7 % 101) / 100.0).collect();
    let mut column = Vec::new();
    push_column(&mut column, &walk).unwrap();
    for len in 0..column.len() {
        let mut rest = &column[..len];
        assert!(
            take_column::<f64>(&mut rest, walk.len(), "value").is_err(),
            "cut at {len}"
        );
    }
    for at in 0..column.len() {
        let mut bytes = column.clone();
        bytes[at] ^= 0x5a;
        let mut rest = &bytes[..];
        let _ = take_column::<f64>(&mut rest, walk.len(), "value");
    }
    let mut rest = &[7u8, 0][..];
    assert_eq!(
        take_column::<u64>(&mut rest, 3, "count").unwrap_err(),
        "count column of unknown form 7"
    );
    let mut rest = &[COLUMN_CONSTANT, 0x80][..];
    assert_eq!(
        take_column::<u64>(&mut rest, 3, "count").unwrap_err(),
        "count cut short"
    );
    let mut rest = &[2u8, 5, 0][..];
    assert_eq!(take_list(&mut rest, 7, "ghost").unwrap(), [5, 6]);
    let mut rest = &[2u8, 5, 0][..];
    assert_eq!(
        take_list(&mut rest, 6, "ghost").unwrap_err(),
        "ghost list runs past the period"
    );
    let mut rest = &[61u8][..];
    assert_eq!(
        take_list(&mut rest, 60, "ghost").unwrap_err(),
        "61 ghost buckets in 60"
    );
    let mut rest = &[
        1u8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
    ][..];
    assert!(take_list(&mut rest, 60, "ghost").is_err());
}
