//! The server over real sockets: Graphite plaintext on TCP and UDP, Influx and JSON writes
//! over HTTP, the query, series, tiers and metrics endpoints, tokens and limits.

use std::io::Write;
use std::net::{TcpStream, UdpSocket};
use std::time::Duration;

use tierdb::server::Limits;

use crate::common::NOW;
use crate::support::server::TestServer;

fn points(value: &serde_json::Value) -> Vec<(i64, Option<f64>)> {
    serde_json::from_value(value["points"].clone()).unwrap()
}

#[test]
fn graphite_tcp_lines_land_and_bad_lines_do_not_drop_the_connection() {
    let server = TestServer::start(None, Limits::default());
    let minute = NOW - NOW % 60 - 120;
    let mut stream = TcpStream::connect(server.graphite).unwrap();
    let text = format!(
        "collectd.e2e.load.shortterm 0.5 {minute}\r\n\
         this line is bad\r\n\
         collectd.e2e.load.shortterm 1.5 {}\r\n\
         cpu;host=a;dc=eu 3 {minute}\n\
         collectd.e2e.load.shortterm notanumber {minute}\n\
         cpu;host=a;dc=eu 5 -1\n",
        minute + 10
    );
    stream.write_all(text.as_bytes()).unwrap();
    // A line split across two writes.
    stream
        .write_all(format!("split.series 7 {minute}").as_bytes())
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    stream.write_all(b"\n").unwrap();
    drop(stream);
    server.wait_for_series("split.series");
    server.wait_for_series("cpu{dc=eu,host=a}");

    let q = server.json(&format!(
        "/api/v1/query?series=collectd.e2e.load.shortterm&tier=1m&from={minute}&to={}&display=total",
        minute + 60
    ));
    assert_eq!(q["tier"], "1m");
    assert_eq!(q["display"], "total");
    assert_eq!(points(&q), vec![(minute, Some(2.0))]);
    // Tags named either way: canonical text, or name plus tag= parameters.
    let tagged = server.json(&format!(
        "/api/v1/query?series=cpu&tag=host=a&tag=dc=eu&tier=1h&from={}&to={}&display=count",
        NOW - NOW % 3600 - 3600,
        NOW - NOW % 3600 + 3600
    ));
    assert_eq!(tagged["series"], "cpu{dc=eu,host=a}");
    assert_eq!(
        points(&tagged).iter().filter_map(|p| p.1).sum::<f64>(),
        2.0,
        "{tagged}"
    );

    let metrics = server.get("/metrics").1;
    assert!(
        metrics.contains("tierdb_samples_rejected_total{reason=\"missing_value\"} 1")
            || metrics.contains("reason=\"too_many_fields\"")
            || metrics.contains("reason=\"invalid_value\""),
        "{metrics}"
    );
}

