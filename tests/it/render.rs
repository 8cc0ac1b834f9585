//! Graphite's `/render` and `/metrics/find` over a real socket, as Grafana's Graphite data
//! source calls them: recorded Grafana requests answered from fixed data at a manual clock
//! (insta snapshots with the request in the description), the point budget, errors, every
//! find glob, tagged series and the token.

use serde_json::{json, Value};
use tierdb::server::Limits;

use crate::common::NOW;
use crate::support::server::TestServer;

/// Three hours before [`NOW`]: 09:00Z, where the per-minute fixture series start.
const START: i64 = NOW - 3 * 3600;

/// What the fixture writes, as the snapshots' descriptions repeat it.
const FIXTURE: &str = "\
data, minute m = 0..180 from 09:00Z (now = 12:00Z, 2025-11-21):
  servers.web1.cpu  m%10 at :00 and m%10+1 at :30 of each minute (average m%10+0.5)
  servers.web2.cpu  20+m%4
  servers.db1.cpu   40+2*(m%3), no sample when m%30 = 29
  net.bytes         a raw counter kept as a gauge: 600*m, reset to 0 at m = 170
  net.requests      a counter (\"kind\": \"counter\"): 1200*(m+1), reset at m = 170 to 1200
                    and growing 1200 a minute again, so stored increases of 1200 from m = 1
  servers.web1.mem  512 at 11:59; servers.db1 1 at 11:59
  cpu.load{host=a}  0.5 at 11:58, 1.5 at 11:59; cpu.load{host=b} 3 at 11:59";

/// A server holding [`FIXTURE`], written through the JSON write endpoint.
fn server_with_data(token: Option<&str>) -> TestServer {
    let server = TestServer::start(token, Limits::default());
    let sample =
        |series: &str, ts: i64, value: f64| json!({"series": series, "ts": ts, "value": value});
    let mut samples = Vec::new();
    for m in 0..180i64 {
        let t = START + 60 * m;
        samples.push(sample("servers.web1.cpu", t, (m % 10) as f64));
        samples.push(sample("servers.web1.cpu", t + 30, (m % 10 + 1) as f64));
        samples.push(sample("servers.web2.cpu", t, (20 + m % 4) as f64));
        if m % 30 != 29 {
            samples.push(sample("servers.db1.cpu", t, (40 + 2 * (m % 3)) as f64));
        }
        let bytes = if m < 170 { 600 * m } else { 600 * (m - 170) };
        samples.push(sample("net.bytes", t, bytes as f64));
        let requests = if m < 170 {
            1200 * (m + 1)
        } else {
            1200 * (m - 169)
        };
        samples
            .push(json!({"series": "net.requests", "ts": t, "value": requests, "kind": "counter"}));
    }
    samples.push(sample("servers.web1.mem", NOW - 60, 512.0));
    samples.push(sample("servers.db1", NOW - 60, 1.0));
    for (host, ts, value) in [
        ("a", NOW - 120, 0.5),
        ("a", NOW - 60, 1.5),
        ("b", NOW - 60, 3.0),
    ] {
        samples
            .push(json!({"series": "cpu.load", "tags": {"host": host}, "ts": ts, "value": value}));
    }
    let body = serde_json::to_vec(&samples).unwrap();
    let bearer = token.map(|t| format!("Bearer {t}"));
    let auth: Vec<(&str, &str)> = bearer
        .iter()
        .map(|b| ("Authorization", b.as_str()))
        .collect();
    let (status, text) = server.request("POST", "/api/v1/write", &auth, &body);
    assert_eq!(status, 204, "{text}");
    server
}

/// The headers Grafana's POSTs carry.
const FORM: &[(&str, &str)] = &[("Content-Type", "application/x-www-form-urlencoded")];

/// JavaScript's `encodeURIComponent`, with which Grafana encodes each parameter value.
fn encode_uri_component(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => (b as char).to_string(),
            b'-' | b'_' | b'.' | b'!' | b'~' | b'*' | b'\'' | b'(' | b')' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A `/render` body as Grafana 10 builds it: each query wrapped in `aliasSub` that appends
/// its refId (A, B, ...), then `from`, `until`, `format=json`, `maxDataPoints`.
fn grafana_body(queries: &[&str], from: &str, until: &str, max_data_points: u32) -> String {
    let mut params: Vec<String> = (queries.iter().zip('A'..))
        .map(|(query, ref_id)| {
            let wrapped = format!(r#"aliasSub({query}, "(^.*$)", "\1 {ref_id}")"#);
            format!("target={}", encode_uri_component(&wrapped))
        })
        .collect();
    params.push(format!("from={}", encode_uri_component(from)));
    params.push(format!("until={}", encode_uri_component(until)));
    params.push("format=json".to_owned());
    params.push(format!("maxDataPoints={max_data_points}"));
    params.join("&")
}

/// POSTs `body` to /render as Grafana does; the answer must be 200 and JSON.
fn render(server: &TestServer, body: &str) -> Value {
    let (status, text) = server.request("POST", "/render", FORM, body.as_bytes());
    assert_eq!(status, 200, "{body}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e} in {text}"))
}

/// A render answer as JSON with six datapoints to a line, so a snapshot of hundreds of
/// points stays readable.
fn pretty(answer: &Value) -> String {
    let mut out = String::from("[\n");
    let series = answer.as_array().expect("an array of series");
    for (i, s) in series.iter().enumerate() {
        out.push_str(&format!("  {{\n    \"target\": {},\n", s["target"]));
        let points: Vec<String> = (s["datapoints"].as_array().unwrap().iter())
            .map(|p| format!("[{}, {}]", p[0], p[1]))
            .collect();
        if points.is_empty() {
            out.push_str("    \"datapoints\": []\n");
        } else {
            out.push_str("    \"datapoints\": [\n");
            let lines: Vec<String> = (points.chunks(6))
                .map(|line| format!("      {}", line.join(", ")))
                .collect();
            out.push_str(&lines.join(",\n"));
            out.push_str("\n    ]\n");
        }
        out.push_str(if i + 1 < series.len() {
            "  },\n"
        } else {
            "  }\n"
        });
    }
    out.push(']');
    let reparsed: Value = serde_json::from_str(&out).expect("pretty() writes JSON");
    assert_eq!(&reparsed, answer, "pretty() changed the answer");
    out
}

macro_rules! snapshot {
    ($name:expr, $request:expr, $answer:expr) => {
        insta::with_settings!({
            description => format!("{}\n\n{FIXTURE}", $request),
            omit_expression => true,
        }, {
            insta::assert_snapshot!($name, pretty($answer));
        });
    };
}

/// `(target, number of points)` of each series.
fn shape(answer: &Value) -> Vec<(String, usize)> {
    (answer.as_array().unwrap().iter())
        .map(|s| {
            let target = s["target"].as_str().unwrap().to_owned();
            (target, s["datapoints"].as_array().unwrap().len())
        })
        .collect()
}

#[test]
fn grafana_panel_with_alias_sub_refid() {
    let server = server_with_data(None);
    // Recorded from Grafana 10's Graphite data source: a panel of query A over the last 6 h.
    let body = "target=aliasSub(servers.web1.cpu%2C%20%22(%5E.*%24)%22%2C%20%22%5C1%20A%22)\
                &from=-6h&until=now&format=json&maxDataPoints=1234";
    assert_eq!(
        body,
        grafana_body(&["servers.web1.cpu"], "-6h", "now", 1234)
    );
    let answer = render(&server, body);
    // 1m buckets after 06:00 up to and including 12:00 (graphite-web's window): 360, the
    // first 179 before the data starts, the last (12:00) not yet written.
    assert_eq!(shape(&answer), [("servers.web1.cpu A".to_owned(), 360)]);
    assert_eq!(
        answer[0]["datapoints"][0],
        json!([null, NOW - 6 * 3600 + 60])
    );
    assert_eq!(answer[0]["datapoints"][179], json!([0.5, START]));
    assert_eq!(answer[0]["datapoints"][359], json!([null, NOW]));
    snapshot!(
        "grafana_alias_sub",
        format!("POST /render\n{body}"),
        &answer
    );
}

#[test]
fn grafana_save_and_test() {
    let server = server_with_data(None);
    // As the task recorded it, and as Grafana 10 sends it (query wrapped in aliasSub, times
    // as unix seconds).
    let plain = "target=constantLine(100)&from=-1h&until=now&format=json&maxDataPoints=300";
    let answer = render(&server, plain);
    assert_eq!(
        answer,
        json!([{"target": "100.0", "datapoints": [
            [100.0, NOW - 3600], [100.0, NOW - 1800], [100.0, NOW]
        ]}])
    );
    let grafana10 = grafana_body(
        &["constantLine(100)"],
        &(NOW - 3600).to_string(),
        &NOW.to_string(),
        300,
    );
    let answer = render(&server, &grafana10);
    snapshot!(
        "grafana_save_and_test",
        format!("POST /render\n{grafana10}"),
        &answer
    );
}

#[test]
fn grafana_panel_of_functions() {
    let server = server_with_data(None);
    let queries = [
        "sumSeries(servers.*.cpu)",
        "perSecond(net.bytes)",
        r#"alias(scale(servers.db1.cpu, 0.5), "db half")"#,
        r#"summarize(servers.web1.cpu, "1h", "max")"#,
        "perSecond(net.requests)",
    ];
    let body = grafana_body(
        &queries,
        &(NOW - 2 * 3600).to_string(),
        &NOW.to_string(),
        1234,
    );
    let answer = render(&server, &body);
    assert_eq!(
        shape(&answer),
        [
            ("sumSeries(servers.*.cpu) A".to_owned(), 120),
            ("perSecond(net.bytes) B".to_owned(), 120),
            ("db half C".to_owned(), 120),
            (
                r#"summarize(servers.web1.cpu, "1h", "max") D"#.to_owned(),
                3
            ),
            ("perSecond(net.requests) E".to_owned(), 120),
        ]
    );
    // Points after 10:00 up to and including 12:00. The last minute with data: web1 9.5 +
    // web2 23, db1 has no sample (m = 179); 12:00 itself is not written yet.
    assert_eq!(answer[0]["datapoints"][118], json!([32.5, NOW - 60]));
    assert_eq!(answer[0]["datapoints"][119], json!([null, NOW]));
    // 600 per minute is 10/s (the first point has no previous one); the reset at m = 170 is
    // null, not negative.
    assert_eq!(answer[1]["datapoints"][0], json!([null, NOW - 7140]));
    assert_eq!(answer[1]["datapoints"][1], json!([10.0, NOW - 7080]));
    assert_eq!(answer[1]["datapoints"][109], json!([null, NOW - 600]));
    // summarize max is the true max of the samples (m%10+1 = 10), not of minute averages;
    // its windows run to the one holding the series' end (12:00, empty).
    assert_eq!(answer[3]["datapoints"][0], json!([10.0, NOW - 7200]));
    assert_eq!(answer[3]["datapoints"][2], json!([null, NOW]));
    // A counter's rate is its stored increase over the step: 1200 a minute is 20/s, the
    // first point included, and the reset is no gap.
    let rates = answer[4]["datapoints"].as_array().unwrap();
    assert!(
        rates[..119].iter().all(|p| p[0] == json!(20.0)),
        "{}",
        answer[4]
    );
    let request = format!(
        "POST /render\n{body}\n\ndecoded targets:\n{}",
        queries.join("\n")
    );
    snapshot!("grafana_panel_functions", request, &answer);
}

#[test]
fn no_series_is_longer_than_max_data_points() {
    let server = server_with_data(None);
    let targets = [
        "servers.*.cpu",
        "sumSeries(servers.*.cpu)",
        r#"summarize(servers.web1.cpu, "10min", "avg")"#,
        "perSecond(net.bytes)",
        "perSecond(net.requests)",
        "constantLine(1)",
    ];
    for from in ["-2h", "-6h", "-3d", "-30d", "-400d"] {
        for max in [1, 2, 7, 100, 1234] {
            let body = grafana_body(&targets, from, "now", max);
            let answer = render(&server, &body);
            for (target, points) in shape(&answer) {
                assert!(
                    points <= max as usize,
                    "{from} max {max}: {target} has {points}"
                );
            }
            assert_eq!(
                answer.as_array().unwrap().len(),
                8,
                "{from} {max}: {answer}"
            );
        }
    }
    // 2 h within 1 point: every 1m point of the range into one, stamped at the first
    // (10:01): web2's 20+m%4 over m = 61..179, merged exactly (2560 / 119).
    let answer = render(
        &server,
        "target=servers.web2.cpu&from=-2h&until=now&format=json&maxDataPoints=1",
    );
    assert_eq!(
        answer,
        json!([{"target": "servers.web2.cpu", "datapoints": [[2560.0 / 119.0, NOW - 7140]]}])
    );
}

/// The two panels the issue measured against graphite-web 1.1.8 (whisper archives of 1m,
/// 5m, 1h and 1d holding the same samples): graphite-web reads the finest archive holding
/// `from` and consolidates `ceil(points / maxDataPoints)` points into one, each window
/// starting a point before its stamp, the stamps at multiples of the wider step.
#[test]
fn panels_have_graphite_webs_points() {
    let server = server_with_data(None);
    let points = |body: &str| -> Vec<(Option<f64>, i64)> {
        let answer = render(&server, body);
        assert_eq!(answer.as_array().unwrap().len(), 1, "{answer}");
        serde_json::from_value(answer[0]["datapoints"].clone()).unwrap()
    };
    // "Last 7 days" at maxDataPoints=1500: 2016 five-minute points into 1008, 600 s apart,
    // the pair (t - 300, t) stamped t. At 09:00 the pair holds 08:55 (empty) and 09:00
    // (m = 0..4: 20, 21, 22, 23, 20); at 09:10, m = 5..14; at 12:00, m = 175..179 and the
    // unwritten 12:00 bucket.
    let week = points("target=servers.web2.cpu&from=-7d&until=now&maxDataPoints=1500");
    assert_eq!(week.len(), 1008);
    assert_eq!(week[0], (None, NOW - 7 * 86_400 + 600));
    assert!(week.windows(2).all(|w| w[1].1 - w[0].1 == 600));
    let at = |t: i64| week[((t - week[0].1) / 600) as usize];
    assert_eq!(at(START - 600), (None, START - 600));
    assert_eq!(at(START), (Some(106.0 / 5.0), START));
    assert_eq!(at(START + 600), (Some(215.0 / 10.0), START + 600));
    assert_eq!(week[1007], (Some(109.0 / 5.0), NOW));
    // "Last 6 hours" at maxDataPoints=100: 360 minutes, four into one, 90 points 240 s
    // apart. The first point after 06:00 is 06:01 (06:00 is 60 past a multiple of 240),
    // so the first stamp is 06:04 and the two minutes before its window are dropped; each
    // window holds the minute before its stamp and the three from it.
    let six = points("target=servers.web1.cpu&from=-6h&until=now&maxDataPoints=100");
    assert_eq!(six.len(), 90);
    assert_eq!(six[0], (None, NOW - 6 * 3600 + 240));
    assert!(six.windows(2).all(|w| w[1].1 - w[0].1 == 240));
    // 09:00's window: 08:59 (empty) and m = 0, 1, 2, whose samples are 0,1 / 1,2 / 2,3.
    let nine = ((START - six[0].1) / 240) as usize;
    assert_eq!(six[nine], (Some(9.0 / 6.0), START));
    // 12:00's: m = 179 (samples 9 and 10) and 12:00 itself.
    assert_eq!(six[89], (Some(9.5), NOW));
    // The points before consolidation, for the record: 2016 and 360.
    let full = points("target=servers.web2.cpu&from=-7d&until=now&maxDataPoints=2016");
    assert_eq!((full.len(), full[0].1), (2016, NOW - 7 * 86_400 + 300));
}

/// sumSeries and kin over plain paths (read in the aggregate's one pass) equal the naive
/// model: the same function applied point by point to the paths' own rendered series,
/// nulls skipped; for gauges, a counter, and a glob mixing both (which takes the
/// series-by-series path).
#[test]
fn series_aggregates_equal_the_model_of_their_series() {
    let server = server_with_data(None);
    let window = "from=-3h&until=now&maxDataPoints=1000";
    for glob in [
        "servers.*.cpu",
        "net.requests",
        "net.*",
        "servers.{web1,db1}.cpu",
    ] {
        let plain = render(&server, &format!("target={glob}&{window}"));
        let series: Vec<Vec<(Option<f64>, i64)>> = (plain.as_array().unwrap().iter())
            .map(|s| serde_json::from_value(s["datapoints"].clone()).unwrap())
            .collect();
        assert!(!series.is_empty(), "{glob}");
        type Reduce = fn(&[f64]) -> f64;
        let functions: [(&str, Reduce); 4] = [
            ("sumSeries", |v| v.iter().sum()),
            ("averageSeries", |v| v.iter().sum::<f64>() / v.len() as f64),
            ("maxSeries", |v| v.iter().copied().fold(f64::MIN, f64::max)),
            ("minSeries", |v| v.iter().copied().fold(f64::MAX, f64::min)),
        ];
        for (function, reduce) in functions {
            let want: Vec<(Option<f64>, i64)> = (0..series[0].len())
                .map(|i| {
                    let known: Vec<f64> = series.iter().filter_map(|s| s[i].0).collect();
                    ((!known.is_empty()).then(|| reduce(&known)), series[0][i].1)
                })
                .collect();
            let target = format!("{function}({glob})");
            let answer = render(
                &server,
                &format!("target={}&{window}", encode_uri_component(&target)),
            );
            assert_eq!(answer[0]["target"], json!(target));
            let got: Vec<(Option<f64>, i64)> =
                serde_json::from_value(answer[0]["datapoints"].clone()).unwrap();
            assert_eq!(got, want, "{target}");
        }
    }
}

/// Every endpoint that takes its parameters from a form body too refuses a body of another
/// Content-Type with 400 naming it (the Prometheus API in its own envelope), and answers
/// the same request sent as a form.
#[test]
fn a_body_that_is_not_a_form_is_refused_by_every_api() {
    let server = server_with_data(None);
    let json_body: &[(&str, &str)] = &[("Content-Type", "application/json")];
    let endpoints: [(&str, &[u8]); 7] = [
        ("/render", b"target=servers.web2.cpu&from=-2min&format=json"),
        ("/metrics/find", b"query=servers.*"),
        ("/tags/findSeries", b"expr=name=servers.web2.cpu"),
        ("/tags/autoComplete/tags", b"expr=name=servers.web2.cpu"),
        ("/query", b"q=CREATE DATABASE telegraf"),
        ("/prometheus/api/v1/query", b"query=1"),
        ("/prometheus/api/v1/labels", b"match[]=up"),
    ];
    for (path, form) in endpoints {
        let (status, text) = server.request("POST", path, json_body, form);
        assert_eq!(status, 400, "{path}: {text}");
        assert!(text.contains("application/json"), "{path}: {text}");
        let (status, text) = server.request("POST", path, FORM, form);
        assert_eq!(status, 200, "{path}: {text}");
    }
    let (_, text) = server.request("POST", "/prometheus/api/v1/query", json_body, b"query=1");
    let answer: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e} in {text}"));
    assert_eq!(
        (&answer["status"], &answer["errorType"]),
        (&json!("error"), &json!("bad_data")),
        "{text}"
    );
}

#[test]
fn get_and_post_parameters_merge() {
    let server = server_with_data(None);
    // GET with every parameter in the query string, including those Grafana adds.
    let (status, text) = server.get(
        "/render?target=servers.web2.cpu&from=-2min&until=now&format=json\
         &noCache=true&cacheTimeout=60&_salt=1700000000.123&rawData=false",
    );
    assert_eq!(status, 200, "{text}");
    // Points after `from` up to and including `until`: 11:59 and the unwritten 12:00.
    let expected = json!([{"target": "servers.web2.cpu", "datapoints": [
        [23.0, NOW - 60], [null, NOW]
    ]}]);
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), expected);
    // Query string and body together: targets from both, the body's `from` wins.
    let (status, text) = server.request(
        "POST",
        "/render?target=servers.web2.cpu&from=-1h",
        FORM,
        b"target=servers.web1.mem&from=-2min&until=now",
    );
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        shape(&answer),
        [
            ("servers.web2.cpu".to_owned(), 2),
            ("servers.web1.mem".to_owned(), 2)
        ]
    );
    assert_eq!(answer[1]["datapoints"][0], json!([512.0, NOW - 60]));
    // No target: an empty list, as graphite-web answers.
    assert_eq!(render(&server, "from=-1h&until=now&format=json"), json!([]));
    // A pattern that matches nothing: no series.
    assert_eq!(render(&server, "target=nothing.here.*&from=-1h"), json!([]));
    // A series with no data in range: its points, all null.
    let answer = render(&server, "target=servers.web1.mem&from=-5min&until=-3min");
    assert_eq!(
        answer,
        json!([{"target": "servers.web1.mem", "datapoints": [
            [null, NOW - 240], [null, NOW - 180]
        ]}])
    );
}

