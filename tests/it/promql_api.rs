//! The Prometheus API under `/prometheus` on a server in the test process (clock at
//! [`NOW`]): Grafana's own requests as fixtures (its Prometheus data source's query_range,
//! instant query, labels, label values, series, metadata and buildinfo calls, with the
//! methods, headers and parameters its source sends) answered in the shape Grafana parses;
//! Prometheus' time and duration grammar; the error envelopes of bad PromQL, unknown
//! functions, raw-only functions without a raw tier, bad parameters, the read budget, the
//! series cap and the timeout; and how Graphite-named series are selected. The values
//! themselves are checked against Prometheus in `promql_oracle.rs`.

use serde_json::Value;
use tierdb::server::Limits;

use crate::common::NOW;
use crate::prom_remote::{body, series};
use crate::support::http::percent_encode;
use crate::support::server::TestServer;

/// An hour of data before [`NOW`]: a gauge per room (a sample every 15 s, 7 s into the
/// beat), a counter rising by 3 per sample.
fn server_with_data(limits: Limits) -> TestServer {
    let server = TestServer::start(None, limits);
    let times: Vec<i64> = (0..240).map(|i| NOW - 3600 + 7 + 15 * i).collect();
    let mut all = Vec::new();
    for (room, base) in [("kitchen", 20.0), ("attic", 30.0)] {
        let samples: Vec<(f64, i64)> = (times.iter().enumerate())
            .map(|(i, &t)| (base + (i % 4) as f64, t * 1000))
            .collect();
        all.push(series(
            &[
                ("__name__", "room_temperature_celsius"),
                ("job", "house"),
                ("room", room),
            ],
            &samples,
        ));
    }
    let counter: Vec<(f64, i64)> = (times.iter().enumerate())
        .map(|(i, &t)| (3.0 * i as f64, t * 1000))
        .collect();
    all.push(series(
        &[
            ("__name__", "http_requests_total"),
            ("code", "200"),
            ("job", "house"),
        ],
        &counter,
    ));
    let headers = [
        ("Content-Type", "application/x-protobuf"),
        ("Content-Encoding", "snappy"),
    ];
    let (status, text) = server.request("POST", "/api/v1/prom/write", &headers, &body(all));
    assert_eq!(status, 204, "{text}");
    // A Graphite-named series, with a tag.
    server
        .engine
        .record("servers.web1.cpu;dc=east", NOW - 90, 42.0)
        .unwrap();
    server.engine.sync().unwrap();
    server.wait_for_series("room_temperature_celsius{job=house,room=attic}");
    server
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A Grafana request: `method path` with its form body, as JSON with its status.
fn grafana(server: &TestServer, method: &str, path: &str, form: &str) -> (u16, Value) {
    let headers: &[(&str, &str)] = match method {
        "POST" => &[
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("Accept", "application/json, text/plain, */*"),
            ("X-Grafana-Org-Id", "1"),
        ],
        _ => &[
            ("Accept", "application/json, text/plain, */*"),
            ("X-Grafana-Org-Id", "1"),
        ],
    };
    let (status, text) = server.request(method, path, headers, form.as_bytes());
    (status, parse(&text))
}

#[test]
fn grafana_requests_are_answered_in_its_shape() {
    let server = server_with_data(Limits::default());
    let (start, end) = (NOW - 1800, NOW - 600);

    // Buildinfo: Grafana reads the version to pick its features.
    let (status, info) = grafana(&server, "GET", "/prometheus/api/v1/status/buildinfo", "");
    assert_eq!(status, 200);
    assert_eq!(info["status"], "success");
    assert_eq!(info["data"]["version"], "2.42.0");

    // A panel's range query, POSTed as a form with step in seconds.
    let form = format!(
        "query={}&start={start}&end={end}&step=60",
        percent_encode(
            "avg by (room) (avg_over_time(room_temperature_celsius{job=\"house\"}[5m]))"
        )
    );
    let (status, answer) = grafana(&server, "POST", "/prometheus/api/v1/query_range", &form);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["data"]["resultType"], "matrix");
    let result = answer["data"]["result"].as_array().unwrap();
    assert_eq!(result.len(), 2);
    assert_eq!(result[0]["metric"], serde_json::json!({"room": "attic"}));
    let values = result[0]["values"].as_array().unwrap();
    assert_eq!(values.len(), 21, "one point per step from start to end");
    // [unix seconds as a number, value as a string]; every 5-minute window holds 20 samples
    // cycling 30, 31, 32, 33.
    assert_eq!(values[0][0], serde_json::json!(start));
    assert_eq!(values[0][1], "31.5");
    assert!(answer.get("warnings").is_none(), "{answer}");

    // The same by GET with a duration step and RFC 3339 times.
    let path = format!(
        "/prometheus/api/v1/query_range?query={}&start=2025-11-21T11:30:00Z&end=2025-11-21T11:50:00.000Z&step=1m",
        percent_encode("avg by (room) (avg_over_time(room_temperature_celsius{job=\"house\"}[5m]))")
    );
    let (status, again) = grafana(&server, "GET", &path, "");
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["data"], answer["data"]);

    // An instant query (Grafana's table and stat panels), POSTed.
    let form = format!(
        "query={}&time={}",
        percent_encode("sum(increase(http_requests_total[10m]))"),
        NOW - 600
    );
    let (status, instant) = grafana(&server, "POST", "/prometheus/api/v1/query", &form);
    assert_eq!(status, 200, "{instant}");
    assert_eq!(instant["data"]["resultType"], "vector");
    let sample = &instant["data"]["result"][0];
    assert_eq!(sample["metric"], serde_json::json!({}));
    assert_eq!(sample["value"][0], serde_json::json!(NOW - 600));
    // 40 samples in the 10 minutes, each 3 more than the one before.
    assert_eq!(sample["value"][1], "120");

    // The metric browser: label names, metric names, a label's values for a metric.
    let (status, labels) = grafana(
        &server,
        "GET",
        &format!("/prometheus/api/v1/labels?start={start}&end={end}"),
        "",
    );
    assert_eq!(status, 200);
    assert_eq!(
        labels["data"],
        serde_json::json!(["__name__", "code", "job", "room"])
    );
    let (_, names) = grafana(
        &server,
        "GET",
        &format!("/prometheus/api/v1/label/__name__/values?start={start}&end={end}"),
        "",
    );
    assert_eq!(
        names["data"],
        serde_json::json!(["http_requests_total", "room_temperature_celsius"])
    );
    let (_, rooms) = grafana(
        &server,
        "GET",
        &format!(
            "/prometheus/api/v1/label/room/values?match[]={}&start={start}&end={end}",
            percent_encode("room_temperature_celsius")
        ),
        "",
    );
    assert_eq!(rooms["data"], serde_json::json!(["attic", "kitchen"]));
    let (_, found) = grafana(
        &server,
        "POST",
        "/prometheus/api/v1/series",
        &format!(
            "match[]={}&start={start}&end={end}",
            percent_encode("{__name__=~\"http.*\"}")
        ),
    );
    assert_eq!(
        found["data"],
        serde_json::json!([{"__name__": "http_requests_total", "code": "200", "job": "house"}])
    );

    // Metadata: the kind tierdb stores, per metric name.
    let (status, metadata) = grafana(&server, "GET", "/prometheus/api/v1/metadata", "");
    assert_eq!(status, 200);
    assert_eq!(
        metadata["data"]["http_requests_total"][0]["type"],
        "counter"
    );
    assert_eq!(
        metadata["data"]["room_temperature_celsius"][0]["type"],
        "gauge"
    );
    let (_, one) = grafana(
        &server,
        "GET",
        "/prometheus/api/v1/metadata?metric=http_requests_total",
        "",
    );
    assert_eq!(one["data"].as_object().unwrap().len(), 1);

    // Exemplars: none kept, an empty list.
    let (status, exemplars) = grafana(
        &server,
        "GET",
        &format!(
            "/prometheus/api/v1/query_exemplars?query=http_requests_total&start={start}&end={end}"
        ),
        "",
    );
    assert_eq!(status, 200);
    assert_eq!(exemplars["data"], serde_json::json!([]));
}

