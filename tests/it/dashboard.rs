//! End to end in a real browser: `tierdb demo` (a server whose simulated agent has backfilled
//! the last few days and keeps writing) serves the dashboard, and a headless Chromium, driven
//! over WebDriver (`chromedriver` and the `fantoccini` client), loads it and works its
//! controls: charts draw points, switching the resolution redraws them from another tier,
//! switching the display redraws them as totals and maxima, clicking a series adds and removes
//! its chart, and typing in the search box narrows the series list and the charts. Then, as
//! an operator would (issue #15): two series combined into one chart with a legend, an
//! aggregate chart of `max` of `cpu.*` by host, a filled chart whose axis starts at zero and
//! whose still-filling last bucket is marked partial, a drag across a chart that zooms into
//! that span at the tier the auto rule picks, a reload that restores it all from the address,
//! back, panning half a window, times in UTC, and an ingest rate averaged over more than one
//! refresh. A second demo, whose tiers add a raw tier (issue #16), is opened in the same
//! browser: "raw" is offered, its charts draw the exact points with lines to the edges from
//! the neighbours outside the window, and the displays that make no sense there are disabled.
//! Then, on the first demo, a series whose minute overflowed (two samples of 1e308, issue #54)
//! is charted: its subtitle counts the overflowed point, never an empty bucket, and so does
//! an aggregate that sums it with a minute of -Inf (NaN). Last, the
//! percentiles (issue #53): with p99 chosen, the demo's timer is drawn from the p99 the query
//! API answers for it (read by the test, bucket by bucket, from the drawn line), with the
//! relative error the answer states; a series that is not a distribution says in its chart
//! that it has no percentiles (and, combined with the timer, is left out and named so); an
//! aggregate of every series merges the timers' histograms per host and notes the series
//! left out; and a reload keeps p99.
//! A screenshot of the first page is saved as `target/e2e/dashboard.png`; with
//! `TIERDB_UPDATE_SCREENSHOT=1` also as `docs/dashboard.png`, the README's picture.
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian's `chromium` and
//! `chromium-driver`, which `scripts/test.sh` installs). When either is missing the test
//! fails, naming the install script, so CI cannot pass without running it; set
//! `TIERDB_SKIP_E2E=1` to skip it on a machine that cannot install them (CI never sets it).
//!
//! The page's DOM contract is documented at the top of src/server/dashboard/app.js: among
//! others `#resolution`, `#range`, `#display`, `#series-search`, `#series-list >
//! .series-item[data-series]` (a click toggles the series' chart), `#series-combine`,
//! `#agg-form`, `#pan-back`, `#zoom-back`, `#live`, `#tz`, `#view-info[data-mode]`,
//! `#charts > svg.chart[data-kind][data-series][data-points][data-lines][data-tier]
//! [data-window][data-display][data-unit][data-y0][data-y1][data-filled][data-partial]
//! [data-before][data-after][data-overflowed][data-relative-error][data-no-percentiles]` with
//! `.legend-item[data-name]`, `.partial[data-ts]`, `.chart-note` and
//! `.chart-message.no-percentiles`, `#status`
//! (`#stat-rate[data-window]`), `#error`.
//!
//! chromedriver runs in a process group of its own and picks its port itself (`--port=0`);
//! the group, Chromium's processes included, is killed when the test ends, panics included.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource, MouseActions, PointerAction, MOUSE_BUTTON_LEFT};
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use serde::Deserialize;
use serde_json::json;