#[test]
fn counters_render_increases_and_rates_from_stored_increases() {
    let server = server_with_data(None);
    let window = "from=-3min&until=now";
    let render_one = |target: &str| {
        let answer = render(&server, &format!("target={target}&{window}"));
        assert_eq!(answer.as_array().unwrap().len(), 1, "{target}: {answer}");
        answer[0]["datapoints"].clone()
    };
    // 11:58, 11:59 and the unwritten 12:00.
    let minutes = |value: f64| json!([[value, NOW - 120], [value, NOW - 60], [null, NOW]]);
    // A counter's point is the increase within it; the reset at m = 170 is no dip.
    assert_eq!(render_one("net.requests"), minutes(1200.0));
    // perSecond is the increase over the step, nonNegativeDerivative the increase itself.
    assert_eq!(render_one("perSecond(net.requests)"), minutes(20.0));
    assert_eq!(
        render_one("nonNegativeDerivative(net.requests)"),
        minutes(1200.0)
    );
    // The first sample only sets the baseline: no increase is known in its minute.
    let answer = render(&server, "target=net.requests&from=-181min&until=-178min");
    assert_eq!(
        answer[0]["datapoints"],
        json!([[null, START], [1200.0, START + 60], [1200.0, START + 120]])
    );
    // Consolidated points average the increases, as graphite-web's json renderer averages
    // points by default: each stays the increase a minute at every zoom. Three points for
    // 180 minutes after 09:00: sixty into one, stamped 10:00, 11:00 and 12:00, each window
    // from the minute before its stamp (so 09:01 to 09:58 are dropped): m = 59..118,
    // m = 119..178, then m = 179 with the unwritten 12:00. The last window holds one
    // minute: as a sum (72,000 ... 72,000, 1,200) it read as a drop; as graphite-web's
    // average it is 1,200 like the others. perSecond is taken before consolidating, as
    // graphite-web does: 20/s a minute, averaged.
    let hourly = |target: &str| {
        let body = format!("target={target}&from=-3h&until=now&maxDataPoints=3");
        render(&server, &body)[0]["datapoints"].clone()
    };
    let hours =
        |full: f64, last: f64| json!([[full, START + 3600], [full, START + 7200], [last, NOW]]);
    assert_eq!(hourly("net.requests"), hours(1200.0, 1200.0));
    assert_eq!(hourly("perSecond(net.requests)"), hours(20.0, 20.0));
    // summarize by sum keeps increases (59 minutes in the first hour after 10:00, and an
    // empty window for 12:00); a sum of counters too.
    let answer = render(
        &server,
        "target=summarize(net.requests, \"1h\", \"sum\")&from=-2h&until=now",
    );
    assert_eq!(
        answer[0]["datapoints"],
        json!([[70_800.0, NOW - 7200], [72_000.0, NOW - 3600], [null, NOW]])
    );
    let answer = render(
        &server,
        "target=perSecond(sumSeries(net.requests, net.requests))&from=-2min&until=-1min",
    );
    assert_eq!(answer[0]["datapoints"], json!([[40.0, NOW - 60]]));
}

