//! End to end in a real browser: `tierdb demo` (a server whose simulated agent has backfilled
//! the last few days and keeps writing) serves the dashboard, and a headless Chromium, driven
//! over WebDriver (`chromedriver` and the `fantoccini` client), loads it and works its
//! controls: charts draw points, switching the resolution redraws them from another tier,
//! switching the display redraws them as totals and maxima, clicking a series adds and removes
//! its chart, and typing in the search box narrows the series list. A screenshot of the page
//! is saved as `target/e2e/dashboard.png`; with `TIERDB_UPDATE_SCREENSHOT=1` also as
//! `docs/dashboard.png`, the README's picture.
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver`. When either is missing, the test runs
//! `scripts/install-test-deps.sh` (Debian's `chromium` and `chromium-driver`; needs root or
//! sudo), so plain `cargo test` works on a fresh machine; CI's `.ci/run` runs the script
//! before `cargo test` as well. If they still cannot be had, the test fails, so CI cannot pass
//! without running it; set `TIERDB_SKIP_E2E=1` to skip it on a machine that cannot install
//! them (CI never sets it).
//!
//! The page's DOM contract (src/server/dashboard/app.js): `#resolution` (one option per tier),
//! `#range`, `#display`, `#series-search`, `#series-list > .series-item[data-series]` (a
//! click toggles the series), `#charts > svg.chart[data-series][data-points][data-tier]
//! [data-window][data-display]` (`data-points`: non-null points drawn), `#status`, `#error`.
//!
//! chromedriver runs in a process group of its own and picks its port itself (`--port=0`);
//! the group, Chromium's processes included, is killed when the test ends, panics included.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde::Deserialize;
use serde_json::json;

use crate::support::process::Proc;
use crate::support::{file, unix_now};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// How long chromedriver may take to listen, and Chromium to start a session.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the page may take to show what a control asked for.
const PAGE_TIMEOUT: Duration = Duration::from_secs(30);

/// The headless Chromium flags: no sandbox (containers, root), no GPU, no /dev/shm (small in
/// containers), nothing that talks to the network on its own, a fixed window for the screenshot.
const CHROMIUM_ARGS: &[&str] = &[
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,900",
];

/// Everything the test reads from the page, in one script call (a snapshot: no element handle
/// outlives a redraw).
const SNAPSHOT_JS: &str = r#"
const q = (sel) => [...document.querySelectorAll(sel)];
const shown = (e) => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== 'hidden';
const error = document.getElementById('error');
const items = q('#series-list .series-item[data-series]');
return {
  tiers: q('#resolution option').map((o) => o.value),
  resolution: document.getElementById('resolution').value,
  ranges: q('#range option').map((o) => o.value),
  range: document.getElementById('range').value,
  range_seconds: Number(document.getElementById('range').selectedOptions[0]?.dataset.seconds || '0'),
  displays: q('#display option').map((o) => o.value),
  display: document.getElementById('display').value,
  listed: items.filter(shown).map((li) => li.dataset.series),
  selected: items.filter((li) => li.classList.contains('selected')).map((li) => li.dataset.series),
  charts: q('#charts svg.chart').map((c) => ({
    series: c.dataset.series || '',
    points: Number(c.dataset.points || '0'),
    tier: c.dataset.tier || '',
    window: c.dataset.window || '',
    display: c.dataset.display || '',
  })),
  error: error && !error.hidden ? error.textContent : null,
  status: document.getElementById('status') ? document.getElementById('status').innerText : null,
  series_count: Number(document.getElementById('stat-series')?.dataset.value || '0'),
  rate: document.getElementById('stat-rate')?.dataset.value || null,
  disk_rows: q('#stat-disk tr[data-tier]').length,
};
"#;

#[derive(Debug, Deserialize)]
struct Snapshot {
    tiers: Vec<String>,
    resolution: String,
    ranges: Vec<String>,
    range: String,
    /// The chosen range's span (`data-seconds` of its option).
    range_seconds: i64,
    displays: Vec<String>,
    display: String,
    /// The series items shown in the list.
    listed: Vec<String>,
    selected: Vec<String>,
    charts: Vec<Chart>,
    /// The error panel's text while it is shown.
    error: Option<String>,
    status: Option<String>,
    series_count: f64,
    /// The ingest rate (samples/s) once the page has read `/metrics` twice.
    rate: Option<String>,
    disk_rows: usize,
}

