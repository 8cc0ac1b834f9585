//! Tests of how `/api/v1/query` names its one series from `series` and `tag` parameters, and
//! of what a write answers when the server fails partway through its body, and what a failed
//! write leaves of a cumulative histogram's state.

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

/// A failure partway through a body (the engine poisoned after the first batch landed)
/// answered 500, so a client retried the whole body and counted the first batch twice. The
/// answer now says what landed: 400 with the counts once anything did, 503 only when
/// nothing did.
mod a_failure_mid_body {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use crate::engine::Engine;
    use crate::ingest::batch::BATCH;
    use crate::server::{run, Limits, Listeners, State};

    /// The real server on loopback over `engine`, stopped on drop.
    struct Served {
        http: SocketAddr,
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl Served {
        fn start(engine: &Arc<Engine>) -> Served {
            let state = Arc::new(State::new(Arc::clone(engine), Limits::default(), None));
            Served::over(state)
        }

        /// The server over `state`.
        fn over(state: Arc<State>) -> Served {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            let loopback = "127.0.0.1:0".parse().unwrap();
            let listeners = runtime
                .block_on(Listeners::bind(loopback, loopback))
                .unwrap();
            let http = listeners.addrs().unwrap().0;
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let thread = std::thread::spawn(move || {
                let stopped = async move {
                    let _ = stopped.await;
                };
                // The flush at the end fails on the poisoned engine, as it should.
                let _ = runtime.block_on(run(state, listeners, stopped));
            });
            Served {
                http,
                stop: Some(stop),
                thread: Some(thread),
            }
        }
    }

    impl Drop for Served {
        fn drop(&mut self) {
            if let Some(stop) = self.stop.take() {
                let _ = stop.send(());
            }
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
    }

    /// `n` elements of one series, one per second back from `now`, joined by commas.
    fn elements(now: i64, range: std::ops::Range<usize>) -> String {
        range
            .map(|i| {
                format!(
                    r#"{{"series":"mid.body","ts":{},"value":1}}"#,
                    now - i as i64
                )
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    fn answer(stream: &mut TcpStream) -> (u16, serde_json::Value) {
        let mut raw = String::new();
        stream.read_to_string(&mut raw).unwrap();
        let status = raw[9..12].parse().unwrap();
        let body = &raw[raw.find("\r\n\r\n").unwrap() + 4..];
        (status, serde_json::from_str(body).unwrap_or_default())
    }

    fn post(addr: SocketAddr, path: &str, length: usize) -> TcpStream {
        post_with(addr, path, "", length)
    }

    /// [`post`] with more header lines (`headers`, each ending in CRLF).
    fn post_with(addr: SocketAddr, path: &str, headers: &str, length: usize) -> TcpStream {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        write!(
            stream,
            "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}Content-Length: {length}\r\n\r\n"
        )
        .unwrap();
        stream
    }

    /// The status of `body` posted whole to `path` with `headers`.
    fn status_of(addr: SocketAddr, path: &str, headers: &str, body: &[u8]) -> u16 {
        let mut stream = post_with(addr, path, headers, body.len());
        stream.write_all(body).unwrap();
        answer(&mut stream).0
    }

    #[test]
    fn answers_with_what_landed_and_5xx_only_when_nothing_did() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Arc::new(
            Engine::builder(dir.path())
                .writer_threads(2)
                .background_maintenance(false)
                .open()
                .unwrap(),
        );
        let server = Served::start(&engine);
        let now = engine.now() - 7200;
        let total = 3 * BATCH;
        let first = format!("[{},", elements(now, 0..BATCH + 100));
        let rest = format!("{}]", elements(now, BATCH + 100..total));
        let mut stream = post(server.http, "/api/v1/write", first.len() + rest.len());
        stream.write_all(first.as_bytes()).unwrap();
        // The first batch lands while the body is still arriving.
        let deadline = Instant::now() + Duration::from_secs(60);
        while engine.stats().accepted < BATCH as u64 {
            assert!(Instant::now() < deadline, "the first batch never landed");
            std::thread::sleep(Duration::from_millis(10));
        }
        engine.shared.poison("injected by the test".into());
        stream.write_all(rest.as_bytes()).unwrap();
        let (status, body) = answer(&mut stream);
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["accepted"], BATCH, "{body}");
        assert_eq!(body["rejected"], total - BATCH, "{body}");
        assert_eq!(
            body["rejected_by_reason"],
            serde_json::json!({ "write_failed": total - BATCH }),
            "{body}"
        );
        assert_eq!(engine.stats().accepted, BATCH as u64);

        // Nothing lands now: 503 says a retry is safe, for JSON and Influx alike.
        let body = format!("[{}]", elements(now, 0..10));
        let mut stream = post(server.http, "/api/v1/write", body.len());
        stream.write_all(body.as_bytes()).unwrap();
        let (status, body) = answer(&mut stream);
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["accepted"], 0, "{body}");
        assert_eq!(body["rejected_by_reason"]["write_failed"], 10, "{body}");
        let line = format!("mid,host=a value=1 {}", now * 1_000_000_000);
        let mut stream = post(server.http, "/write", line.len());
        stream.write_all(line.as_bytes()).unwrap();
        let (status, body) = answer(&mut stream);
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["rejected_by_reason"]["write_failed"], 1, "{body}");
    }