#[test]
fn render_errors_answer_400_naming_the_problem() {
    let server = server_with_data(None);
    let cases: &[(&str, &[&str])] = &[
        (
            "target=nosuchFunction(servers.web1.cpu)&from=-1h",
            &["nosuchFunction"],
        ),
        (
            "target=servers.web1.cpu&from=yesterday-ish",
            &["from", "yesterday-ish"],
        ),
        ("target=servers.web1.cpu&until=soon", &["until", "soon"]),
        ("target=servers.web1.cpu&format=png", &["format", "png"]),
        (
            "target=servers.web1.cpu&maxDataPoints=lots",
            &["maxDataPoints", "lots"],
        ),
        (
            "target=servers.web1.cpu&maxDataPoints=0",
            &["maxDataPoints"],
        ),
        // An empty range, which graphite-web refuses too ("Invalid empty time range").
        (
            "target=servers.web1.cpu&from=-1h&until=-60min",
            &["from", "until"],
        ),
        (
            "target=sumSeries(servers.web1.cpu&from=-1h",
            &["missing `)`"],
        ),
        (
            "target=summarize(servers.web1.cpu, \"1h\", \"mean\")",
            &["summarize", "argument 3 (func)", "mean"],
        ),
    ];
    for (body, needles) in cases {
        let (status, text) = server.request("POST", "/render", FORM, body.as_bytes());
        assert_eq!(status, 400, "{body}: {text}");
        let error = serde_json::from_str::<Value>(&text).unwrap()["error"]
            .as_str()
            .unwrap()
            .to_owned();
        for needle in *needles {
            assert!(error.contains(needle), "{body}: {error:?} lacks {needle:?}");
        }
    }
    // graphite-web's image formats: tierdb draws charts with `tierdb plot`, and says so.
    let (status, text) = server.get("/render?target=servers.web1.cpu&format=svg");
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("svg") && text.contains("tierdb plot"),
        "{text}"
    );
    let json_body = [("Content-Type", "application/json")];
    let (status, text) = server.request("POST", "/render", &json_body, b"{\"target\":\"x\"}");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("application/json"), "{text}");

    // csv repeats the name on every point and is not consolidated: a long alias over about
    // 950,000 generated points would build over half a gigabyte, so it is refused before
    // anything is written; the same target as json (consolidated) answers.
    let name = "x".repeat(300);
    let huge = format!("target=alias(timeFunction(\"t\",1),\"{name}\")&from=-11d&format=csv");
    let (status, text) = server.request("POST", "/render", FORM, huge.as_bytes());
    assert_eq!(status, 413, "{}", &text[..text.len().min(300)]);
    assert!(
        text.contains("format=csv") && text.contains("maxDataPoints"),
        "{text}"
    );
    let json = huge.replace("format=csv", "format=json");
    let (status, text) = server.request("POST", "/render", FORM, json.as_bytes());
    assert_eq!(status, 200, "{}", &text[..text.len().min(300)]);
}