#[test]
fn graphite_udp_datagrams_land() {
    let server = TestServer::start(None, Limits::default());
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let minute = NOW - NOW % 60 - 60;
    socket
        .send_to(
            format!("udp.metric 4 {minute}\nudp.metric 6 {minute}\n").as_bytes(),
            server.graphite,
        )
        .unwrap();
    server.wait_for_series("udp.metric");
    // Registered first, written a moment later: poll until both samples are in.
    let path = format!(
        "/api/v1/query?series=udp.metric&tier=1m&from={minute}&to={}&display=count",
        minute + 60
    );
    for _ in 0..200 {
        if points(&server.json(&path)) == vec![(minute, Some(2.0))] {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let q = server.json(&format!(
        "/api/v1/query?series=udp.metric&tier=1m&from={minute}&to={}",
        minute + 60
    ));
    assert_eq!(points(&q), vec![(minute, Some(5.0))]);
}

#[test]
fn influx_writes_answer_204_after_landing_and_400_with_reasons_for_bad_lines() {
    let server = TestServer::start(None, Limits::default());
    let second = NOW - NOW % 60 - 60;
    let body = format!(
        "# a comment\n\
         cpu,host=a,region=us\\ west usage_user=12.5,usage_idle=80i,label=\"x y\",up=true {}\n\
         \n\
         mem,host=a used=1024u {}\n",
        second * 1_000_000_000,
        second * 1_000_000_000
    );
    let (status, text) = server.request("POST", "/write?db=telegraf", &[], body.as_bytes());
    assert_eq!(status, 204, "{text}");
    // Written before the answer: readable at once.
    let q = server.json(&format!(
        "/api/v1/query?series=cpu.usage_user{{host=a,region=us%20west}}&tier=1m&from={second}&to={}",
        second + 60
    ));
    assert_eq!(points(&q)[0].1, Some(12.5));
    let q = server.json(&format!("/api/v1/query?series=cpu.usage_idle&tag=host=a&tag=region=us%20west&tier=1m&from={second}&to={}", second + 60));
    assert_eq!(points(&q)[0].1, Some(80.0));

    let body = format!(
        "disk,host=a free=5 {second}\nthis is not line protocol\ndisk,host=a free=7 {}\n",
        second + 1
    );
    let (status, text) = server.request(
        "POST",
        "/api/v2/write?bucket=b&precision=s",
        &[],
        body.as_bytes(),
    );
    assert_eq!(status, 400, "{text}");
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["accepted"], 2);
    assert_eq!(answer["rejected"], 1);
    assert_eq!(answer["errors"][0]["line"], 2);
    let q = server.json(&format!(
        "/api/v1/query?series=disk.free{{host=a}}&tier=1m&from={second}&to={}&display=total",
        second + 60
    ));
    assert_eq!(points(&q)[0].1, Some(12.0));

    let (status, text) = server.request("POST", "/write?precision=fortnights", &[], b"x v=1");
    assert_eq!(status, 400);
    assert!(text.contains("precision"), "{text}");
}

#[test]
fn aggregate_endpoint_groups_and_folds_series() {
    let server = TestServer::start(None, Limits::default());
    let minute = NOW - NOW % 60 - 60;
    let body = serde_json::json!([
        {"series": "req", "tags": {"host": "a", "dc": "eu"}, "ts": minute, "value": 1.0},
        {"series": "req", "tags": {"host": "b", "dc": "eu"}, "ts": minute, "value": 2.0},
        {"series": "req", "tags": {"host": "c", "dc": "us"}, "ts": minute, "value": 4.0},
        {"series": "req", "tags": {"host": "c", "dc": "us"}, "ts": minute + 1, "value": 8.0},
    ]);
    server.write_points(&body);
    let window = format!("tier=1m&from={minute}&to={}", minute + 60);
    let by_dc = server.json(&format!(
        "/api/v1/aggregate?match=req&agg=sum&group_by=dc&display=total&{window}"
    ));
    assert_eq!(by_dc["aggregation"], "sum");
    assert_eq!(
        by_dc["groups"],
        serde_json::json!([
            {"tags": {"dc": "eu"}, "series": 2, "points": [[minute, 3.0]]},
            {"tags": {"dc": "us"}, "series": 1, "points": [[minute, 12.0]]},
        ])
    );
    // Filters in the selector and as tag= parameters; avg weighs every sample.
    let avg = server.json(&format!(
        "/api/v1/aggregate?match=req{{host!=a}}&tag=dc!=nowhere&agg=avg&{window}"
    ));
    assert_eq!(
        avg["groups"][0]["points"],
        serde_json::json!([[minute, 14.0 / 3.0]])
    );
    let whole = server.json(&format!(
        "/api/v1/aggregate?match=r*&agg=count&range=whole&from={}&to={}&tier=1m",
        minute - 600,
        minute + 60
    ));
    assert_eq!(
        whole["groups"][0]["points"],
        serde_json::json!([[minute - 600, 3.0]])
    );
    for (query, needle) in [
        ("agg=median", "agg"),
        ("range=all", "range"),
        ("match=req{host}", "match"),
        ("tag=host", "tag"),
    ] {
        let (status, text) = server.get(&format!("/api/v1/aggregate?{query}"));
        assert_eq!(status, 400, "{query}: {text}");
        assert!(text.contains(needle), "{query}: {text}");
    }
}

#[test]
fn writes_declare_counters() {
    let server = TestServer::start(None, Limits::default());
    let minute = NOW - NOW % 60 - 120;
    // JSON: per sample.
    let body = serde_json::json!([
        {"series": "net.bytes", "ts": minute, "value": 1000.0, "kind": "counter"},
        {"series": "net.bytes", "ts": minute + 30, "value": 1600.0, "kind": "counter"},
        {"series": "net.bytes", "ts": minute + 60, "value": 2200.0},
    ]);
    server.write_points(&body);
    // Influx: for the whole request.
    let lines = format!(
        "if,host=a rx=10i {}\nif,host=a rx=40i {}\n",
        minute * 1_000_000_000,
        (minute + 60) * 1_000_000_000
    );
    let (status, text) = server.request("POST", "/write?db=x&kind=counter", &[], lines.as_bytes());
    assert_eq!(status, 204, "{text}");
    let window = format!("tier=1m&from={minute}&to={}&display=total", minute + 120);
    let q = server.json(&format!("/api/v1/query?series=net.bytes&{window}"));
    assert_eq!(
        points(&q),
        vec![(minute, Some(600.0)), (minute + 60, Some(600.0))]
    );
    let q = server.json(&format!("/api/v1/query?series=if.rx{{host=a}}&{window}"));
    assert_eq!(points(&q), vec![(minute, None), (minute + 60, Some(30.0))]);
    // A counter declared a gauge later is refused by line; a bad kind by parameter.
    let body = serde_json::json!([
        {"series": "net.bytes", "ts": minute + 90, "value": 2300.0, "kind": "gauge"},
    ]);
    let (status, text) = server.request("POST", "/api/v1/write", &[], body.to_string().as_bytes());
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("kind_mismatch") && text.contains("already a counter"),
        "{text}"
    );
    let (status, text) = server.request("POST", "/write?kind=rate", &[], b"m v=1");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("kind"), "{text}");
    let metrics = server.get("/metrics").1;
    assert!(metrics.contains("tierdb_counter_series 2"), "{metrics}");
    assert!(
        metrics.contains("tierdb_samples_rejected_total{reason=\"kind_mismatch\"} 1"),
        "{metrics}"
    );
}

