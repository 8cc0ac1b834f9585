//! Tests of the one parameter reader: the last value wins, the body comes after the query
//! string, and a body that is not a form is refused.

use axum::http::HeaderValue;

use super::Params;

#[test]
fn a_repeated_key_takes_its_last_value_and_the_body_comes_last() {
    let params = Params::query(Some("from=-1h&tag=a=1&from=-2h&tag=b%3D2"));
    assert_eq!(params.get("from"), Some("-2h"));
    assert_eq!(params.all("tag").collect::<Vec<_>>(), ["a=1", "b=2"]);
    assert_eq!(params.get("until"), None);
    assert_eq!(Params::query(None).all("tag").count(), 0);

    let form = HeaderValue::from_static("application/x-www-form-urlencoded; charset=utf-8");
    let params = Params::query_and_form(
        Some("target=a&from=-1h"),
        Some(&form),
        b"target=b&from=-2min",
    )
    .unwrap();
    assert_eq!(params.get("from"), Some("-2min"));
    assert_eq!(params.all("target").collect::<Vec<_>>(), ["a", "b"]);
    // No declared type: read as a form, as graphite-web does.
    let params = Params::query_and_form(None, None, b"from=-5min").unwrap();
    assert_eq!(params.get("from"), Some("-5min"));
}

#[test]
fn a_body_of_another_type_is_refused() {
    let json = HeaderValue::from_static("application/json");
    assert!(Params::query_and_form(None, Some(&json), b"{}").is_err());
    // An empty body is no body, whatever its declared type.
    assert!(Params::query_and_form(Some("from=-1h"), Some(&json), b"").is_ok());
}