use crate::support::process::{ensure_programs, tierdb_command, Proc};
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
  displays_disabled: q('#display option').filter((o) => o.disabled).map((o) => o.value),
  resolution_auto: document.getElementById('resolution').classList.contains('auto'),
  view_mode: document.getElementById('view-info').dataset.mode || '',
  zones: q('#tz option').map((o) => o.value),
  charts: q('#charts svg.chart').map((c) => ({
    kind: c.dataset.kind || '',
    series: c.dataset.series || '',
    points: Number(c.dataset.points || '0'),
    lines: Number(c.dataset.lines || '0'),
    tier: c.dataset.tier || '',
    window: c.dataset.window || '',
    display: c.dataset.display || '',
    unit: c.dataset.unit || '',
    y0: c.dataset.y0 ? Number(c.dataset.y0) : null,
    y1: c.dataset.y1 ? Number(c.dataset.y1) : null,
    relative_error: c.dataset.relativeError || '',
    no_percentiles: c.dataset.noPercentiles || '',
    message: c.querySelector('.chart-message')?.textContent || '',
    no_percentiles_message: !!c.querySelector('.chart-message.no-percentiles'),
    notes: [...c.querySelectorAll('.chart-note')].map((n) => n.textContent),
    // Every point drawn, [x, y]: the lines' vertices and the lone buckets' dots (not the
    // partial bucket's mark); and the plot's [left, top, right, bottom].
    drawn: [...c.querySelectorAll('path.line')]
      .flatMap((p) => [...p.getAttribute('d').matchAll(/[ML](-?[\d.]+),(-?[\d.]+)/g)].map((m) => [Number(m[1]), Number(m[2])]))
      .concat([...c.querySelectorAll('circle.dot')].map((d) => [Number(d.getAttribute('cx')), Number(d.getAttribute('cy'))])),
    plot: (() => {
      const r = c.querySelector('clipPath rect');
      if (!r) return null;
      const [x, y, w, h] = ['x', 'y', 'width', 'height'].map((a) => Number(r.getAttribute(a)));
      return [x, y + 2, x + w, y + h - 2];
    })(),
    filled: c.dataset.filled === '1',
    partial: c.dataset.partial || '',
    partial_marks: [...c.querySelectorAll('.partial')].map((m) => m.dataset.ts || ''),
    before: c.dataset.before === '1',
    after: c.dataset.after === '1',
    overflowed: Number(c.dataset.overflowed || '0'),
    filtered: c.classList.contains('filtered-out'),
    legend: [...c.querySelectorAll('.legend-item')].map((i) => i.dataset.name),
    legend_labels: [...c.querySelectorAll('.legend-text')].map((t) => t.textContent),
    subtitle: c.querySelector('.chart-sub')?.textContent || '',
    // [leftmost, rightmost] x of the first line drawn, [left, right] of the plot.
    line_span: (() => {
      const path = c.querySelector('path.line');
      const plot = c.querySelector('clipPath rect');
      if (!path || !plot) return null;
      const xs = [...path.getAttribute('d').matchAll(/[ML](-?[\d.]+),/g)].map((m) => Number(m[1]));
      const x = Number(plot.getAttribute('x'));
      return [Math.min(...xs), Math.max(...xs), x, x + Number(plot.getAttribute('width'))];
    })(),
  })),
  error: error && !error.hidden ? error.textContent : null,
  status: document.getElementById('status') ? document.getElementById('status').innerText : null,
  series_count: Number(document.getElementById('stat-series')?.dataset.value || '0'),
  rate: document.getElementById('stat-rate')?.dataset.value || null,
  time_error: document.getElementById('time-error').hidden ? null : document.getElementById('time-error').textContent,
  time_from: document.getElementById('time-from').value,
  updated: document.getElementById('updated').textContent,
  tooltip: document.getElementById('tooltip').hidden ? null : [...document.getElementById('tooltip').children].map((e) => e.textContent),
  rate_window: Number(document.getElementById('stat-rate')?.dataset.window || '0'),
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
    /// The `#display` options disabled (all but avg at the raw tier).
    displays_disabled: Vec<String>,
    /// `#resolution` shows the tier the auto rule chose for a fixed window.
    resolution_auto: bool,
    /// `live` (the range ending now) or `fixed` (a zoomed, panned or picked window).
    view_mode: String,
    /// The `#tz` options.
    zones: Vec<String>,
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
    /// `#time-error`'s text while it is shown.
    time_error: Option<String>,
    /// What `#time-from` holds.
    time_from: String,
    /// The clock of the last full refresh (`#updated`).
    updated: String,
    /// The hover readout's rows (the time, then a value per line) while it is shown.
    tooltip: Option<Vec<String>>,
    /// The seconds the ingest rate is averaged over.
    rate_window: f64,
    disk_rows: usize,
}

#[derive(Debug, Deserialize)]
struct Chart {
    /// `series`, `multi` (several series) or `aggregate`.
    kind: String,
    /// The series of a `series` chart.
    series: String,
    /// Non-null points drawn, over all lines.
    points: u64,
    /// Lines with at least one point.
    lines: u64,
    tier: String,
    /// `FROM..TO` in unix seconds.
    window: String,
    display: String,
    /// The y axis' unit.
    unit: String,
    /// The y axis' lowest value, once drawn.
    y0: Option<f64>,
    /// The y axis' highest value, once drawn.
    y1: Option<f64>,
    /// With a percentile display, the relative error the answers state.
    relative_error: String,
    /// With a percentile display, the chart's series that are not distributions.
    no_percentiles: String,
    /// The text in the plot when nothing is drawn.
    message: String,
    /// The plot says the chart's series have no percentiles.
    no_percentiles_message: bool,
    /// A percentile answer's notes shown under the subtitle.
    notes: Vec<String>,
    /// Every point drawn, `[x, y]` in chart units.
    drawn: Vec<[f64; 2]>,
    /// The plot's `[left, top, right, bottom]`.
    plot: Option<[f64; 4]>,
    /// The area under the line is filled.
    filled: bool,
    /// The start of the still-filling last bucket, when there is one.
    partial: String,
    /// `data-ts` of each partial-bucket mark drawn.
    partial_marks: Vec<String>,
    /// A raw chart drew its line to the left / right edge from the neighbour outside.
    before: bool,
    after: bool,
    /// Points whose value overflowed (`+Inf`, `-Inf`), not drawn.
    overflowed: u64,
    /// Hidden by the filter.
    filtered: bool,
    /// The legend's names, in order.
    legend: Vec<String>,
    /// The legend's labels, as shown.
    legend_labels: Vec<String>,
    subtitle: String,
    /// The first line's leftmost and rightmost x, and the plot's left and right edges.
    line_span: Option<[f64; 4]>,
}