#[test]
fn json_writes_and_query_errors() {
    let server = TestServer::start(None, Limits::default());
    let minute = NOW - NOW % 60 - 60;
    let body = serde_json::json!([
        {"series": "app.latency", "tags": {"svc": "api"}, "ts": minute, "value": 3.0},
        {"series": "app.latency", "tags": {"svc": "api"}, "ts": minute + 5, "value": 5.0},
        {"series": "app.latency", "ts": minute, "value": "nope"},
        {"series": "app.latency", "tags": {"svc": "api"}, "ts": minute, "value": 1.0e308},
    ]);
    let (status, text) = server.request("POST", "/api/v1/write", &[], body.to_string().as_bytes());
    assert_eq!(status, 400, "{text}");
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["accepted"], 3);
    assert_eq!(answer["errors"][0]["line"], 3);

    let q = server.json(&format!(
        "/api/v1/query?series=app.latency{{svc=api}}&tier=1m&from={minute}&to={}&display=max",
        minute + 60
    ));
    assert_eq!(points(&q), vec![(minute, Some(1.0e308))]);
    let (status, csv) = server.get(&format!("/api/v1/query?series=app.latency{{svc=api}}&tier=1m&from={}&to={}&display=count&format=csv", minute - 60, minute + 60));
    assert_eq!(status, 200);
    assert_eq!(csv, format!("ts,value\n{},\n{minute},3\n", minute - 60));

    let (status, text) = server.get("/api/v1/query?series=nope");
    assert_eq!(status, 404, "{text}");
    // A name some series have is answered with them (issue #15), and the Graphite form of a
    // key reads that key.
    let (status, text) = server.get("/api/v1/query?series=app.latency");
    assert_eq!(status, 404, "{text}");
    assert!(
        text.contains("1 series has that name and those tags: 'app.latency{svc=api}'"),
        "{text}"
    );
    let graphite = server.json(&format!(
        "/api/v1/query?series=app.latency;svc=api&tier=1m&from={minute}&to={}&display=max",
        minute + 60
    ));
    assert_eq!(points(&graphite), vec![(minute, Some(1.0e308))]);
    let (status, text) = server.get("/api/v1/query?series=app.latency{svc=api}&tier=2m");
    assert_eq!(status, 400);
    assert!(text.contains("tier"), "{text}");
    let (status, text) = server.get("/api/v1/query?series=app.latency{svc=api}&from=yesterday-ish");
    assert_eq!(status, 400);
    assert!(text.contains("from"), "{text}");
    let (status, text) = server.get("/api/v1/query?series=app.latency{svc=api}&display=median");
    assert_eq!(status, 400);
    assert!(text.contains("display"), "{text}");
    let (status, text) = server.get("/api/v1/query");
    assert_eq!(status, 400);
    assert!(text.contains("series"), "{text}");

    let relative = server.json("/api/v1/query?series=app.latency{svc=api}&tier=1m&from=-6h&to=now");
    assert_eq!(points(&relative).len(), 360);

    let listed = server.json("/api/v1/series?match=app.*&tag=svc=api");
    assert_eq!(
        listed["series"],
        serde_json::json!(["app.latency{svc=api}"])
    );
    let tiers = server.json("/api/v1/tiers");
    assert_eq!(tiers["tiers"].as_array().unwrap().len(), 4);
    assert!(tiers["tiers"][0]["disk"]["bytes"].as_u64().unwrap() > 0);
}