#[test]
fn graphite_names_and_tags_are_labels() {
    let server = server_with_data(Limits::default());
    let at = NOW - 30;
    for query in [
        "{__name__=\"servers.web1.cpu\"}",
        "{__name__=~\"servers\\\\..*\", dc=\"east\"}",
    ] {
        let (status, answer) = grafana(
            &server,
            "GET",
            &format!(
                "/prometheus/api/v1/query?query={}&time={at}",
                percent_encode(query)
            ),
            "",
        );
        assert_eq!(status, 200, "{query}: {answer}");
        assert_eq!(
            answer["data"]["result"],
            serde_json::json!([{"metric": {"__name__": "servers.web1.cpu", "dc": "east"}, "value": [at, "42"]}]),
            "{query}"
        );
    }
}

/// Series PromQL cannot name bare, as the protocols write them: Influx fields (`cpu`'s
/// `usage_user`, stored `cpu.usage_user`) answer to `cpu_usage_user`, Graphite paths are
/// selected by glob with `__graphite__` and keep their paths through functions, and a dotted
/// name in the query text is refused with the selectors that take it.
#[test]
fn influx_fields_and_graphite_paths_by_promql_names() {
    let server = server_with_data(Limits::default());
    let at = NOW - 30;
    let lines = format!(
        "cpu,host=a usage_user=12.5,usage_system=3 {t}\ncpu,host=b usage_user=7 {t}\n",
        t = NOW - 90
    );
    let (status, text) = server.request("POST", "/write?precision=s", &[], lines.as_bytes());
    assert_eq!(status, 204, "{text}");
    server
        .engine
        .record("servers.web2.cpu;dc=west", NOW - 90, 40.0)
        .unwrap();
    server
        .engine
        .record("servers.web1.mem", NOW - 90, 3.0)
        .unwrap();
    server.engine.sync().unwrap();
    server.wait_for_series("cpu.usage_user{host=b}");
    let query = |q: &str| {
        let path = format!(
            "/prometheus/api/v1/query?query={}&time={at}",
            percent_encode(q)
        );
        let (status, answer) = grafana(&server, "GET", &path, "");
        assert_eq!(status, 200, "{q}: {answer}");
        answer["data"]["result"].clone()
    };
    assert_eq!(
        query(r#"sort(cpu_usage_user)"#),
        serde_json::json!([
            {"metric": {"__name__": "cpu_usage_user", "host": "b"}, "value": [at, "7"]},
            {"metric": {"__name__": "cpu_usage_user", "host": "a"}, "value": [at, "12.5"]},
        ])
    );
    assert_eq!(
        query(r#"max_over_time(cpu_usage_user{host="a"}[5m])"#),
        serde_json::json!([{"metric": {"host": "a"}, "value": [at, "12.5"]}])
    );
    assert_eq!(
        query(r#"max_over_time({__graphite__="servers.*.cpu"}[5m])"#),
        serde_json::json!([
            {"metric": {"__name__": "servers.web1.cpu", "dc": "east"}, "value": [at, "42"]},
            {"metric": {"__name__": "servers.web2.cpu", "dc": "west"}, "value": [at, "40"]},
        ])
    );
    // The listings take the same selectors.
    let (status, listed) = grafana(
        &server,
        "GET",
        &format!(
            "/prometheus/api/v1/series?match[]={}",
            percent_encode(r#"{__graphite__="servers.web1.*"}"#)
        ),
        "",
    );
    assert_eq!(status, 200, "{listed}");
    assert_eq!(
        listed["data"],
        serde_json::json!([
            {"__name__": "servers.web1.cpu", "dc": "east"},
            {"__name__": "servers.web1.mem"},
        ])
    );
    let (status, kind, message) = error(&server, &query_path("rate(cpu.usage_user[5m])"));
    assert_eq!((status, kind.as_str()), (400, "bad_data"), "{message}");
    assert!(
        message.contains(r#"{__graphite__="cpu.usage_user"}"#)
            && message.contains(r#"rate({__name__="cpu.usage_user"}[5m])"#),
        "{message}"
    );
}

/// The error envelope of `GET path`: status, `errorType` and the message.
fn error(server: &TestServer, path: &str) -> (u16, String, String) {
    let (status, text) = server.get(path);
    let body = parse(&text);
    assert_eq!(body["status"], "error", "{path}: {text}");
    (
        status,
        body["errorType"].as_str().unwrap().to_owned(),
        body["error"].as_str().unwrap().to_owned(),
    )
}

fn query_path(query: &str) -> String {
    format!(
        "/prometheus/api/v1/query_range?query={}&start={}&end={}&step=60",
        percent_encode(query),
        NOW - 1800,
        NOW - 600
    )
}

#[test]
fn errors_answer_prometheus_envelopes() {
    let server = server_with_data(Limits::default());
    let cases: &[(&str, u16, &str, &str)] = &[
        (
            &query_path("sum(rate(x[5m])"),
            400,
            "bad_data",
            "invalid PromQL",
        ),
        (
            &query_path("no_such_function(x)"),
            400,
            "bad_data",
            "no_such_function",
        ),
        (
            &query_path("double_exponential_smoothing(room_temperature_celsius[10m], 0.5, 0.5)"),
            400,
            "bad_data",
            "not supported",
        ),
        (
            &query_path("irate(room_temperature_celsius[5m])"),
            400,
            "bad_data",
            "raw tier",
        ),
        (
            &query_path("resets(http_requests_total[5m])"),
            400,
            "bad_data",
            "raw tier",
        ),
        (
            &query_path("rate(room_temperature_celsius[5m])"),
            400,
            "bad_data",
            "gauge",
        ),
        (
            "/prometheus/api/v1/query_range?query=up&start=abc&end=1&step=60",
            400,
            "bad_data",
            "invalid parameter \"start\"",
        ),
        (
            "/prometheus/api/v1/query_range?query=up&start=100&end=50&step=60",
            400,
            "bad_data",
            "end timestamp must not be before start time",
        ),
        (
            "/prometheus/api/v1/query_range?query=up&start=0&end=100&step=0",
            400,
            "bad_data",
            "zero or negative query resolution step",
        ),
        (
            "/prometheus/api/v1/query_range?query=up&start=0&end=100000&step=1",
            400,
            "bad_data",
            "exceeded maximum resolution of 11,000 points",
        ),
        (
            "/prometheus/api/v1/series",
            400,
            "bad_data",
            "no match[] parameter provided",
        ),
        (
            "/prometheus/api/v1/series?match[]=sum(x)",
            400,
            "bad_data",
            "not a series selector",
        ),
        (
            "/prometheus/api/v1/query?query=up&timeout=abc",
            400,
            "bad_data",
            "invalid parameter \"timeout\"",
        ),
    ];
    for &(path, status, kind, says) in cases {
        let (got_status, got_kind, message) = error(&server, path);
        assert_eq!(
            (got_status, got_kind.as_str()),
            (status, kind),
            "{path}: {message}"
        );
        assert!(
            message.contains(says),
            "{path}: {message:?} does not say {says:?}"
        );
    }
    // A timeout of nothing at all: Prometheus' timeout error, 503.
    let (status, kind, message) = error(
        &server,
        "/prometheus/api/v1/query?query=room_temperature_celsius&timeout=0s",
    );
    assert_eq!((status, kind.as_str()), (503, "timeout"), "{message}");
    // Rollups answer raw-only functions only with a warning where an approximation exists.
    let (status, text) = server.get(&query_path("irate(http_requests_total[5m])"));
    assert_eq!(status, 200, "{text}");
    let answer = parse(&text);
    let warnings = answer["warnings"].as_array().unwrap();
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .starts_with("approximate: irate"),
        "{answer}"
    );
    // A counter's instant value is its running total; at whole minutes, whose minute holds
    // several samples, the latest after the time, the latest before it, said approximate.
    let (_, text) = server.get(&query_path("http_requests_total"));
    assert!(
        parse(&text)["warnings"][0]
            .as_str()
            .unwrap()
            .starts_with("approximate: http_requests_total: an instant value where the bucket"),
        "{text}"
    );
}

#[test]
fn limits_refuse_whole_queries() {
    // The read budget: 2 gauges x 31 minute buckets of the window fit in 100 values, the
    // 1,000 of a 16-hour range do not; the answer is an error, never part of the data.
    let limits = Limits {
        max_read_values: 100,
        ..Limits::default()
    };
    let server = server_with_data(limits);
    let fits = format!(
        "/prometheus/api/v1/query?query={}&time={}",
        percent_encode("max_over_time(room_temperature_celsius[20m])"),
        NOW - 600
    );
    let (status, text) = server.get(&fits);
    assert_eq!(status, 200, "{text}");
    let over = format!(
        "/prometheus/api/v1/query_range?query={}&start={}&end={}&step=60",
        percent_encode("max_over_time(room_temperature_celsius[5m])"),
        NOW - 57_600,
        NOW - 600
    );
    let (status, kind, message) = error(&server, &over);
    assert_eq!((status, kind.as_str()), (422, "execution"), "{message}");
    assert!(
        message.contains("read budget") && message.contains("--max-read-values"),
        "{message}"
    );
    let (_, metrics) = server.get("/metrics");
    assert!(
        metrics.contains("over_budget"),
        "over-budget refusals are counted"
    );

    // The series cap, over all selectors of a query.
    let limits = Limits {
        max_query_series: 2,
        ..Limits::default()
    };
    let server = server_with_data(limits);
    let (status, text) = server.get(&query_path("room_temperature_celsius"));
    assert_eq!(status, 200, "two series fit: {text}");
    let (status, kind, message) = error(
        &server,
        &query_path(
            "room_temperature_celsius + on() group_left sum(increase(http_requests_total[5m]))",
        ),
    );
    assert_eq!((status, kind.as_str()), (422, "execution"), "{message}");
    assert!(message.contains("--max-query-series"), "{message}");
}

#[test]
fn a_raw_tier_makes_raw_only_functions_exact() {
    let tiers = tierdb::TiersConfig {
        raw: Some(tierdb::RawTierSpec {
            name: "raw".to_string(),
            period: tierdb::Span::from_secs(3600),
            retention: tierdb::Span::from_secs(12 * 3600),
            create_ahead: 1,
            dedupe_unchanged: false,
        }),
        ..tierdb::TiersConfig::default()
    };
    let server = TestServer::with_tiers(tiers, None, Limits::default());
    // A gauge at 10, 25 and 40 s into each of the last 20 minutes: 1, 5, 3.
    for m in 0..20 {
        for (s, v) in [(10, 1.0), (25, 5.0), (40, 3.0)] {
            server
                .engine
                .record("g{host=a}", NOW - 1200 + 60 * m + s, v)
                .unwrap();
        }
    }
    server.engine.sync().unwrap();
    let value = |query: &str| {
        let path = format!(
            "/prometheus/api/v1/query?query={}&time={}",
            percent_encode(query),
            NOW - 60
        );
        let answer = server.json(&path);
        assert!(answer.get("warnings").is_none(), "{query}: {answer}");
        answer["data"]["result"][0]["value"][1]
            .as_str()
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    // The last two samples (5 then 3, 15 s apart): a drop, read by irate as a reset.
    assert_eq!(value("irate(g[2m])"), 0.2);
    assert_eq!(value("idelta(g[2m])"), -2.0);
    assert_eq!(value("changes(g[2m])"), 5.0);
    assert_eq!(value("resets(g[2m])"), 3.0);
    assert_eq!(value("last_over_time(g[2m])"), 3.0);
    assert_eq!(value("quantile_over_time(0.5, g[2m])"), 3.0);
}