#[derive(Debug, Deserialize)]
struct Chart {
    series: String,
    points: u64,
    tier: String,
    /// `FROM..TO` in unix seconds.
    window: String,
    display: String,
}

impl Chart {
    /// `(from, to)` of the drawn window; `None` while the chart has no data.
    fn window(&self) -> Option<(i64, i64)> {
        if self.window.is_empty() {
            return None;
        }
        let parse = |s: &str| {
            s.parse::<i64>()
                .unwrap_or_else(|e| panic!("chart {self:?}: bad window: {e}"))
        };
        let (from, to) = self
            .window
            .split_once("..")
            .unwrap_or_else(|| panic!("chart {self:?}: window is not FROM..TO"));
        Some((parse(from), parse(to)))
    }
}

impl Snapshot {
    /// Every chart shows `tier` as `display`, with points, over the chosen range (give or
    /// take a bucket: a range holds at least 24).
    fn charts_show(&self, tier: &str, display: &str) -> bool {
        let range = self.range_seconds;
        !self.charts.is_empty()
            && range > 0
            && self.charts.iter().all(|c| {
                c.tier == tier
                    && c.display == display
                    && c.points > 0
                    && c.window()
                        .is_some_and(|(from, to)| (to - from - range).abs() <= range / 24)
            })
    }
}

#[test]
fn dashboard_in_headless_chromium() {
    let skip = std::env::var("TIERDB_SKIP_E2E").as_deref() == Ok("1");
    let present = || Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists();
    if !present() && !skip {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-test-deps.sh");
        let status = Command::new("bash").arg(&script).status();
        eprintln!(
            "chromium or chromedriver was missing; ran {}: {status:?}",
            script.display()
        );
    }
    if !present() {
        if skip {
            eprintln!(
                "dashboard e2e test skipped: TIERDB_SKIP_E2E=1 and {CHROMIUM} or {CHROMEDRIVER} is missing"
            );
            return;
        }
        panic!(
            "{CHROMIUM} or {CHROMEDRIVER} not found: run `bash scripts/install-test-deps.sh` to \
             install Debian's chromium and chromium-driver (or set TIERDB_SKIP_E2E=1 to skip this \
             end-to-end test)"
        );
    }
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("temp dir");

    // The server, on ephemeral ports, with a few days of data.
    let server_log = tmp.path().join("server.stderr");
    let mut server = Proc::tierdb("demo", &tmp.path().join("data"), server_log);
    let page_url = server.wait_ready().dashboard.unwrap_or_else(|| {
        panic!(
            "`tierdb: ready` before `tierdb: dashboard at`\n{}",
            server.diagnostics()
        )
    });
    eprintln!("dashboard: {page_url} ready after {:?}", started.elapsed());

    // chromedriver, in a process group of its own (Chromium joins it), on a port it picks.
    let driver_log = tmp.path().join("chromedriver.stderr");
    let mut driver = Proc::spawn(
        "chromedriver",
        Command::new(CHROMEDRIVER)
            .arg("--port=0")
            // Chromium's crash-report database and caches in the test's directory, not $HOME.
            .env("XDG_CONFIG_HOME", tmp.path().join("xdg-config"))
            .env("XDG_CACHE_HOME", tmp.path().join("xdg-cache"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(file(&driver_log)),
        vec![driver_log],
        true,
    );
    let driver_port = wait_chromedriver(&mut driver);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let profile = tmp.path().join("chromium-profile");
    let screenshot = runtime.block_on(async {
        let client = connect(driver_port, &profile, &mut driver).await;
        let shot = drive(&client, &page_url, &mut server).await;
        client.close().await.expect("close the WebDriver session");
        shot
    });
    drop(runtime);

    // The screenshot: a build artifact, and the README's picture when asked for.
    assert!(
        screenshot.starts_with(b"\x89PNG\r\n\x1a\n") && screenshot.len() > 10_000,
        "the screenshot is not a plausible PNG ({} bytes)",
        screenshot.len()
    );
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("e2e");
    std::fs::create_dir_all(&target).expect("create target/e2e");
    let artifact = target.join("dashboard.png");
    std::fs::write(&artifact, &screenshot).expect("write the screenshot");
    eprintln!("dashboard: screenshot in {}", artifact.display());
    if std::env::var("TIERDB_UPDATE_SCREENSHOT").as_deref() == Ok("1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/dashboard.png");
        std::fs::write(&docs, &screenshot).expect("write docs/dashboard.png");
        eprintln!("dashboard: screenshot in {}", docs.display());
    }

    driver.terminate(Duration::from_secs(10));
    let status = server.terminate(Duration::from_secs(20));
    assert!(
        status.success(),
        "tierdb demo exited with {status}\n{}",
        server.diagnostics()
    );
    eprintln!("dashboard: done in {:?}", started.elapsed());
}

/// A WebDriver session with headless Chromium.
async fn connect(port: u16, profile: &Path, driver: &mut Proc) -> Client {
    let mut args: Vec<String> = CHROMIUM_ARGS.iter().map(|a| a.to_string()).collect();
    // The profile in the test's temporary directory, so nothing lands in $HOME.
    args.push(format!("--user-data-dir={}", profile.display()));
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".to_string(),
        json!({ "binary": CHROMIUM, "args": args }),
    );
    let url = format!("http://127.0.0.1:{port}");
    // Two TLS crypto providers are linked into the test binary (ring, through async-nats;
    // aws-lc-rs, through fantoccini's hyper-rustls), so rustls cannot pick one by itself.
    // WebDriver runs on plain HTTP here; any provider will do.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let connecting = async {
        ClientBuilder::rustls()
            .expect("rustls client")
            .capabilities(caps)
            .connect(&url)
            .await
    };
    match tokio::time::timeout(BROWSER_TIMEOUT, connecting).await {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => panic!(
            "no WebDriver session at {url}: {e}\n{}",
            driver.diagnostics()
        ),
        Err(_) => panic!(
            "no WebDriver session at {url} within {BROWSER_TIMEOUT:?}\n{}",
            driver.diagnostics()
        ),
    }
}