#[test]
fn a_token_guards_every_endpoint() {
    let server = TestServer::start(Some("s3cret"), Limits::default());
    for path in [
        "/api/v1/series",
        "/api/v1/tiers",
        "/metrics",
        "/api/v1/query?series=x",
    ] {
        assert_eq!(server.get(path).0, 401, "{path}");
    }
    assert_eq!(server.request("POST", "/write", &[], b"x v=1").0, 401);
    assert_eq!(
        server
            .request(
                "GET",
                "/api/v1/series",
                &[("Authorization", "Bearer wrong")],
                b""
            )
            .0,
        401
    );
    assert_eq!(
        server
            .request(
                "GET",
                "/api/v1/series",
                &[("Authorization", "Bearer s3cret")],
                b""
            )
            .0,
        200
    );
    assert_eq!(
        server
            .request(
                "POST",
                "/api/v2/write?bucket=b",
                &[("Authorization", "Token s3cret")],
                b"x v=1"
            )
            .0,
        204
    );
}

#[test]
fn limits_refuse_new_series_and_oversized_bodies() {
    let server = TestServer::start(
        None,
        Limits {
            max_series: Some(2),
            max_body: 1024,
            ..Limits::default()
        },
    );
    let minute = NOW - NOW % 60;
    let body = format!("a v=1 {minute}\nb v=1 {minute}\nc v=1 {minute}\na v=2 {minute}\n");
    let (status, text) = server.request("POST", "/write?precision=s", &[], body.as_bytes());
    assert_eq!(status, 400, "{text}");
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["rejected_by_reason"]["series_limit"], 1, "{text}");
    assert_eq!(answer["accepted"], 3);
    let big = vec![b'x'; 4096];
    assert_eq!(server.request("POST", "/write", &[], &big).0, 413);
}