#[test]
fn find_every_glob_form() {
    let server = server_with_data(None);
    let branch = |id: &str| {
        let text = id.rsplit('.').next().unwrap();
        json!({"text": text, "id": id, "leaf": 0, "expandable": 1, "allowChildren": 1})
    };
    let leaf = |id: &str, text: &str| json!({"text": text, "id": id, "leaf": 1, "expandable": 0, "allowChildren": 0});
    let cases = [
        (
            "*",
            json!([branch("cpu"), branch("net"), branch("servers")]),
        ),
        (
            "servers.*",
            json!([
                branch("servers.db1"),
                leaf("servers.db1", "db1"),
                branch("servers.web1"),
                branch("servers.web2")
            ]),
        ),
        (
            "servers.web?",
            json!([branch("servers.web1"), branch("servers.web2")]),
        ),
        (
            "servers.web[12]",
            json!([branch("servers.web1"), branch("servers.web2")]),
        ),
        ("servers.web[!1]", json!([branch("servers.web2")])),
        (
            "servers.{web1,db1}.*",
            json!([
                leaf("servers.db1.cpu", "cpu"),
                leaf("servers.web1.cpu", "cpu"),
                leaf("servers.web1.mem", "mem")
            ]),
        ),
        (
            "servers.*.c*",
            json!([
                leaf("servers.db1.cpu", "cpu"),
                leaf("servers.web1.cpu", "cpu"),
                leaf("servers.web2.cpu", "cpu")
            ]),
        ),
        (
            "cpu.*",
            json!([
                leaf("cpu.load;host=a", "load;host=a"),
                leaf("cpu.load;host=b", "load;host=b")
            ]),
        ),
        (
            "cpu.load;host=b",
            json!([leaf("cpu.load;host=b", "load;host=b")]),
        ),
        ("net.bytes", json!([leaf("net.bytes", "bytes")])),
        ("nothing.*", json!([])),
    ];
    for (query, expected) in cases {
        let path = format!("/metrics/find?query={}", encode_uri_component(query));
        assert_eq!(server.json(&path), expected, "{query}");
    }
}

