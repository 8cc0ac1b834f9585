//! Tests of how `/api/v1/query` names its one series from `series` and `tag` parameters.

use super::series_param;
use crate::server::error::ApiError;
use crate::server::params::Params;

fn series(query: &str) -> Result<String, ApiError> {
    series_param(&Params::query(Some(query)))
}

#[test]
fn tag_parameters_name_the_series_and_an_exclusion_is_refused() {
    assert_eq!(series("series=cpu").unwrap(), "cpu");
    assert_eq!(
        series("series=cpu&tag=host=a&tag=dc=eu").unwrap(),
        "cpu{dc=eu,host=a}"
    );
    assert_eq!(series("series=cpu{host=a}").unwrap(), "cpu{host=a}");
    for (query, needle) in [
        ("series=cpu&tag=host!=a", "\"host!=a\" excludes series"),
        ("series=cpu&tag=host", "tag: "),
        ("series=cpu&tag==a", "tag: "),
        ("tag=host=a", "series: missing"),
    ] {
        match series(query) {
            Err(ApiError::BadRequest(message)) => {
                assert!(message.contains(needle), "{query}: {message}")
            }
            other => panic!("{query}: {other:?}"),
        }
    }
}