impl Chart {
    /// Whether the first line drawn reaches the plot's left and right edges.
    fn line_reaches_edges(&self) -> (bool, bool) {
        self.line_span.map_or((false, false), |[lo, hi, x0, x1]| {
            (lo <= x0 + 0.5, hi >= x1 - 0.5)
        })
    }

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
    if !ensure_programs(
        &[Path::new(CHROMIUM), Path::new(CHROMEDRIVER)],
        "Debian's chromium and chromium-driver",
    ) {
        return;
    }
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("temp dir");

    // The server, on ephemeral ports, with a few days of data; and a second one whose tiers
    // add a raw tier (the shipped tiers.toml plus README's example), with a day of data.
    let server_log = tmp.path().join("server.stderr");
    let mut server = Proc::tierdb("demo", &tmp.path().join("data"), server_log);
    let raw_tiers = tmp.path().join("raw-tiers.toml");
    let shipped = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tiers.toml"))
        .expect("read tiers.toml");
    std::fs::write(
        &raw_tiers,
        format!("{shipped}\n[[tier]]\nname = \"raw\"\nkind = \"raw\"\nperiod = \"1d\"\nretention = \"7d\"\n"),
    )
    .expect("write the raw tiers file");
    let raw_log = tmp.path().join("raw-server.stderr");
    let mut raw_server = Proc::spawn(
        "tierdb demo (raw tier)",
        tierdb_command("demo", &tmp.path().join("raw-data"))
            .arg("--tiers")
            .arg(&raw_tiers)
            .args(["--days", "1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(file(&raw_log)),
        vec![raw_log],
        false,
    );
    let raw_url = raw_server.wait_ready().dashboard.unwrap_or_else(|| {
        panic!(
            "`tierdb: ready` before `tierdb: dashboard at`\n{}",
            raw_server.diagnostics()
        )
    });
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
        // The same browser, on the server with a raw tier.
        drive_raw(&client, &raw_url, &mut raw_server).await;
        drive_overflow(&client, &page_url, &mut server).await;
        drive_percentiles(&client, &page_url, &mut server).await;
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
    for server in [&mut server, &mut raw_server] {
        let status = server.terminate(Duration::from_secs(60));
        assert!(
            status.success(),
            "tierdb demo exited with {status}\n{}",
            server.diagnostics()
        );
    }
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
        ["per_sec", "total", "avg", "max", "min", "count", "p50", "p90", "p99"],
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
    // The filter narrows the charts too: a chart shows while its series passes it.
    let snap = wait_for(
        client,
        server,
        &format!("the list and the charts filtered by {word:?}"),
        |s| {
            s.listed == expected
                && s.charts
                    .iter()
                    .all(|c| c.filtered != c.series.to_lowercase().contains(&word))
        },
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
    wait_for(
        client,
        server,
        "the whole list and every chart again",
        |s| s.listed == all && s.charts.iter().all(|c| !c.filtered),
    )
    .await;

    // The view the screenshot shows, built as an operator would: "clear" empties the
    // charts; at 5m over a day, as averages, two hosts' cpu.user combined into one chart
    // with a legend, an aggregate of cpu.* by host, and memory.used of one host.
    click(client, "#series-clear").await;
    wait_for(client, server, "no charts after clear", |s| {
        s.charts.is_empty() && s.selected.is_empty()
    })
    .await;
    let tier = "5m";
    select(client, "#resolution", tier).await;
    select(client, "#range", "24h").await;
    select(client, "#display", "avg").await;
    let cpu: Vec<String> = all
        .iter()
        .filter(|s| s.starts_with("cpu.user{"))
        .take(2)
        .cloned()
        .collect();
    assert_eq!(cpu.len(), 2, "two cpu.user series in {all:?}");
    for series in &cpu {
        click_series(client, series).await;
    }
    wait_for(client, server, "two cpu.user charts", |s| {
        s.charts.len() == 2 && s.charts.iter().all(|c| c.points > 0 && c.tier == tier)
    })
    .await;
    click(client, "#series-combine").await;
    let snap = wait_for(client, server, "one chart of both cpu.user series", |s| {
        s.charts.len() == 1
            && s.charts[0].kind == "multi"
            && s.charts[0].lines == 2
            && s.charts[0].tier == tier
    })
    .await;
    let multi = &snap.charts[0];
    assert_eq!(multi.legend, cpu, "the legend names each series: {multi:?}");
    assert_eq!(multi.unit, "%", "cpu.* is a percentage: {multi:?}");
    assert!(
        snap.selected.is_empty(),
        "combined series have no chart of their own: {snap:#?}"
    );

    // An aggregate: the max of cpu.* per host, one line per host.
    select(client, "#agg-fn", "max").await;
    type_into(client, "#agg-match", "cpu.*").await;
    type_into(client, "#agg-by", "host").await;
    click(client, "#agg-add").await;
    let hosts: Vec<String> = {
        let mut hosts: Vec<String> = all
            .iter()
            .filter_map(|s| s.split("host=").nth(1))
            .map(|h| format!("host={}", h.trim_end_matches('}')))
            .collect();
        hosts.sort();
        hosts.dedup();
        hosts
    };
    let snap = wait_for(client, server, "an aggregate chart of cpu.* by host", |s| {
        s.charts
            .iter()
            .any(|c| c.kind == "aggregate" && c.lines as usize == hosts.len() && c.tier == tier)
    })
    .await;
    let agg = snap.charts.iter().find(|c| c.kind == "aggregate").unwrap();
    assert_eq!(agg.legend, hosts, "one line per host: {agg:?}");
    assert!(!agg.filled, "lines of an aggregate are not filled: {agg:?}");
    // Hovering reads out every line's value at that time, each named.
    hover(client, "#charts svg.chart[data-kind='aggregate']", 0.5).await;
    let snap = wait_for(client, server, "a readout of every host", |s| {
        s.tooltip
            .as_ref()
            .is_some_and(|t| t.len() == hosts.len() + 1)
    })
    .await;
    let rows = snap.tooltip.unwrap();
    for (row, host) in rows[1..].iter().zip(&hosts) {
        assert!(
            row.starts_with(&format!("{host}: ")) && row.ends_with(" %"),
            "readout row {row:?} for {host}: {rows:?}"
        );
    }

    // One series alone: its area is filled, so its axis starts at zero (memory.used of the
    // demo swings between about 1.7 and 2.8 GB, far from zero); its still-filling last
    // 5m bucket is marked partial.
    let memory = all
        .iter()
        .find(|s| s.starts_with("memory.used{"))
        .expect("a memory.used series")
        .clone();
    click_series(client, &memory).await;
    let snap = wait_for(client, server, &format!("a chart of {memory}"), |s| {
        s.charts
            .iter()
            .any(|c| c.series == memory && c.points > 0 && c.tier == tier)
    })
    .await;
    let single = snap.charts.iter().find(|c| c.series == memory).unwrap();
    assert!(
        single.filled && single.y0.is_some_and(|y| y <= 0.0),
        "a filled chart's axis starts at zero: {single:?}"
    );
    let (_, to) = single.window().expect("a window");
    let now = unix_now();
    let last = to - 300;
    assert!(
        last + 300 > now - 10,
        "the window ends with the bucket holding now ({now}): {single:?}"
    );
    assert_eq!(
        single.partial,
        last.to_string(),
        "the last bucket is partial: {single:?}"
    );
    assert_eq!(
        single.partial_marks,
        [last.to_string()],
        "one partial mark: {single:?}"
    );
    assert!(
        snap.charts.iter().all(|c| c.partial == last.to_string()),
        "every chart marks the same bucket partial: {snap:#?}"
    );

    // Drag across the middle of the single chart: the window narrows to the dragged span and
    // the tier becomes the one the auto rule picks for it (about 7 h: 1m buckets).
    let (from, to) = single.window().unwrap();
    drag_across(
        client,
        &format!("#charts svg.chart[data-series='{memory}']"),
        0.45,
        0.75,
    )
    .await;
    // The resolution box follows once every chart's read is back, a moment after the first.
    let zoomed = wait_for(client, server, "the zoomed window", |s| {
        s.view_mode == "fixed"
            && s.charts
                .iter()
                .any(|c| c.series == memory && c.tier == "1m" && c.points > 0)
            && s.resolution == "1m"
    })
    .await;
    let chart = zoomed.charts.iter().find(|c| c.series == memory).unwrap();
    let (zf, zt) = chart.window().unwrap();
    let span = to - from;
    assert!(
        zf > from + span / 4 && zt < to - span / 8 && (zt - zf) < span / 2 && zt - zf > span / 6,
        "zoomed {zf}..{zt} is not the middle of {from}..{to}: {chart:?}"
    );
    assert!(
        zoomed.resolution == "1m" && zoomed.resolution_auto,
        "#resolution shows the auto rule's tier: {zoomed:#?}"
    );
    assert!(
        zoomed.charts.iter().all(|c| c.tier == "1m"),
        "every chart reads the zoomed window: {zoomed:#?}"
    );
    // The address keeps the view: a reload restores the charts and the zoomed window.
    client.refresh().await.expect("reload the page");
    wait_for(client, server, "the same view after a reload", |s| {
        s.view_mode == "fixed"
            && s.charts.len() == 3
            && ["multi", "aggregate", "series"].iter().all(|k| {
                s.charts
                    .iter()
                    .any(|c| c.kind == *k && c.tier == "1m" && c.points > 0)
            })
            && s.charts
                .iter()
                .all(|c| c.window() == chart.window() || c.kind == "aggregate")
    })
    .await;
    // Back: the 5m view ending now again.
    click(client, "#zoom-back").await;
    wait_for(client, server, "the live view again after back", |s| {
        s.view_mode == "live" && s.charts_show(tier, "avg")
    })
    .await;

    // Panning back moves the window by half its span, at the same tier; "live" returns.
    click(client, "#pan-back").await;
    let panned = wait_for(client, server, "the window half a day back", |s| {
        s.view_mode == "fixed"
            && s.charts.iter().all(|c| {
                c.tier == tier
                    && c.window()
                        .is_some_and(|(_, t)| (t - (unix_now() - 43_200)).abs() <= 600)
            })
    })
    .await;
    assert!(
        panned
            .charts
            .iter()
            .all(|c| c.partial.is_empty() && c.partial_marks.is_empty()),
        "a window in the past has no partial bucket: {panned:#?}"
    );
    click(client, "#live").await;
    wait_for(client, server, "the live view again", |s| {
        s.view_mode == "live" && s.charts_show(tier, "avg")
    })
    .await;

    // An absolute window (unix seconds are taken, as is YYYY-MM-DD HH:MM): the two hours
    // before the last one, read at the tier the auto rule picks for two hours (1m).
    type_into(client, "#time-from", "yesterday").await;
    // The field loses focus (the user reaches for the button); a live refresh meanwhile
    // keeps what was typed.
    client
        .execute("document.activeElement.blur()", Vec::new())
        .await
        .expect("blur the time field");
    let before = snapshot(client).await.updated;
    let refreshed = wait_for(client, server, "a live refresh after typing", |s| {
        s.updated != before && s.updated.starts_with("updated")
    })
    .await;
    assert_eq!(
        refreshed.time_from, "yesterday",
        "a live refresh overwrote what was typed"
    );
    click(client, "#time-apply").await;
    wait_for(client, server, "an error for a bad time", |s| {
        s.time_error
            .as_deref()
            .is_some_and(|e| e.contains("from \"yesterday\""))
            && s.view_mode == "live"
    })
    .await;
    let (want_from, want_to) = (unix_now() - 3 * 3600, unix_now() - 3600);
    type_into(client, "#time-from", &want_from.to_string()).await;
    type_into(client, "#time-to", &want_to.to_string()).await;
    click(client, "#time-apply").await;
    wait_for(client, server, "the window picked", |s| {
        s.time_error.is_none()
            && s.view_mode == "fixed"
            && s.charts.iter().all(|c| {
                c.tier == "1m"
                    && c.window().is_some_and(|(f, t)| {
                        (f - want_from).abs() < 60 && (t - want_to).abs() < 60
                    })
            })
    })
    .await;
    click(client, "#live").await;
    wait_for(
        client,
        server,
        "the live view after the picked window",
        |s| s.view_mode == "live" && s.charts_show(tier, "avg"),
    )
    .await;

    // Times in UTC on request: the charts say so.
    assert_eq!(snap.zones, ["local", "utc"], "#tz options");
    select(client, "#tz", "utc").await;
    wait_for(client, server, "charts in UTC", |s| {
        s.charts.iter().all(|c| c.subtitle.contains(" UTC "))
    })
    .await;

    // The status panel has the server's figures; the ingest rate shows the demo's live
    // writes, averaged over more than one 5 s refresh (from 15 s up to a minute). No error
    // is shown.
    let snap = wait_for(client, server, "the status panel with live ingest", |s| {
        s.series_count > 0.0
            && s.disk_rows == s.tiers.len()
            && s.rate_window >= 14.0
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

/// A minute whose total overflowed (two samples of 1e308) is charted as overflowed: counted
/// in the subtitle, not taken for an empty bucket (issue #54); so is the NaN of an aggregate
/// that sums it with a minute of -Inf (which the dashboard took for an empty bucket).
async fn drive_overflow(client: &Client, page_url: &str, server: &mut Proc) {
    let addr: std::net::SocketAddr = page_url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .expect("the dashboard's address");
    let minute = unix_now() - unix_now() % 60 - 120;
    let body = json!([
        {"series": "overflow.total", "ts": minute, "value": 1e308},
        {"series": "overflow.total", "ts": minute + 10, "value": 1e308},
        {"series": "overflow.negative", "ts": minute, "value": -1e308},
        {"series": "overflow.negative", "ts": minute + 10, "value": -1e308},
    ]);
    let (status, text) = crate::support::http::request(
        addr,
        "POST",
        "/api/v1/write",
        &[],
        body.to_string().as_bytes(),
    );
    assert_eq!(status, 204, "{text}");
    // A fresh page lists the new series.
    client.goto(page_url).await.expect("reload the dashboard");
    wait_for(client, server, "the series list", |s| {
        s.listed.iter().any(|n| n == "overflow.total")
    })
    .await;
    click_series(client, "overflow.total").await;
    let snap = wait_for(client, server, "the overflowed chart", |s| {
        s.charts
            .iter()
            .any(|c| c.series == "overflow.total" && c.overflowed > 0)
    })
    .await;
    let chart = (snap.charts.iter())
        .find(|c| c.series == "overflow.total")
        .unwrap();
    assert_eq!(chart.overflowed, 1, "{chart:#?}");
    assert_eq!(
        chart.message, "1 overflowed (±Inf, not drawn)",
        "its only point overflowed: the window is not empty"
    );
    assert!(
        chart.subtitle.contains("1 overflowed (±Inf, not drawn)"),
        "{}",
        chart.subtitle
    );

    // The sum of +Inf and -Inf is NaN: a point with samples, counted as overflowed too,
    // never read as an empty bucket.
    select(client, "#agg-fn", "sum").await;
    type_into(client, "#agg-match", "overflow.*").await;
    click(client, "#agg-add").await;
    let snap = wait_for(client, server, "the aggregate of +Inf and -Inf", |s| {
        s.charts
            .iter()
            .any(|c| c.kind == "aggregate" && c.overflowed > 0)
    })
    .await;
    let agg = snap.charts.iter().find(|c| c.kind == "aggregate").unwrap();
    assert_eq!(agg.overflowed, 1, "{agg:#?}");
    assert_eq!(agg.message, "1 overflowed (±Inf, not drawn)", "{agg:#?}");
    assert!(
        agg.subtitle.contains("1 overflowed (±Inf, not drawn)"),
        "{}",
        agg.subtitle
    );
}

/// Percentiles (issue #53) on the first demo, whose agent times each host's requests
/// (`req.time`, a distribution): with p99 chosen at 1m over an hour, the timer's chart is drawn
/// from the query API's p99 answer for it, bucket by bucket (read back from the drawn line and
/// the axis), and states the answer's relative error; `cpu.user`, not a distribution, says in
/// its chart that it has no percentiles, as the API answers it no points; an aggregate of
/// every series merges the timers per host and shows the server's note on the series left
/// out; a reload keeps p99.
async fn drive_percentiles(client: &Client, page_url: &str, server: &mut Proc) {
    let addr: std::net::SocketAddr = page_url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .expect("the dashboard's address");
    let timer = "req.time{host=web-1}";
    let gauge = "cpu.user{host=web-1}";
    client.goto(page_url).await.expect("load the dashboard");
    wait_for(client, server, "the timer and the gauge listed", |s| {
        [timer, gauge]
            .iter()
            .all(|n| s.listed.iter().any(|l| l == n))
    })
    .await;
    click(client, "#series-clear").await;
    select(client, "#resolution", "1m").await;
    select(client, "#range", "1h").await;
    select(client, "#display", "p99").await;
    click_series(client, timer).await;
    click_series(client, gauge).await;
    let snap = wait_for(
        client,
        server,
        "p99 charts of the timer and the gauge",
        |s| {
            s.display == "p99"
                && s.charts.len() == 2
                && s.charts
                    .iter()
                    .all(|c| c.tier == "1m" && c.display == "p99")
                && s.charts.iter().any(|c| c.series == timer && c.points > 0)
                && s.charts
                    .iter()
                    .any(|c| c.series == gauge && c.no_percentiles == "1")
        },
    )
    .await;
    let chart = snap.charts.iter().find(|c| c.series == timer).unwrap();
    let (from, to) = chart.window().expect("a window");

    // What the query API answers for the same series and window, as p99 and as avg.
    let ask = |series: &str, display: &str| {
        crate::support::http::get_json(
            addr,
            &format!(
                "/api/v1/query?series={}&display={display}&tier=1m&from={from}&to={to}",
                crate::support::http::percent_encode(series)
            ),
        )
        .unwrap_or_else(|e| panic!("{series} as {display}: {e}"))
    };
    let p99 = ask(timer, "p99");
    let avg = ask(timer, "avg");
    let values = |answer: &serde_json::Value| -> std::collections::BTreeMap<i64, f64> {
        (answer["points"].as_array())
            .unwrap_or_else(|| panic!("no points in {answer}"))
            .iter()
            .filter_map(|p| Some((p[0].as_i64()?, p[1].as_f64()?)))
            .collect()
    };
    let (want, avgs) = (values(&p99), values(&avg));
    assert_eq!(p99["display"], "p99", "{p99}");
    // The still-filling bucket moves between the page's read and the test's: left out.
    let partial: Option<i64> = chart.partial.parse().ok();
    let complete: Vec<(i64, f64)> = (want.iter())
        .filter(|(ts, _)| Some(**ts) != partial && **ts + 60 <= to)
        .map(|(ts, v)| (*ts, *v))
        .collect();
    assert!(complete.len() >= 50, "an hour of p99s at 1m: {p99}");
    // Each point drawn, read back through the axes: its bucket and its value.
    let [left, top, right, bottom] = chart.plot.expect("a plot");
    let (lo, hi) = (chart.y0.unwrap(), chart.y1.expect("data-y1"));
    let tolerance = (hi - lo) * 0.003;
    let mut read: Vec<(i64, f64)> = (chart.drawn.iter())
        .map(|&[x, y]| {
            let t = from as f64 + (x - left) / (right - left) * (to - from) as f64 - 30.0;
            let ts = (t / 60.0).round() as i64 * 60;
            (ts, lo + (bottom - y) / (bottom - top) * (hi - lo))
        })
        .collect();
    read.sort_by_key(|(ts, _)| *ts);
    read.dedup_by_key(|(ts, _)| *ts);
    assert_eq!(
        read.iter().map(|(ts, _)| *ts).collect::<Vec<_>>(),
        complete.iter().map(|(ts, _)| *ts).collect::<Vec<_>>(),
        "the chart draws a point for each bucket the API answers a p99 for: {chart:?}"
    );
    for ((ts, drawn), (_, answered)) in read.iter().zip(&complete) {
        assert!(
            (drawn - answered).abs() <= tolerance,
            "bucket {ts}: drawn {drawn}, the API's p99 {answered} (±{tolerance}): {chart:?}"
        );
    }
    // The comparison tells p99 from the bucket's average: somewhere they differ by far more.
    assert!(
        complete.iter().any(|(ts, v)| avgs
            .get(ts)
            .is_some_and(|a| (v - a).abs() > 10.0 * tolerance)),
        "p99 and avg are too close to tell apart: {p99} {avg}"
    );
    // The error the answer states, in the chart's data and its subtitle.
    let stated = p99["relative_error"]
        .as_f64()
        .unwrap_or_else(|| panic!("no relative_error in {p99}"));
    let shown: f64 = chart
        .relative_error
        .parse()
        .unwrap_or_else(|e| panic!("data-relative-error {:?}: {e}", chart.relative_error));
    assert!(
        (shown - stated).abs() <= stated * 1e-9,
        "stated {stated}, shown {shown}"
    );
    assert!(
        chart.subtitle.contains("p99 ±"),
        "the subtitle states the error: {:?}",
        chart.subtitle
    );
    // Hovering reads the p99 out, with the error stated.
    hover(
        client,
        &format!("#charts svg.chart[data-series='{timer}']"),
        0.5,
    )
    .await;
    let snap = wait_for(client, server, "a readout of the p99", |s| {
        s.tooltip.as_ref().is_some_and(|t| t.len() == 3)
    })
    .await;
    let rows = snap.tooltip.unwrap();
    assert!(
        rows[2].starts_with("p99 within ±"),
        "the readout states the error: {rows:?}"
    );

    // The gauge: the API answers no points (it keeps no histograms), and its chart says so.
    let answer = ask(gauge, "p99");
    assert!(
        answer.get("points").is_none()
            && answer["note"]
                .as_str()
                .is_some_and(|n| n.contains("not distributions")),
        "a gauge has no p99: {answer}"
    );
    let chart = snap.charts.iter().find(|c| c.series == gauge).unwrap();
    assert!(
        chart.points == 0
            && chart.no_percentiles_message
            && chart.message.contains("not a distribution: no percentiles")
            && chart
                .subtitle
                .contains("no percentiles (not a distribution)"),
        "the gauge's chart says it has no percentiles: {chart:?}"
    );

    // An aggregate of every series by host: the timers' histograms merged per host, the
    // other series left out, and the server's note on them shown.
    type_into(client, "#agg-match", "*").await;
    type_into(client, "#agg-by", "host").await;
    click(client, "#agg-add").await;
    let snap = wait_for(client, server, "a p99 aggregate of every series", |s| {
        s.charts
            .iter()
            .any(|c| c.kind == "aggregate" && c.lines == 4 && c.display == "p99")
    })
    .await;
    let agg = snap.charts.iter().find(|c| c.kind == "aggregate").unwrap();
    assert_eq!(
        agg.legend,
        ["host=cache-1", "host=db-1", "host=web-1", "host=web-2"],
        "{agg:?}"
    );
    assert!(
        !agg.relative_error.is_empty()
            && agg.notes.len() == 1
            && agg.notes[0].contains("not distributions")
            && agg.notes[0].contains("left out"),
        "the aggregate states its error and notes the series left out: {agg:?}"
    );

    // The address keeps the display: a reload shows the same p99 charts.
    client.refresh().await.expect("reload the page");
    wait_for(client, server, "p99 after a reload", |s| {
        s.display == "p99"
            && s.charts.len() == 3
            && s.charts.iter().any(|c| c.series == timer && c.points > 0)
            && s.charts
                .iter()
                .any(|c| c.series == gauge && c.no_percentiles_message)
    })
    .await;

    // Combined, the timer's line is drawn and the gauge's left out, named as such.
    click(client, "#series-combine").await;
    let snap = wait_for(client, server, "a combined p99 chart", |s| {
        s.charts
            .iter()
            .any(|c| c.kind == "multi" && c.points > 0 && c.no_percentiles == "1")
    })
    .await;
    let multi = snap.charts.iter().find(|c| c.kind == "multi").unwrap();
    assert!(
        multi.lines == 1
            && multi.legend == [timer, gauge]
            && multi.legend_labels == [timer.to_string(), format!("{gauge} (no percentiles)")],
        "the gauge's line is left out, and the legend says why: {multi:?}"
    );
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

/// The page on the server with a raw tier: "raw" is offered last; chosen, the charts draw the
/// exact points of the window with their lines run to the left edge from the point before
/// it, only the "avg" display (the value itself) is offered, and leaving raw gives the
/// display chosen before back.
async fn drive_raw(client: &Client, page_url: &str, server: &mut Proc) {
    client.goto(page_url).await.expect("load the dashboard");
    let snap = wait_for(
        client,
        server,
        "charts on the server with a raw tier",
        |s| s.charts.iter().any(|c| c.points > 0),
    )
    .await;
    assert_eq!(
        snap.tiers,
        ["1m", "5m", "1h", "1d", "raw"],
        "#resolution: the rollup tiers, finest first, then raw"
    );
    select(client, "#display", "max").await;
    select(client, "#resolution", "raw").await;
    select(client, "#range", "1h").await;
    let snap = wait_for(client, server, "charts of raw points over an hour", |s| {
        s.resolution == "raw"
            && s.range_seconds == 3600
            && !s.charts.is_empty()
            && s.charts.iter().all(|c| c.tier == "raw" && c.points > 0)
    })
    .await;
    assert_eq!(snap.display, "avg", "raw points are shown as their values");
    assert_eq!(
        snap.displays_disabled,
        ["per_sec", "total", "max", "min", "count", "p50", "p90", "p99"],
        "displays that do not apply to raw points are disabled"
    );
    let now = unix_now();
    for chart in &snap.charts {
        let (from, to) = chart.window().expect("a window");
        assert!(
            (to - from - 3600).abs() <= 2 && (to - now).abs() <= 15,
            "the raw window is the hour ending now ({now}): {chart:?}"
        );
        // The demo writes every 10 s: about 360 exact points, not 60 buckets.
        assert!(
            (350..=362).contains(&chart.points),
            "an hour of 10 s points: {chart:?}"
        );
        // Without a point after the window, the line ends at the last point, which may sit
        // within a pixel of the right edge (4 s a pixel here): only the rest is checked.
        let (left, right) = chart.line_reaches_edges();
        assert!(
            chart.before && left && (right || !chart.after),
            "the line runs to the left edge from the point before, and to the right edge \
             when a point at or after now came with the answer: {chart:?}"
        );
        assert!(
            chart.partial.is_empty() && chart.partial_marks.is_empty(),
            "raw points have no partial bucket: {chart:?}"
        );
    }
    // Half an hour back: points on both sides of the window, lines to both edges.
    click(client, "#pan-back").await;
    let snap = wait_for(client, server, "raw points half an hour back", |s| {
        s.view_mode == "fixed"
            && s.charts.iter().all(|c| {
                c.tier == "raw"
                    && c.window()
                        .is_some_and(|(_, t)| (t - (unix_now() - 1800)).abs() <= 15)
            })
    })
    .await;
    for chart in &snap.charts {
        assert!(
            chart.before
                && chart.after
                && chart.line_reaches_edges() == (true, true)
                && (350..=362).contains(&chart.points),
            "lines to both edges from the neighbours: {chart:?}"
        );
    }
    click(client, "#live").await;
    select(client, "#resolution", "1m").await;
    wait_for(
        client,
        server,
        "the display chosen before raw, at 1m",
        |s| s.display == "max" && s.displays_disabled.is_empty() && s.charts_show("1m", "max"),
    )
    .await;
}

/// Replaces what the input at `css` holds with `text`, as a user does: select all (Ctrl+A) in
/// the focused field, then type. WebDriver's element clear would blur the field between the
/// clearing and the typing, and a live refresh landing there refills it.
async fn type_into(client: &Client, css: &str, text: &str) {
    let input = client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"));
    let control = char::from(Key::Control);
    input
        .send_keys(&format!("{control}a{control}{text}"))
        .await
        .unwrap_or_else(|e| panic!("type into {css}: {e}"));
}

/// Drags the mouse across the chart at `css`, from `start` to `end` of its width (fractions),
/// halfway down its plot, as a user zooming does.
async fn drag_across(client: &Client, css: &str, start: f64, end: f64) {
    let r = chart_rect(client, css).await;
    let y = (r[1] + r[3] * 0.6).round();
    let at = |f: f64| (r[0] + r[2] * f).round();
    let mouse = MouseActions::new("mouse".to_string())
        .then(PointerAction::MoveTo {
            duration: None,
            x: at(start),
            y,
        })
        .then(PointerAction::Down {
            button: MOUSE_BUTTON_LEFT,
        })
        .then(PointerAction::MoveTo {
            duration: Some(Duration::from_millis(150)),
            x: at((start + end) / 2.0),
            y,
        })
        .then(PointerAction::MoveTo {
            duration: Some(Duration::from_millis(150)),
            x: at(end),
            y,
        })
        .then(PointerAction::Up {
            button: MOUSE_BUTTON_LEFT,
        });
    client
        .perform_actions(mouse)
        .await
        .unwrap_or_else(|e| panic!("drag across {css}: {e}"));
}

/// Moves the mouse over the chart at `css`, `at` of its width across, halfway down its plot.
async fn hover(client: &Client, css: &str, at: f64) {
    let r = chart_rect(client, css).await;
    // The page hides its readout on a scroll event, which follows the scroll above
    // asynchronously: let it pass first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mouse = MouseActions::new("mouse".to_string()).then(PointerAction::MoveTo {
        duration: None,
        x: (r[0] + r[2] * at).round(),
        y: (r[1] + r[3] * 0.6).round(),
    });
    client
        .perform_actions(mouse)
        .await
        .unwrap_or_else(|e| panic!("hover over {css}: {e}"));
}

/// Scrolls the element at `css` to the middle of the window; its `[left, top, width,
/// height]` in the viewport.
async fn chart_rect(client: &Client, css: &str) -> [f64; 4] {
    let rect = client
        .execute(
            "const c = document.querySelector(arguments[0]); c.scrollIntoView({block: 'center'}); \
             const r = c.getBoundingClientRect(); return [r.left, r.top, r.width, r.height];",
            vec![json!(css)],
        )
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"));
    serde_json::from_value(rect.clone()).unwrap_or_else(|e| panic!("{rect}: {e}"))
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