/// Works the page; returns its screenshot.
async fn drive(client: &Client, page_url: &str, server: &mut Proc) -> Vec<u8> {
    client.goto(page_url).await.expect("load the dashboard");
    let title = client.title().await.expect("page title");
    assert_eq!(title, "tierdb", "page title");

    // Charts of the default selection draw points at the first tier.
    let snap = wait_for(client, server, "a chart with points", |s| {
        s.charts
            .iter()
            .any(|c| c.points > 0 && c.tier == s.resolution)
    })
    .await;
    assert_eq!(
        snap.displays,
        ["per_sec", "total", "avg", "max", "min", "count"],
        "#display options"
    );
    // The shipped tiers.toml (the demo runs in the crate's directory) is the default.
    assert_eq!(
        snap.tiers,
        ["1m", "5m", "1h", "1d"],
        "#resolution: the tiers, finest first"
    );
    assert!(!snap.ranges.is_empty() && snap.ranges.contains(&snap.range));
    assert!(!snap.listed.is_empty(), "no series listed: {snap:#?}");
    for chart in &snap.charts {
        assert!(
            snap.selected.contains(&chart.series),
            "chart of {} whose series is not selected: {snap:#?}",
            chart.series
        );
    }
    let first_tier = snap
        .charts
        .iter()
        .find(|c| c.points > 0)
        .map(|c| c.tier.clone())
        .expect("a chart with points");
    assert_eq!(
        first_tier, snap.resolution,
        "the chart's tier is the chosen one"
    );
    assert!(
        snap.tiers.contains(&first_tier),
        "{first_tier} not in {:?}",
        snap.tiers
    );

    // Another resolution: every chart is redrawn from that tier, bucket-aligned, ending now.
    let other = if first_tier != "1h" && snap.tiers.iter().any(|t| t == "1h") {
        "1h".to_string()
    } else {
        snap.tiers
            .iter()
            .find(|t| **t != first_tier)
            .expect("a second tier")
            .clone()
    };
    select(client, "#resolution", &other).await;
    let display = snap.display.clone();
    let snap = wait_for(client, server, &format!("charts at {other}"), |s| {
        s.charts_show(&other, &display)
    })
    .await;
    let now = unix_now();
    let bucket = snap.range_seconds / 24; // at most one bucket: a range holds at least 24
    for chart in &snap.charts {
        let (from, to) = chart.window().expect("a drawn chart has a window");
        assert!(from < to, "{chart:?}");
        if other == "1h" {
            assert_eq!(from % 3600, 0, "1h buckets start on the hour: {chart:?}");
            assert_eq!(to % 3600, 0, "1h buckets end on the hour: {chart:?}");
            assert!(
                chart.points <= ((to - from) / 3600) as u64,
                "more points than buckets: {chart:?}"
            );
        }
        assert!(
            (now - bucket..=now + bucket).contains(&to),
            "window {from}..{to} does not end now ({now}): {chart:?}"
        );
    }

    // Other displays: the charts are redrawn from answers in that display.
    for display in ["total", "max"] {
        select(client, "#display", display).await;
        wait_for(
            client,
            server,
            &format!("charts as {display} at {other}"),
            |s| s.display == display && s.charts_show(&other, display),
        )
        .await;
    }

    // A click on a series that has no chart adds one; a second click removes it.
    let snap = snapshot(client).await;
    let extra = snap
        .listed
        .iter()
        .find(|s| !snap.selected.contains(s))
        .cloned()
        .unwrap_or_else(|| panic!("every listed series is selected: {snap:#?}"));
    let before = snap.charts.len();
    click_series(client, &extra).await;
    wait_for(client, server, &format!("a chart of {extra}"), |s| {
        s.charts.len() == before + 1
            && s.selected.contains(&extra)
            && s.charts.iter().any(|c| c.series == extra && c.points > 0)
    })
    .await;
    click_series(client, &extra).await;
    wait_for(client, server, &format!("no chart of {extra}"), |s| {
        s.charts.len() == before && s.charts.iter().all(|c| c.series != extra)
    })
    .await;

    // Typing in the search box narrows the list to the series containing the word.
    let snap = snapshot(client).await;
    let all = snap.listed.clone();
    let word = filter_word(&all).unwrap_or_else(|| {
        panic!("no word in the series names matches some but not all of them: {all:?}")
    });
    let expected: Vec<String> = all
        .iter()
        .filter(|s| s.to_lowercase().contains(&word))
        .cloned()
        .collect();
    let search = client
        .find(Locator::Css("#series-search"))
        .await
        .expect("#series-search");
    search
        .send_keys(&word)
        .await
        .expect("type in #series-search");
    let snap = wait_for(
        client,
        server,
        &format!("the list filtered by {word:?}"),
        |s| s.listed == expected,
    )
    .await;
    assert!(
        snap.listed.len() < all.len() && !snap.listed.is_empty(),
        "{word:?} narrowed {} series to {}",
        all.len(),
        snap.listed.len()
    );
    // Emptied again (one backspace per character, as a user would), the list is whole.
    let backspaces: String = std::iter::repeat_n('\u{e003}', word.chars().count()).collect();
    search
        .send_keys(&backspaces)
        .await
        .expect("clear #series-search");
    wait_for(client, server, "the whole list again", |s| s.listed == all).await;

    // The view the screenshot shows: "clear" empties the charts, then one series of each of
    // a few metric families, as averages at 5m over a day.
    click(client, "#series-clear").await;
    wait_for(client, server, "no charts after clear", |s| {
        s.charts.is_empty() && s.selected.is_empty()
    })
    .await;
    let picked = one_per_family(&all, 3);
    let tier = if snap.tiers.iter().any(|t| t == "5m") {
        "5m".to_string()
    } else {
        other.clone()
    };
    select(client, "#resolution", &tier).await;
    let day = "option[data-seconds='86400']";
    let range = client.find(Locator::Css("#range")).await.expect("#range");
    if range.find(Locator::Css(day)).await.is_ok() {
        range
            .select_by(Locator::Css(day))
            .await
            .expect("pick a day's range");
    }
    select(client, "#display", "avg").await;
    for series in &picked {
        click_series(client, series).await;
    }
    wait_for(
        client,
        server,
        &format!("charts of {picked:?} as avg at {tier}"),
        |s| s.charts.iter().map(|c| &c.series).eq(picked.iter()) && s.charts_show(&tier, "avg"),
    )
    .await;

    // The status panel has the server's figures; the ingest rate (measured between two reads
    // of `/metrics`, 5 s apart) shows the demo's live writes. No error is shown.
    let snap = wait_for(client, server, "the status panel with live ingest", |s| {
        s.series_count > 0.0
            && s.disk_rows == s.tiers.len()
            && s.rate
                .as_deref()
                .is_some_and(|r| r.parse::<f64>().is_ok_and(|r| r > 0.0))
    })
    .await;
    assert!(
        snap.series_count >= all.len() as f64,
        "status shows {} series, the list {}",
        snap.series_count,
        all.len()
    );
    assert_eq!(snap.error, None, "the page shows an error");
    assert!(
        snap.status.as_deref().is_some_and(|s| s.contains("series")),
        "{snap:#?}"
    );

    // The picture: no focus ring on the search box.
    client
        .execute(
            "document.activeElement && document.activeElement.blur();",
            Vec::new(),
        )
        .await
        .expect("blur");
    client.screenshot().await.expect("screenshot")
}