/// Sends `raw` (a whole HTTP/1.1 request, `Connection: close`) and reads the answer to EOF:
/// the status, the head and the body.
fn raw_exchange(addr: std::net::SocketAddr, raw: &[u8]) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(raw).unwrap();
    let mut answer = Vec::new();
    std::io::Read::read_to_end(&mut stream, &mut answer).unwrap();
    let (status, head, body) = crate::support::http::parse_answer(&answer).unwrap();
    (status, head, String::from_utf8_lossy(&body).into_owned())
}

/// Telegraf's InfluxDB (v1) output, byte for byte as its Go client sends them
/// (plugins/outputs/influxdb/http.go): at start `CREATE DATABASE "telegraf"` as a form POST
/// to `/query`, then each flush a chunked POST to `/write?db=telegraf`. Its token goes in
/// `http_headers = {"Authorization" = "Bearer ..."}`. Load balancers and clients probe
/// `/ping` and `/health` without one.
#[test]
fn telegrafs_influxdb_output_starts_cleanly_and_probes_need_no_token() {
    let server = TestServer::start(Some("s3cret"), Limits::default());
    let addr = server.http;
    let host = format!("Host: {addr}\r\nUser-Agent: Telegraf/1.28.5 Go/1.21.3\r\n");

    // Probes: no token, InfluxDB's answers.
    for method in ["GET", "HEAD"] {
        let (status, head, body) = raw_exchange(
            addr,
            format!("{method} /ping HTTP/1.1\r\n{host}Connection: close\r\n\r\n").as_bytes(),
        );
        assert_eq!(status, 204, "{method} /ping: {head}\n{body}");
        let head = head.to_ascii_lowercase();
        assert!(head.contains("x-influxdb-version: 1."), "{head}");
        assert!(head.contains("x-influxdb-build: oss"), "{head}");
    }
    let (status, _, body) = raw_exchange(
        addr,
        format!("GET /ping?verbose=true HTTP/1.1\r\n{host}Connection: close\r\n\r\n").as_bytes(),
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["version"]
            .as_str()
            .is_some_and(|v| v.starts_with("1.")),
        "{body}"
    );
    let (status, _, body) = raw_exchange(
        addr,
        format!("GET /health HTTP/1.1\r\n{host}Connection: close\r\n\r\n").as_bytes(),
    );
    assert_eq!(status, 200, "{body}");
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["status"], "pass", "{body}");

    // CREATE DATABASE, as for a database that exists: 200 and a result without an error.
    let form = "q=CREATE+DATABASE+%22telegraf%22";
    let create = |auth: &str| {
        raw_exchange(
            addr,
            format!(
                "POST /query HTTP/1.1\r\n{host}Content-Length: {}\r\n{auth}\
                 Content-Type: application/x-www-form-urlencoded\r\nAccept-Encoding: gzip\r\n\
                 Connection: close\r\n\r\n{form}",
                form.len()
            )
            .as_bytes(),
        )
    };
    let (status, _, body) = create("Authorization: Bearer s3cret\r\n");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap(),
        serde_json::json!({"results": [{"statement_id": 0}]})
    );
    assert_eq!(create("").0, 401, "/query without a token");

    // The first flush lands.
    let minute = NOW - NOW % 60 - 60;
    let lines = format!("cpu,host=web1 usage_idle=97.5 {}\n", minute * 1_000_000_000);
    let (status, _, body) = raw_exchange(
        addr,
        format!(
            "POST /write?db=telegraf HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\
             Authorization: Bearer s3cret\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Accept-Encoding: gzip\r\nConnection: close\r\n\r\n{:x}\r\n{lines}\r\n0\r\n\r\n",
            lines.len()
        )
        .as_bytes(),
    );
    assert_eq!(status, 204, "{body}");
    assert_eq!(
        server.minute("cpu.usage_idle{host=web1}", minute, tierdb::Display::Avg),
        Some(97.5)
    );

    // Telegraf's default `content_encoding = "gzip"`: the body inflated, bounded by the
    // default body limit once inflated; another encoding or a body that is not gzip refused.
    let gzip = |bytes: &[u8]| {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    };
    let write = |encoding: &str, body: &[u8]| {
        let mut request = format!(
            "POST /write?db=telegraf HTTP/1.1\r\n{host}Content-Length: {}\r\n\
             Authorization: Bearer s3cret\r\nContent-Encoding: {encoding}\r\n\
             Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(body);
        raw_exchange(addr, &request)
    };
    let lines = format!(
        "cpu,host=web2 usage_idle=91.5 {0}\nmem,host=web2 used=7 {0}\n",
        minute * 1_000_000_000
    );
    let (status, _, body) = write("gzip", &gzip(lines.as_bytes()));
    assert_eq!(status, 204, "{body}");
    assert_eq!(
        server.minute("cpu.usage_idle{host=web2}", minute, tierdb::Display::Avg),
        Some(91.5)
    );
    assert_eq!(
        server.minute("mem.used{host=web2}", minute, tierdb::Display::Avg),
        Some(7.0)
    );
    let (status, _, body) = write("gzip", lines.as_bytes());
    assert_eq!(status, 400, "plain text sent as gzip: {body}");
    assert!(body.contains("gzip"), "{body}");
    let (status, _, body) = write("br", lines.as_bytes());
    assert_eq!(status, 415, "{body}");
    let bomb = gzip(&vec![b'\n'; Limits::default().max_body + 1]);
    assert!(bomb.len() < 1 << 20, "{}", bomb.len());
    let (status, _, body) = write("gzip", &bomb);
    assert_eq!(status, 413, "a body past the limit once inflated: {body}");

    // Any other statement is refused, saying where reads go.
    let (status, body) = server.request(
        "GET",
        "/query?q=SHOW+DATABASES",
        &[("Authorization", "Bearer s3cret")],
        b"",
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("only CREATE DATABASE"), "{body}");
}