    /// A server over a fresh engine, its state at hand: the directory, the engine, the state
    /// and the server.
    fn served_state() -> (tempfile::TempDir, Arc<Engine>, Arc<State>, Served) {
        let dir = tempfile::tempdir().unwrap();
        let engine = Arc::new(
            Engine::builder(dir.path())
                .background_maintenance(false)
                .open()
                .unwrap(),
        );
        let state = Arc::new(State::new(Arc::clone(&engine), Limits::default(), None));
        let server = Served::over(Arc::clone(&state));
        (dir, engine, state, server)
    }

    /// A remote write request of one integer counter histogram of `rpc_seconds{job=api}` at
    /// `ms`: `count` observations in bucket 1 (schema 0), snappy-framed.
    fn native_request(ms: i64, count: u64) -> Vec<u8> {
        use prost::Message;

        use crate::ingest::prom_remote::native::{BucketSpan, NativeHistogram};
        use crate::ingest::prom_remote::{Label, TimeSeries, WriteRequest};
        let label = |name: &'static str, value: &'static str| Label {
            name: name.into(),
            value: value.into(),
        };
        let histogram = NativeHistogram {
            count_int: Some(count),
            sum: count as f64 * 1.5,
            positive_spans: vec![BucketSpan {
                offset: 1,
                length: 1,
            }],
            positive_deltas: vec![count as i64],
            zero_count_int: Some(0),
            timestamp: ms,
            ..NativeHistogram::default()
        };
        let request = WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![label("__name__", "rpc_seconds"), label("job", "api")],
                samples: Vec::new(),
                histograms: vec![histogram],
            }],
            metadata: Vec::new(),
        };
        snap::raw::Encoder::new()
            .compress_vec(&request.encode_to_vec())
            .unwrap()
    }

    /// A counter histogram whose write fails is taken back: the series' state is its last
    /// written histogram again, so its next histogram (the retry) carries the increase. Before,
    /// the state had moved on, the retry was refused as out of order, and the interval was lost.
    #[test]
    fn a_counter_histogram_whose_write_fails_leaves_its_increase_to_the_next() {
        use crate::histogram::Histogram;
        use crate::ingest::cumulative::Unwritten;

        let (_dir, engine, state, server) = served_state();
        let ms = (engine.now() - 600) * 1000;
        let headers = "Content-Type: application/x-protobuf\r\nContent-Encoding: snappy\r\n";
        let send = |body: &[u8]| status_of(server.http, "/api/v1/prom/write", headers, body);
        // The baseline, then an increase of 3 that lands.
        assert_eq!(send(&native_request(ms, 2)), 204);
        assert_eq!(send(&native_request(ms + 15_000, 5)), 204);
        engine.shared.poison("injected by the test".into());
        // An increase of 4 whose batch fails: nothing landed, 503.
        assert_eq!(send(&native_request(ms + 30_000, 9)), 503);
        // The series' state is the last histogram written (5 observations).
        let mut next = Histogram::new(0);
        next.record_n(1.5, 9);
        let step = (state.histogram_counters).step(
            "rpc_seconds{job=api}",
            ms + 30_000,
            (next, 13.5),
            false,
            &mut Unwritten::default(),
        );
        let increase = step
            .expect("the retry is not refused")
            .expect("an increase");
        assert_eq!(increase.histogram.count(), 4);
        assert_eq!(increase.sum, 6.0);
    }

    /// The OTLP/JSON export of one cumulative explicit histogram `http.duration` (bounds 10
    /// and 100) that started at `start` (ns), taken at `time` (ns), with `counts`.
    fn otlp_request(start: u64, time: u64, counts: [u64; 3]) -> Vec<u8> {
        let count: u64 = counts.iter().sum();
        format!(
            r#"{{"resourceMetrics":[{{"scopeMetrics":[{{"metrics":[{{"name":"http.duration",
            "histogram":{{"aggregationTemporality":2,"dataPoints":[{{"startTimeUnixNano":"{start}",
            "timeUnixNano":"{time}","count":"{count}","sum":{count},"bucketCounts":["{}","{}","{}"],
            "explicitBounds":[10,100]}}]}}}}]}}]}}]}}"#,
            counts[0], counts[1], counts[2]
        )
        .into_bytes()
    }

    /// A cumulative OTLP histogram whose write fails is taken back, as a counter histogram
    /// over remote write is: the stream's last point is its last written again, so the
    /// retry writes the increase instead of being refused as out of order.
    #[test]
    fn a_cumulative_otlp_histogram_whose_write_fails_leaves_its_increase_to_the_next() {
        use crate::ingest::cumulative::Unwritten;
        use crate::ingest::otlp::histogram::{Distribution, Layout, Temporality};

        let (_dir, engine, state, server) = served_state();
        let second = 1_000_000_000u64;
        let now = engine.now() as u64 * second;
        // Started before the server: its first point is a baseline.
        let start = now - 3_600 * second;
        let headers = "Content-Type: application/json\r\n";
        let send = |body: &[u8]| status_of(server.http, "/v1/metrics", headers, body);
        assert_eq!(
            send(&otlp_request(start, now - 60 * second, [1, 0, 0])),
            200
        );
        assert_eq!(
            send(&otlp_request(start, now - 45 * second, [1, 2, 0])),
            200
        );
        let series: Vec<String> = engine.registry().select(|_, key| Some(key.to_string()));
        assert_eq!(series.len(), 1, "{series:?}");
        engine.shared.poison("injected by the test".into());
        // An increase of 3 whose batch fails: nothing landed, 503.
        let failed_at = now - 30 * second;
        assert_eq!(send(&otlp_request(start, failed_at, [1, 4, 1])), 503);
        // The stream's last point is the last one written (3 values): the retry's increase.
        let retry = Distribution {
            layout: Layout::Explicit {
                bounds: vec![10.0, 100.0],
                counts: vec![1, 4, 1],
            },
            count: 6,
            sum: Some(6.0),
            min: None,
            max: None,
            temporality: Temporality::Cumulative,
            start,
            time: failed_at,
        };
        let mut streams = state.otlp_streams.lock().unwrap();
        let increase = streams.observe(&series[0], &retry, engine.now(), &mut Unwritten::default());
        let increase = increase
            .expect("the retry is not refused")
            .expect("an increase");
        assert_eq!(increase.histogram.count(), 3);
    }
}
