//! Tests of cutting a JSON write's body into elements however the network splits it, and of
//! where a broken body is said to break.

use serde_json::{json, Value};

use super::{sample, ArraySplitter, BodyError, Element, MAX_ELEMENT};

/// Every element of `body` fed in `piece`-byte reads, or the error with the elements before.
fn split(body: &[u8], piece: usize) -> Result<Vec<Value>, (Vec<Value>, BodyError)> {
    let mut splitter = ArraySplitter::new();
    let mut out = Vec::new();
    let mut pieces = body.chunks(piece.max(1));
    loop {
        match pieces.next() {
            Some(data) => splitter.feed(data),
            None => splitter.end(),
        }
        loop {
            match splitter.next() {
                Ok(Some(value)) => out.push(value),
                Ok(None) => break,
                Err(e) => return Err((out, e)),
            }
        }
        if splitter.ended() {
            return Ok(out);
        }
    }
}

#[test]
fn elements_come_whole_however_the_body_is_cut() {
    let body = br#" [ {"series":"a","ts":1,"value":1.5} ,
        {"series":"b","tags":{"k":"v ]"},"ts":"now","value":-2},12345, "x,y" ,[1,[2]] ] "#;
    let expected = vec![
        json!({"series": "a", "ts": 1, "value": 1.5}),
        json!({"series": "b", "tags": {"k": "v ]"}, "ts": "now", "value": -2}),
        json!(12345),
        json!("x,y"),
        json!([1, [2]]),
    ];
    for piece in [1, 2, 3, 7, 16, body.len()] {
        assert_eq!(split(body, piece).unwrap(), expected, "pieces of {piece}");
    }
    assert_eq!(split(b"[]", 1).unwrap(), Vec::<Value>::new());
    assert_eq!(split(b"\n[\n]\n", 2).unwrap(), Vec::<Value>::new());
}

#[test]
fn a_broken_body_says_where_and_keeps_what_came_before() {
    for (body, read, message) in [
        (&b""[..], 0, "the body is empty at byte 0"),
        (
            b"{\"series\":\"a\"}",
            0,
            "expected `[`, found `{` at byte 0",
        ),
        (
            b"[1,2",
            2,
            "the body ends before the array closes at byte 4",
        ),
        (
            b"[1,2,",
            2,
            "the body ends before the array closes at byte 5",
        ),
        (
            b"[1,]",
            1,
            "expected an element after `,`, found `]` at byte 3",
        ),
        (b"[1 2]", 1, "expected `,` or `]`, found `2` at byte 3"),
        (
            b"[1] x",
            1,
            "expected nothing after the array, found `x` at byte 4",
        ),
        (b"[1,{\"a\":tru}]", 1, "expected ident at byte 11"),
        (b"[1,\n{\"a\":\n x}]", 1, "expected value at byte 11"),
        (b"[1,{\"a\":\"b", 1, "EOF while parsing a string at byte 9"),
    ] {
        for piece in [1, 3, body.len()] {
            let (before, e) = split(body, piece).unwrap_err();
            let text = String::from_utf8_lossy(body);
            assert_eq!(before.len(), read, "{text}");
            assert_eq!(e.elements, read, "{text}");
            assert_eq!(e.message, message, "{text} in pieces of {piece}");
        }
    }
}

#[test]
fn an_element_longer_than_the_limit_is_refused_without_holding_more() {
    let long = format!("[1,\"{}\"]", "x".repeat(MAX_ELEMENT + 10));
    let mut splitter = ArraySplitter::new();
    let mut failed = None;
    for data in long.as_bytes().chunks(4096) {
        splitter.feed(data);
        match splitter.next() {
            Ok(_) => {}
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
        assert!(splitter.buf.len() <= MAX_ELEMENT + 2 * 4096);
    }
    let e = failed.expect("refused");
    assert_eq!(e.elements, 1);
    assert_eq!(
        e.message,
        format!("element 2 is longer than {MAX_ELEMENT} bytes at byte 3")
    );
}

#[test]
fn elements_become_samples_or_refusals_as_before() {
    let now = 1_000_000;
    let cases = [
        (
            json!({"series": "a", "tags": {"k": "v"}, "ts": 12.7, "value": 1.0}),
            Element::Sample {
                series: "a{k=v}".into(),
                kind: None,
                ts: 12,
                value: 1.0,
            },
        ),
        (
            json!({"series": "a{k=v}", "ts": "-1m", "value": 2.0, "kind": "counter"}),
            Element::Sample {
                series: "a{k=v}".into(),
                kind: Some(crate::counter::SeriesKind::Counter),
                ts: now - 60,
                value: 2.0,
            },
        ),
        (
            json!({"series": "a", "ts": 1}),
            Element::Refused {
                reason: "invalid_sample",
                message: "missing field `value`".into(),
            },
        ),
        (
            json!({"series": "a", "ts": true, "value": 1.0}),
            Element::Refused {
                reason: "invalid_timestamp",
                message: "ts true is not a time".into(),
            },
        ),
    ];
    for (item, expected) in cases {
        assert_eq!(sample(item.clone(), now, None), expected, "{item}");
    }
    let Element::Refused { reason, .. } =
        sample(json!({"series": "", "ts": 1, "value": 1}), now, None)
    else {
        panic!("an empty name is a sample");
    };
    assert_eq!(reason, "invalid_series");
}

/// The regression: an element trickled a byte per frame was parsed again from its start on
/// every frame, quadratic work on an async worker. Attempts now double the bytes each time.
#[test]
fn an_element_trickled_byte_by_byte_is_parsed_a_logarithmic_number_of_times() {
    let value = "x".repeat(60_000);
    let body = format!(r#"[{{"series":"a","ts":1,"value":1,"pad":"{value}"}}]"#);
    let mut splitter = ArraySplitter::new();
    let mut got = 0;
    for byte in body.as_bytes().chunks(1) {
        splitter.feed(byte);
        while let Ok(Some(_)) = splitter.next() {
            got += 1;
        }
    }
    splitter.end();
    while let Ok(Some(_)) = splitter.next() {
        got += 1;
    }
    assert_eq!(got, 1);
    assert!(splitter.attempts <= 40, "{} attempts", splitter.attempts);
}