/// `format=csv` on `/api/v1/aggregate` answers CSV (it answered JSON, silently): one
/// `group,ts,value` row per group and point, the same values as the JSON. Any other format
/// is refused by name on every query path, before anything is read, and `display=hist` has
/// no CSV columns.
#[test]
fn aggregates_answer_csv_and_an_unknown_format_is_refused() {
    let server = TestServer::start(None, Limits::default());
    let minute = NOW - NOW % 60 - 120;
    let body = serde_json::json!([
        {"series": "fmt.load{dc=eu}", "ts": minute, "value": 1.5},
        {"series": "fmt.load{dc=us}", "ts": minute, "value": 2.0},
        {"series": "fmt.load{dc=us}", "ts": minute + 60, "value": 4.0},
    ]);
    server.write_points(&body);
    let aggregate = format!(
        "/api/v1/aggregate?match=fmt.load&group_by=dc&agg=sum&tier=1m&from={minute}&to={}",
        minute + 120
    );
    let json = server.json(&aggregate);
    let mut expected = String::from("group,ts,value\n");
    for group in json["groups"].as_array().unwrap() {
        let dc = group["tags"]["dc"].as_str().unwrap();
        for point in group["points"].as_array().unwrap() {
            let value = point[1].as_f64().map(|v| v.to_string()).unwrap_or_default();
            expected.push_str(&format!("\"dc={dc}\",{},{value}\n", point[0]));
        }
    }
    assert_eq!(
        expected.lines().count(),
        5,
        "two groups of two points: {json}"
    );
    let (status, csv) = server.get(&format!("{aggregate}&format=csv"));
    assert_eq!(status, 200, "{csv}");
    assert_eq!(csv, expected);

    let window = format!("tier=1m&from={minute}&to={}", minute + 120);
    for path in [
        format!("/api/v1/query?series=fmt.load{{dc=us}}&{window}"),
        format!("/api/v1/aggregate?match=fmt.load&{window}"),
        format!("/api/v1/query?series=fmt.load{{dc=us}}&display=p99&{window}"),
        format!("/api/v1/aggregate?match=fmt.load&display=p99&{window}"),
    ] {
        let (status, body) = server.get(&format!("{path}&format=xml"));
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body.contains("is not json or csv"), "{path}: {body}");
    }
    let (status, body) = server.get(&format!(
        "/api/v1/aggregate?match=fmt.load&display=hist&{window}&format=csv"
    ));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("display=hist"), "{body}");
}