#[test]
fn find_by_form_post_as_grafana_sends_it() {
    let server = server_with_data(None);
    // Grafana 10 POSTs the query unencoded in a form body, with from/until in the URL.
    let path = format!("/metrics/find?from={}&until={}", NOW - 21_600, NOW);
    let (status, text) = server.request("POST", &path, FORM, b"query=servers.{web1,db1}.*");
    assert_eq!(status, 200, "{text}");
    let ids: Vec<String> = (serde_json::from_str::<Value>(&text)
        .unwrap()
        .as_array()
        .unwrap())
    .iter()
    .map(|n| n["id"].as_str().unwrap().to_owned())
    .collect();
    assert_eq!(
        ids,
        ["servers.db1.cpu", "servers.web1.cpu", "servers.web1.mem"]
    );
    // The trailing-slash form graphite-web also answers, and GET.
    let (status, text) = server.request("POST", "/metrics/find/", FORM, b"query=net.*");
    assert_eq!(status, 200, "{text}");
    let expected = json!([
        {"text": "bytes", "id": "net.bytes", "leaf": 1, "expandable": 0, "allowChildren": 0},
        {"text": "requests", "id": "net.requests", "leaf": 1, "expandable": 0, "allowChildren": 0}
    ]);
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), expected);
    assert_eq!(server.json("/metrics/find/?query=net.*"), expected);
    // Errors: no query, an unsupported format, a bad pattern.
    for (path, needle) in [
        ("/metrics/find", "query"),
        ("/metrics/find?query=*&format=completer", "completer"),
        ("/metrics/find?query=a;b", "tag expression"),
    ] {
        let (status, text) = server.get(path);
        assert_eq!(status, 400, "{path}: {text}");
        assert!(text.contains(needle), "{path}: {text}");
    }
}