/// Up to `n` of `names`, the first of each family (the name up to its first `.` or `{`).
fn one_per_family(names: &[String], n: usize) -> Vec<String> {
    let mut families = Vec::new();
    let mut out = Vec::new();
    for name in names {
        let family = name.split(['.', '{']).next().unwrap_or_default();
        if !families.contains(&family) && out.len() < n {
            families.push(family);
            out.push(name.clone());
        }
    }
    out
}

/// A word (a piece of a series name between `.`, `{`, `,`, `=` and `}`) that some but not
/// all of `names` contain, case-insensitively; the one that keeps the most of them.
fn filter_word(names: &[String]) -> Option<String> {
    let lower: Vec<String> = names.iter().map(|n| n.to_lowercase()).collect();
    let mut best: Option<(usize, String)> = None;
    for name in &lower {
        for word in name.split(['.', '{', '}', ',', '=', ';']) {
            if word.len() < 2 || word.chars().any(|c| c.is_whitespace()) {
                continue;
            }
            let hits = lower.iter().filter(|n| n.contains(word)).count();
            if hits > 0 && hits < lower.len() && best.as_ref().is_none_or(|(b, _)| hits > *b) {
                best = Some((hits, word.to_string()));
            }
        }
    }
    best.map(|(_, w)| w)
}