/// Issue #54 item 4: after two samples of 1e308, `sumSeries` and `/api/v1/aggregate`
/// answered `null`, the mark of a bucket without samples, while PromQL answered `+Inf`. A
/// sum that overflows now reads as an infinity on every read path, spelled as each protocol
/// spells it: tierdb's own JSON and CSV and PromQL `+Inf` (JSON strings, as Prometheus
/// writes every value), Graphite's json `1e9999` and its csv and raw `inf` (graphite-web's
/// own output).
#[test]
fn an_overflowed_sum_reads_as_infinity_on_every_read_path() {
    let server = TestServer::start(None, Limits::default());
    let minute = NOW - NOW % 60 - 60;
    let body = serde_json::json!([
        {"series": "ovf_a", "ts": minute, "value": 1e308},
        {"series": "ovf_b", "ts": minute, "value": 1e308},
        {"series": "ovf_both", "ts": minute, "value": 1e308},
        {"series": "ovf_both", "ts": minute + 10, "value": 1e308},
        {"series": "ovf_neg", "ts": minute, "value": -1e308},
        {"series": "ovf_neg", "ts": minute + 10, "value": -1e308},
    ]);
    server.write_points(&body);
    let window = format!("tier=1m&from={minute}&to={}", minute + 60);

    // The native query: JSON and CSV; an empty bucket stays null.
    let to = minute + 120;
    let query = server.json(&format!(
        "/api/v1/query?series=ovf_both&display=total&tier=1m&from={minute}&to={to}"
    ));
    assert_eq!(
        query["points"],
        serde_json::json!([[minute, "+Inf"], [minute + 60, null]])
    );
    let neg = server.json(&format!(
        "/api/v1/query?series=ovf_neg&display=avg&{window}"
    ));
    assert_eq!(neg["points"], serde_json::json!([[minute, "-Inf"]]));
    let (status, csv) = server.get(&format!(
        "/api/v1/query?series=ovf_both&display=total&{window}&format=csv"
    ));
    assert_eq!(status, 200, "{csv}");
    assert_eq!(csv, format!("ts,value\n{minute},+Inf\n"));
    // The library's own answer reads back from that JSON exactly.
    let read: tierdb::QueryResult = serde_json::from_value(query).unwrap();
    assert_eq!(read.points[0], (minute, Some(f64::INFINITY)));

    // The aggregate across series.
    let sum = server.json(&format!(
        "/api/v1/aggregate?match=ovf_?&agg=sum&display=total&{window}"
    ));
    assert_eq!(
        sum["groups"][0]["points"],
        serde_json::json!([[minute, "+Inf"]])
    );

    // Graphite's /render, as graphite-web writes an infinity in each format.
    let render = |format: &str| {
        let (status, body) = server.get(&format!(
            "/render?target=sumSeries(ovf_%3F)&from={}&until={}&format={format}",
            minute - 60,
            minute + 60
        ));
        assert_eq!(status, 200, "{format}: {body}");
        body
    };
    let json = render("json");
    assert!(json.contains("[1e9999,"), "{json}");
    let csv = render("csv");
    assert!(csv.contains(",inf\r\n"), "{csv}");
    let raw = render("raw");
    assert!(raw.contains("|inf") || raw.contains(",inf"), "{raw}");

    // PromQL.
    let promql = server.json(&format!(
        "/prometheus/api/v1/query?query=sum(%7B__name__%3D~%22ovf_.%22%7D)&time={}",
        minute + 60
    ));
    assert_eq!(promql["data"]["result"][0]["value"][1], "+Inf", "{promql}");
}