#[test]
fn tagged_series_render_under_their_graphite_path() {
    let server = server_with_data(None);
    let body = "target=cpu.load;host=a&from=-3min&until=-1min";
    assert_eq!(
        render(&server, body),
        json!([{"target": "cpu.load;host=a", "datapoints": [
            [0.5, NOW - 120], [1.5, NOW - 60]
        ]}])
    );
    // The bare name selects every tag set; tag expressions filter; encoded `;` works too.
    let all = render(&server, "target=cpu.load&from=-2min&until=-1min");
    assert_eq!(
        all,
        json!([
            {"target": "cpu.load;host=a", "datapoints": [[1.5, NOW - 60]]},
            {"target": "cpu.load;host=b", "datapoints": [[3.0, NOW - 60]]}
        ])
    );
    let not_a = render(
        &server,
        "target=cpu.load%3Bhost!%3Da&from=-2min&until=-1min",
    );
    assert_eq!(
        not_a,
        json!([{"target": "cpu.load;host=b", "datapoints": [[3.0, NOW - 60]]}])
    );
    let sum = render(
        &server,
        "target=sumSeries(cpu.load;host=*)&from=-2min&until=-1min",
    );
    assert_eq!(
        sum,
        json!([{"target": "sumSeries(cpu.load;host=*)", "datapoints": [[4.5, NOW - 60]]}])
    );
    // The series the engine holds under its own name.
    assert!(server.engine.registry().get("cpu.load{host=a}").is_some());
}

#[test]
fn render_and_find_need_the_token_when_one_is_set() {
    let server = server_with_data(Some("s3cret"));
    let body = b"target=servers.web2.cpu&from=-2min&until=-1min";
    for (method, path, body) in [
        ("POST", "/render", &body[..]),
        ("GET", "/metrics/find?query=*", &b""[..]),
    ] {
        let (status, text) = server.request(method, path, FORM, body);
        assert_eq!(status, 401, "{path}: {text}");
        let mut headers = FORM.to_vec();
        headers.push(("Authorization", "Bearer s3cret"));
        let (status, text) = server.request(method, path, &headers, body);
        assert_eq!(status, 200, "{path}: {text}");
    }
}

/// `/functions` lists exactly what `/render` dispatches: every listed name evaluates (at
/// worst refusing its arguments, never as an unknown function), all 151 of graphite-web
/// 1.1's, and a name that is no function is neither listed nor evaluated. `/version` answers
/// 1.1.8, from which Grafana detects Graphite 1.1.
#[test]
fn functions_list_what_render_dispatches() {
    let server = server_with_data(None);
    let listed = server.json("/functions");
    let listed = listed.as_object().expect("an object by name");
    assert_eq!(listed.len(), 151);
    for (name, entry) in listed {
        assert_eq!(entry["name"], json!(name));
        assert_eq!(entry["module"], json!("graphite.render.functions"));
        assert!(entry["params"].is_array(), "{name}: {entry}");
        let (status, text) = server.get(&format!("/render?target={name}()&from=-1h"));
        assert!(
            status == 200 || !text.contains("unknown function"),
            "{name}: {status} {text}"
        );
        assert_eq!(&server.json(&format!("/functions/{name}")), entry);
    }
    for name in [
        "aliasByNode",
        "groupByNode",
        "movingAverage",
        "asPercent",
        "hitcount",
        "events",
        "aliasQuery",
        "reduceSeries",
    ] {
        assert!(listed.contains_key(name), "{name}");
    }
    for name in ["nope", "fooBar"] {
        assert!(!listed.contains_key(name), "{name}");
        let (status, text) = server.get(&format!("/render?target={name}('x')&from=-1h"));
        assert_eq!(status, 400, "{text}");
        assert!(text.contains("unknown function"), "{text}");
        let (status, text) = server.get(&format!("/functions/{name}"));
        assert_eq!(status, 404, "{text}");
        assert!(text.contains(name), "{text}");
    }
    let grouped = server.json("/functions?grouped=true");
    assert_eq!(grouped["Combine"]["sumSeries"], listed["sumSeries"]);
    let in_groups: usize = (grouped.as_object().unwrap().values())
        .map(|g| g.as_object().unwrap().len())
        .sum();
    assert_eq!(in_groups, listed.len());
    assert_eq!(
        listed["movingAverage"]["params"],
        json!([
            {"name": "seriesList", "type": "seriesList", "required": true},
            {"name": "windowSize", "type": "intOrInterval", "required": true},
            {"name": "xFilesFactor", "type": "float"}
        ])
    );
    assert_eq!(server.get("/version"), (200, "1.1.8\n".to_owned()));
}