async fn snapshot(client: &Client) -> Snapshot {
    let value = client
        .execute(SNAPSHOT_JS, Vec::new())
        .await
        .expect("run the snapshot script");
    serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("snapshot {value}: {e}"))
}

/// Polls the page (every 200 ms, at most [`PAGE_TIMEOUT`]) until `done` holds; the server
/// must keep running, and the page must show no error.
async fn wait_for(
    client: &Client,
    server: &mut Proc,
    what: &str,
    done: impl Fn(&Snapshot) -> bool,
) -> Snapshot {
    let start = Instant::now();
    loop {
        let snap = snapshot(client).await;
        if done(&snap) {
            assert_eq!(snap.error, None, "the page shows an error: {snap:#?}");
            eprintln!("dashboard: {what} after {:?}", start.elapsed());
            return snap;
        }
        server.assert_running();
        if start.elapsed() > PAGE_TIMEOUT {
            panic!(
                "after {PAGE_TIMEOUT:?} still no {what}: {snap:#?}\n{}",
                server.diagnostics()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Picks `value` in the `<select>` at `css`, as a user would (a click on the option).
async fn select(client: &Client, css: &str, value: &str) {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .select_by_value(value)
        .await
        .unwrap_or_else(|e| panic!("{css}: select {value}: {e}"));
}

/// Clicks the element at `css`.
async fn click(client: &Client, css: &str) {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {css}: {e}"));
}

/// Clicks the list item of `series`. The page redraws its list now and then, so a click that
/// lands on a replaced item is tried again.
async fn click_series(client: &Client, series: &str) {
    let mut tries = 0;
    loop {
        tries += 1;
        let clicked = async {
            for item in client
                .find_all(Locator::Css("#series-list .series-item[data-series]"))
                .await?
            {
                if item.attr("data-series").await?.as_deref() == Some(series) {
                    item.click().await?;
                    return Ok(true);
                }
            }
            Ok::<_, fantoccini::error::CmdError>(false)
        };
        match clicked.await {
            Ok(true) => return,
            Ok(false) => panic!("{series} is not in the list"),
            Err(e) if tries < 3 => eprintln!("dashboard: clicking {series} again after {e}"),
            Err(e) => panic!("click {series}: {e}"),
        }
    }
}

/// Reads chromedriver's stdout until it says which port it listens on.
fn wait_chromedriver(driver: &mut Proc) -> u16 {
    let deadline = Instant::now() + BROWSER_TIMEOUT;
    loop {
        let line = driver.next_line(deadline, "`started successfully on port N`");
        if let Some(rest) = line
            .split_once("started successfully on port ")
            .map(|(_, r)| r)
        {
            return rest
                .trim()
                .trim_end_matches('.')
                .parse()
                .unwrap_or_else(|e| panic!("{line:?}: bad port: {e}"));
        }
    }
}
