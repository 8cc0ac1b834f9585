//! The live dashboard at `/`: one page of hand-written HTML, CSS and vanilla JavaScript (SVG
//! charts, no library, no build step), built into the binary with `include_str!`.
//!
//! The page works like the MMS chart controls: a resolution (one of the configured tiers,
//! finest first, and "raw" last when a raw tier is configured), a range that follows the
//! resolution (from about 24 to 1500 buckets, within the tier's retention), and a display
//! (avg/sec, total, avg, max, min, count, and p50, p90, p99 of distribution series, with the
//! relative error each answer states; a series that is not a distribution says it has no
//! percentiles). It draws a chart per selected series, charts of
//! several series combined (one line each, with a legend) from `/api/v1/query`, and
//! aggregate charts (a line per group) from `/api/v1/aggregate`; refreshes every 5 s; zooms
//! into a dragged span with the `auto` tier, pans, and takes an absolute window; and shows
//! the ingest rate (over a minute), series count, rejected samples and per-tier disk use
//! from `/metrics` and `/api/v1/tiers`. The DOM contract its end-to-end test relies on is at
//! the top of `dashboard/app.js`.
//!
//! Authentication: the page and its assets are served without a token (a browser cannot add
//! a bearer header to a page load, and they hold no data). The script reads `?token=` from
//! the page's address and sends `Authorization: Bearer <token>` on every API call, which
//! stay behind the token check of [`super::http::app`]. Each answer forbids framing, sniffing
//! and referrers, and the page's content security policy allows only this origin, so the page
//! makes no request anywhere else.

use std::sync::Arc;

use axum::http::{header, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::State;

/// The page.
pub(crate) const INDEX_HTML: &str = include_str!("dashboard/index.html");
/// The script: controls, API calls, SVG charts, status panel.
pub(crate) const APP_JS: &str = include_str!("dashboard/app.js");
/// The stylesheet (responsive: laptop and phone widths, light and dark).
pub(crate) const STYLE_CSS: &str = include_str!("dashboard/style.css");

/// Path of the script (the page refers to it relatively, so a proxy may serve it under a
/// prefix).
pub(crate) const APP_JS_PATH: &str = "/assets/app.js";
/// Path of the stylesheet.
pub(crate) const STYLE_CSS_PATH: &str = "/assets/style.css";

/// The page's content security policy: scripts, styles and API calls from this origin only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

/// `GET /`, `GET /assets/app.js`, `GET /assets/style.css`, without authentication (see the
/// module documentation). Merge it into the API router outside the token check.
pub(crate) fn routes() -> Router<Arc<State>> {
    Router::new()
        .route("/", get(index))
        .route(APP_JS_PATH, get(app_js))
        .route(STYLE_CSS_PATH, get(style_css))
}

/// An asset answer: its type, no caching without revalidation (a new binary serves new
/// assets), and headers that keep the page from being framed or its type sniffed.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let headers: [(HeaderName, HeaderValue); 5] = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        ),
    ];
    (headers, body).into_response()
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn style_css() -> Response {
    asset("text/css; charset=utf-8", STYLE_CSS)
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use crate::clock::ManualClock;
    use crate::config::TiersConfig;
    use crate::engine::Engine;
    use crate::server::{http, Limits, State};

    /// A status, the header block (names lowercased) and the body.
    struct Answer {
        status: u16,
        headers: String,
        body: String,
    }

    impl Answer {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers.lines().find_map(|line| {
                let (k, v) = line.split_once(':')?;
                (k.trim().eq_ignore_ascii_case(name)).then(|| v.trim())
            })
        }
    }

    async fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> Answer {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut head = format!("GET {path} HTTP/1.1\r\nHost: tierdb\r\nConnection: close\r\n");
        if let Some(token) = token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.unwrap();
        let raw = String::from_utf8(raw).unwrap();
        let (headers, body) = raw.split_once("\r\n\r\n").unwrap();
        Answer {
            status: headers[9..12].parse().unwrap(),
            headers: headers.to_string(),
            body: body.to_string(),
        }
    }

    /// A server with a token on an ephemeral port, serving `http::app`.
    async fn server(dir: &std::path::Path) -> SocketAddr {
        let engine = Engine::builder(dir)
            .tiers(TiersConfig::default())
            .clock(Arc::new(ManualClock::new(1_763_726_400)))
            .writer_threads(1)
            .background_maintenance(false)
            .open()
            .unwrap();
        let state = Arc::new(State::new(
            Arc::new(engine),
            Limits::default(),
            Some("s3cret".to_string()),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, http::app(state)).await });
        addr
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn assets_are_served_without_a_token_with_their_types_and_the_dom_contract() {
        let dir = tempfile::tempdir().unwrap();
        let addr = server(dir.path()).await;

        let page = get(addr, "/?token=s3cret", None).await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert_eq!(
            page.header("content-type"),
            Some("text/html; charset=utf-8")
        );
        assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
        assert!(page
            .header("content-security-policy")
            .is_some_and(|csp| csp.contains("connect-src 'self'")));
        for needle in [
            r#"id="resolution""#,
            r#"id="range""#,
            r#"id="display""#,
            r#"id="series-search""#,
            r#"id="charts""#,
            r#"id="status""#,
            r#"id="error""#,
            r#"id="series-combine""#,
            r#"id="agg-form""#,
            r#"id="pan-back""#,
            r#"id="pan-fwd""#,
            r#"id="zoom-back""#,
            r#"id="live""#,
            r#"id="time-form""#,
            r#"id="tz""#,
            r#"value="per_sec">avg/sec<"#,
            r#"value="total""#,
            r#"value="avg""#,
            r#"value="max""#,
            r#"value="min""#,
            r#"value="count""#,
            r#"value="p50""#,
            r#"value="p90""#,
            r#"value="p99""#,
            r#"src="assets/app.js""#,
            r#"href="assets/style.css""#,
        ] {
            assert!(page.body.contains(needle), "index.html lacks {needle}");
        }
        assert!(
            !page.body.contains("http://") && !page.body.contains("https://"),
            "the page refers to nothing outside the server"
        );

        let js = get(addr, "/assets/app.js", None).await;
        assert_eq!(js.status, 200);
        assert_eq!(
            js.header("content-type"),
            Some("text/javascript; charset=utf-8")
        );
        for needle in [
            "series-item",
            "data-series",
            "data-points",
            "data-tier",
            "data-window",
            "api/v1/query",
            "api/v1/aggregate",
            "relative_error",
            "no-percentiles",
            "api/v1/series",
            "api/v1/tiers",
            "tierdb_samples_accepted_total",
            "tierdb_samples_rejected_total",
            "Authorization",
            "Bearer ",
            "token",
        ] {
            assert!(js.body.contains(needle), "app.js lacks {needle}");
        }

        let css = get(addr, "/assets/style.css", None).await;
        assert_eq!(css.status, 200);
        assert_eq!(css.header("content-type"), Some("text/css; charset=utf-8"));
        assert!(css.body.contains("@media"), "the stylesheet is responsive");
        assert!(css.body.contains(".series-item") && css.body.contains(".chart"));

        // The API stays behind the token; so do paths nobody serves.
        assert_eq!(get(addr, "/api/v1/tiers", None).await.status, 401);
        assert_eq!(get(addr, "/metrics", None).await.status, 401);
        assert_eq!(get(addr, "/nowhere", None).await.status, 401);
        assert_eq!(get(addr, "/api/v1/tiers", Some("s3cret")).await.status, 200);
        assert_eq!(get(addr, "/nowhere", Some("s3cret")).await.status, 404);
    }
}