/// The functions Grafana dashboards use most, on the fixture: names as graphite-web writes
/// them and values from the stored points.
#[test]
fn dashboard_functions_render() {
    let server = server_with_data(None);
    let window = "from=-3min&until=now";
    let render_target = |target: &str| {
        render(
            &server,
            &format!("target={}&{window}", encode_uri_component(target)),
        )
    };
    let answer = render_target("aliasByNode(servers.*.cpu, 1)");
    assert_eq!(
        shape(&answer),
        [("db1".into(), 3), ("web1".into(), 3), ("web2".into(), 3)]
    );
    let answer = render_target("groupByNode(servers.*.cpu, 0, \"sum\")");
    // 11:58 and 11:59: db1 40+2*(m%3) + web1 m%10+0.5 + web2 20+m%4 at m = 178, 179 (db1
    // has no sample at m = 179).
    assert_eq!(
        answer,
        json!([{"target": "servers", "datapoints": [
            [42.0 + 8.5 + 22.0, NOW - 120], [9.5 + 23.0, NOW - 60], [null, NOW]
        ]}])
    );
    let answer = render_target("movingAverage(servers.web2.cpu, 2)");
    assert_eq!(
        answer,
        json!([{"target": "movingAverage(servers.web2.cpu,2)", "datapoints": [
            [(20.0 + 21.0) / 2.0, NOW - 120], [(21.0 + 22.0) / 2.0, NOW - 60],
            [(22.0 + 23.0) / 2.0, NOW]
        ]}])
    );
    let answer = render_target("asPercent(servers.web2.cpu, 100)");
    assert_eq!(
        answer[0]["target"],
        json!("asPercent(servers.web2.cpu,100)")
    );
    assert_eq!(answer[0]["datapoints"][0], json!([22.0, NOW - 120]));
    let answer = render_target("keepLastValue(servers.web2.cpu)");
    assert_eq!(answer[0]["datapoints"][2], json!([23.0, NOW]));
    let answer = render_target("transformNull(servers.web2.cpu, -1)");
    assert_eq!(
        answer[0]["target"],
        json!("transformNull(servers.web2.cpu,-1)")
    );
    assert_eq!(answer[0]["datapoints"][2], json!([-1.0, NOW]));
    let answer = render_target("timeShift(servers.web2.cpu, \"1min\")");
    assert_eq!(
        answer[0]["target"],
        json!("timeShift(servers.web2.cpu, \"-1min\")")
    );
    assert_eq!(answer[0]["datapoints"][0], json!([21.0, NOW - 120]));
}

/// groupByTags as graphite-web's functions.py writes it: each group named as a tagged series
/// of the common name (the callback's name when the names differ) and the tags, sorted; a
/// series without a tag groups under its empty value.
#[test]
fn group_by_tags_names_groups_as_tagged_series() {
    let server = server_with_data(None);
    let window = "from=-3min&until=now";
    let render_target = |target: &str| {
        render(
            &server,
            &format!("target={}&{window}", encode_uri_component(target)),
        )
    };
    assert_eq!(
        render_target("groupByTags(cpu.load, \"sum\", \"name\")"),
        json!([{"target": "cpu.load", "datapoints": [
            [0.5, NOW - 120], [4.5, NOW - 60], [null, NOW]
        ]}])
    );
    let answer = render_target("groupByTags(cpu.load, \"sumSeries\", \"host\")");
    assert_eq!(
        shape(&answer),
        [("cpu.load;host=a".into(), 3), ("cpu.load;host=b".into(), 3)]
    );
    let answer = render_target("groupByTags(group(cpu.load, servers.web2.cpu), \"max\", \"host\")");
    assert_eq!(
        shape(&answer),
        [
            ("max;host=a".into(), 3),
            ("max;host=b".into(), 3),
            ("max;host=".into(), 3)
        ]
    );
    assert_eq!(answer[2]["datapoints"][1], json!([23.0, NOW - 60]));
    let answer = render_target("aliasByTags(cpu.load, \"host\", \"name\")");
    assert_eq!(
        shape(&answer),
        [("a.cpu.load".into(), 3), ("b.cpu.load".into(), 3)]
    );
}

/// seriesByTag with graphite-web's expression grammar and its tag database's rules (a value
/// compared whole, a regex anchored at the value's start, a missing tag read as the empty
/// value, one expression at least that the empty value fails), named by the tagged paths;
/// and the tag API Grafana's tag editor calls.
#[test]
fn series_by_tag_and_the_tag_api() {
    let server = server_with_data(None);
    let window = "from=-3min&until=now";
    let targets = |target: &str| {
        let answer = render(
            &server,
            &format!("target={}&{window}", encode_uri_component(target)),
        );
        shape(&answer)
            .into_iter()
            .map(|(t, _)| t)
            .collect::<Vec<_>>()
    };
    let both = ["cpu.load;host=a", "cpu.load;host=b"];
    assert_eq!(targets("seriesByTag('name=cpu.load')"), both);
    assert_eq!(targets("seriesByTag('host=~[ab]')"), both);
    assert_eq!(
        targets("seriesByTag('name=cpu.load', 'host!=a')"),
        ["cpu.load;host=b"]
    );
    assert_eq!(
        targets("seriesByTag('name=~cpu', 'host!=~b')"),
        ["cpu.load;host=a"]
    );
    // Anchored at the start: `load` is not a prefix of the name.
    assert!(targets("seriesByTag('name=~load')").is_empty());
    assert!(targets("seriesByTag('name=cpu.load', 'host=c')").is_empty());
    assert_eq!(
        targets("sumSeries(seriesByTag('name=cpu.load'))"),
        ["sumSeries(seriesByTag('name=cpu.load'))"]
    );
    assert_eq!(
        targets("aliasByTags(seriesByTag('name=cpu.load'), 'host')"),
        ["a", "b"]
    );
    assert_eq!(
        targets("groupByTags(seriesByTag('name=cpu.load'), 'sum', 'name')"),
        ["cpu.load"]
    );
    let answer = render(
        &server,
        &format!(
            "target={}&{window}",
            encode_uri_component("sumSeries(seriesByTag('name=cpu.load'))")
        ),
    );
    assert_eq!(answer[0]["datapoints"][1], json!([4.5, NOW - 60]));
    for (target, needle) in [
        ("seriesByTag('host=')", "must not match the empty value"),
        (
            "seriesByTag('host')",
            "argument 1 (tagExpressions) \\\"host\\\" is not a tag expression",
        ),
        ("seriesByTag(cpu.load)", "must be a quoted string"),
        ("seriesByTag('name=~(')", "invalid regex"),
    ] {
        let (status, text) = server.request(
            "POST",
            "/render",
            FORM,
            format!("target={}&{window}", encode_uri_component(target)).as_bytes(),
        );
        assert_eq!(status, 400, "{target}: {text}");
        assert!(text.contains(needle), "{target}: {text}");
    }

    let tags = server.json("/tags");
    assert!(
        tags.as_array().unwrap().contains(&json!({"tag": "host"})),
        "{tags}"
    );
    assert!(
        tags.as_array().unwrap().contains(&json!({"tag": "name"})),
        "{tags}"
    );
    assert_eq!(server.json("/tags?filter=ho"), json!([{"tag": "host"}]));
    assert_eq!(server.json("/tags?limit=1"), json!([{"tag": "host"}]));
    assert_eq!(
        server.json("/tags/host"),
        json!({"tag": "host", "values": [
            {"value": "a", "count": 1}, {"value": "b", "count": 1}
        ]})
    );
    assert_eq!(server.json("/tags/nope"), json!(null));
    assert_eq!(
        server.json("/tags/findSeries?expr=name%3Dcpu.load"),
        json!(both)
    );
    assert_eq!(
        server.json("/tags/findSeries?expr=name%3Dcpu.load&expr=host%3Db"),
        json!(["cpu.load;host=b"])
    );
    assert_eq!(
        server.json("/tags/autoComplete/tags?expr=name%3Dcpu.load"),
        json!(["host"])
    );
    assert_eq!(
        server.json("/tags/autoComplete/tags?tagPrefix=na"),
        json!(["name"])
    );
    assert_eq!(
        server.json("/tags/autoComplete/values?tag=host&expr=name%3Dcpu.load"),
        json!(["a", "b"])
    );
    assert_eq!(
        server.json("/tags/autoComplete/values?tag=host&valuePrefix=b"),
        json!(["b"])
    );
    let (status, text) = server.get("/tags/autoComplete/values");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("tag"), "{text}");
    let (status, text) = server.get("/tags/findSeries");
    assert_eq!(status, 400, "{text}");
    let (status, text) = server.get("/metrics/find?query=seriesByTag('name=cpu.load')");
    assert_eq!(status, 400, "{text}");
}

/// A dashboard refresh answered through the render cache sees a sample written after the
/// cached render, in the still-filling minute and an hour back, and `/metrics` shows the
/// cache's memory and how its reads were answered.
#[test]
fn a_write_after_a_cached_render_is_seen() {
    let server = server_with_data(None);
    let panel = format!(
        "target=sumSeries(servers.*.cpu)&from={}&until={NOW}",
        NOW - 7200
    );
    let sum_at = |answer: &Value, at: i64| -> f64 {
        (answer[0]["datapoints"].as_array().unwrap().iter())
            .find(|p| p[1] == at)
            .and_then(|p| p[0].as_f64())
            .unwrap_or_else(|| panic!("no value at {at}: {answer}"))
    };
    let first = render(&server, &panel);
    assert_eq!(render(&server, &panel), first);
    let write = |ts: i64, value: f64| {
        let body = json!([{"series": "servers.web2.cpu", "ts": ts, "value": value}]);
        let body = serde_json::to_vec(&body).unwrap();
        let (status, text) = server.request("POST", "/api/v1/write", &[], &body);
        assert_eq!(status, 204, "{text}");
    };
    // The still-filling minute (the clock's, no sample yet): web2 alone is 1,000 there.
    write(NOW, 1_000.0);
    let now = render(&server, &panel);
    assert_eq!(sum_at(&now, NOW), 1_000.0);
    // A late sample, an hour back: web2's minute averages its two samples.
    let late = NOW - 3600;
    write(late, 1_000.0);
    let after = render(&server, &panel);
    assert_eq!(
        sum_at(&after, late) - sum_at(&now, late),
        (1_000.0 - sum_at_web2(late)) / 2.0
    );
    let metrics = server.get("/metrics").1;
    for line in [
        "tierdb_render_cache_capacity_bytes 67108864",
        "tierdb_render_cache_entries 1",
        "tierdb_render_cache_reads_total{answer=\"hit\"} 1",
        "tierdb_render_cache_reads_total{answer=\"partial\"} 2",
        "tierdb_render_cache_reads_total{answer=\"miss\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in:\n{metrics}");
    }
    assert!(
        !metrics.contains("tierdb_render_cache_bytes 0\n"),
        "{metrics}"
    );
}

/// servers.web2.cpu's fixture value at `ts` (see [`FIXTURE`]).
fn sum_at_web2(ts: i64) -> f64 {
    (20 + ((ts - START) / 60) % 4) as f64
}

/// A series deleted after a cached render leaves the next refresh of the same panel: the
/// deletion clears buckets the cache holds, and it is noted as a change of every bucket.
#[test]
fn a_series_deleted_after_a_cached_render_leaves_the_panel() {
    let server = server_with_data(None);
    let panel = format!("target=servers.*.cpu&from={}&until={NOW}", NOW - 7200);
    let targets = |answer: &Value| -> Vec<String> {
        (answer.as_array().unwrap().iter())
            .map(|s| s["target"].as_str().unwrap().to_owned())
            .collect()
    };
    let first = render(&server, &panel);
    assert!(
        targets(&first).contains(&"servers.web2.cpu".to_owned()),
        "{first}"
    );
    assert_eq!(render(&server, &panel), first, "the cached refresh");
    let (status, text) =
        server.request("DELETE", "/api/v1/series?match=servers.web2.cpu", &[], b"");
    assert_eq!(status, 200, "{text}");
    let after = render(&server, &panel);
    assert!(
        !targets(&after).contains(&"servers.web2.cpu".to_owned()),
        "a deleted series still rendered: {after}"
    );
    assert_eq!(targets(&after).len(), targets(&first).len() - 1, "{after}");
}
