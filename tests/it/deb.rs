//! The Debian package (#56 item 12): `cargo deb` builds it from Cargo.toml's
//! `[package.metadata.deb]`, `dpkg -i` installs it on this machine, the installed program
//! runs as the service's user the way the installed unit starts it, and `dpkg --remove` then
//! `dpkg --purge` take it away again: the data and the configuration outlive a remove, a purge
//! deletes both.
//!
//! The package holds the binary this test run was built with (the `dev` profile under
//! `cargo test`), not a release build: what is tested is the packaging (files, conffile,
//! maintainer scripts, user, directories, unit), which does not depend on the profile, and a
//! release build would add many minutes to CI. `cargo deb` alone builds the release package
//! from the same metadata (docs/install.md).
//!
//! It changes the machine it runs on (a package, a system user), so it runs only when asked:
//! `scripts/test.sh`, the test command, asks with `TIERDB_TEST_PACKAGE=1` and says so first;
//! `cargo test` alone does not run it and says how to. Needs root (dpkg), Debian's dpkg and
//! dpkg-dev, and cargo-deb 3.8.0 (`scripts/install-test-deps.sh` installs them). It refuses to run when a tierdb package, /var/lib/tierdb or /etc/tierdb is
//! already on the machine (it would replace or delete them), and undoes what it did when it
//! fails: the package purged, the directories and the `tierdb` user removed when it created
//! them. It holds the lock of `scripts/install-test-deps.sh` throughout, so the script
//! installs nothing meanwhile, and this test from another checkout waits. Where systemd runs,
//! a policy-rc.d keeps the package's service from starting (the test serves on the same
//! directory itself); in a container without systemd the postinst skips the start anyway.

use std::ffi::OsString;
use std::io::Write;
use std::net::TcpStream;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::http::{percent_encode, request};
use crate::support::process::{ensure_programs, Proc};
use crate::support::{file, unix_now};

const UNIT: &str = "/usr/lib/systemd/system/tierdb.service";
const BINARY: &str = "/usr/bin/tierdb";
const DATA: &str = "/var/lib/tierdb";
const CONFIG_DIR: &str = "/etc/tierdb";
const TIERS: &str = "/etc/tierdb/tiers.toml";
/// Where `deb-systemd-helper enable` links the unit (its `WantedBy=`).
const WANTS: &str = "/etc/systemd/system/multi-user.target.wants/tierdb.service";
const POLICY_RC_D: &str = "/usr/sbin/policy-rc.d";
/// How long a stop may take (see serve_binary's STOP_TIMEOUT for what bounds it).
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Runs `program args`, which must succeed; returns its stdout.
fn run(program: &str, args: &[&str]) -> String {
    let out = output(Command::new(program).args(args));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn output(command: &mut Command) -> Output {
    command
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"))
}

/// dpkg's status of the tierdb package, when it has one other than not installed.
fn package_status() -> Option<String> {
    let out = output(Command::new("dpkg-query").args(["-W", "-f=${Status}", "tierdb"]));
    let status = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success() && !status.contains("not-installed")).then_some(status)
}

/// The `tierdb` user's passwd entry, when there is one.
fn passwd_entry() -> Option<String> {
    let out = output(Command::new("getent").args(["passwd", "tierdb"]));
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn group_exists() -> bool {
    output(Command::new("getent").args(["group", "tierdb"]))
        .status
        .success()
}

/// What the test changed on the machine, undone on drop, so a failing test leaves nothing
/// behind: the package purged; /var/lib/tierdb and /etc/tierdb, which did not exist before
/// (checked), deleted; the user and its group deleted unless they existed before; the
/// policy-rc.d put back.
struct Machine {
    user_existed: bool,
    group_existed: bool,
    /// The policy-rc.d in place before the test's, when the test wrote one.
    policy: Option<Option<Vec<u8>>>,
}

impl Machine {
    fn restore(&mut self) {
        if package_status().is_some() {
            let out = output(Command::new("dpkg").args(["--purge", "tierdb"]));
            if !out.status.success() {
                eprintln!(
                    "cleanup: dpkg --purge tierdb: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        for dir in [DATA, CONFIG_DIR] {
            if Path::new(dir).exists() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        if !self.user_existed && passwd_entry().is_some() {
            let _ = output(Command::new("userdel").arg("tierdb"));
        }
        if !self.group_existed && group_exists() {
            let _ = output(Command::new("groupdel").arg("tierdb"));
        }
        let put_back = match self.policy.take() {
            Some(Some(before)) => std::fs::write(POLICY_RC_D, before),
            Some(None) => std::fs::remove_file(POLICY_RC_D),
            None => Ok(()),
        };
        if let Err(e) = put_back {
            eprintln!("cleanup: {POLICY_RC_D}: {e}");
        }
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        self.restore();
    }
}

/// The exclusive lock `scripts/install-test-deps.sh` takes (flock on the same file).
fn lock_installs() -> std::fs::File {
    let path = std::env::var_os("TIERDB_DEPS_LOCK")
        .unwrap_or_else(|| OsString::from("/tmp/tierdb-install-test-deps.lock"));
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", Path::new(&path).display()));
    lock.lock().expect("flock");
    lock
}

/// The cargo-deb this test needs, where `cargo install` puts it.
fn cargo_deb() -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(&std::env::var_os("HOME").expect("HOME")).join(".cargo"));
    home.join("bin/cargo-deb")
}

/// `cargo deb` on this checkout, packaging the `tierdb` binary of this test run: it sits as
/// the release binary of a scratch target directory, and `--no-build` packages it as is.
/// `--strip` without the dbgsym package and `--fast` compression keep it to seconds.
fn build_package(scratch: &Path) -> PathBuf {
    let target = scratch.join("target");
    std::fs::create_dir_all(target.join("release")).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tierdb"), target.join("release/tierdb"))
        .unwrap();
    let out_dir = scratch.join("debian");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let started = Instant::now();
    let out = output(
        Command::new(cargo)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["deb", "--no-build", "--no-dbgsym", "--strip", "--fast"])
            .args(["--offline", "--output"])
            .arg(&out_dir)
            .env("CARGO_TARGET_DIR", &target),
    );
    assert!(
        out.status.success(),
        "cargo deb: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let made: Vec<PathBuf> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    let [deb] = &made[..] else {
        panic!("cargo deb made {made:?}, not one package")
    };
    let name = deb.file_name().unwrap().to_string_lossy();
    let version = format!("tierdb_{}-1_", env!("CARGO_PKG_VERSION"));
    assert!(
        name.starts_with(&version) && name.ends_with(".deb"),
        "{name}"
    );
    eprintln!(
        "cargo deb: {} bytes in {:?}",
        std::fs::metadata(deb).unwrap().len(),
        started.elapsed()
    );
    deb.clone()
}

/// `tierdb serve` as the unit's `ExecStart` has it, as the unit's `User=` and `Group=`, from
/// `/` (systemd's working directory), with the listeners moved to ephemeral loopback ports.
fn serve_as_the_service(unit: &str, log: PathBuf) -> Proc {
    let line = unit
        .lines()
        .find_map(|line| line.strip_prefix("ExecStart="))
        .expect("the unit has an ExecStart");
    let mut words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
    assert_eq!(words[0], BINARY, "{line}");
    for flag in ["--http", "--graphite"] {
        let at = words.iter().position(|w| w == flag).expect(flag);
        words[at + 1] = "127.0.0.1:0".to_owned();
    }
    for setting in ["User=tierdb", "Group=tierdb"] {
        assert!(unit.lines().any(|l| l == setting), "{setting}");
    }
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid=tierdb", "--regid=tierdb", "--init-groups", "--"])
        .args(&words)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(file(&log));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("TIERDB_") {
            command.env_remove(name);
        }
    }
    Proc::spawn(
        "the unit's ExecStart as tierdb",
        &mut command,
        vec![log],
        false,
    )
}

fn owner(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .uid()
}

#[test]
fn the_package_installs_serves_as_its_user_and_purges_cleanly() {
    if std::env::var("TIERDB_TEST_PACKAGE").as_deref() != Ok("1") {
        eprintln!(
            "package test not run: it installs a Debian package and a system user as root; \
             scripts/test.sh runs it (TIERDB_TEST_PACKAGE=1)"
        );
        return;
    }
    let skip = std::env::var("TIERDB_SKIP_E2E").as_deref() == Ok("1");
    if !rustix::process::geteuid().is_root() {
        assert!(
            skip,
            "the package test installs with dpkg and needs root (or set TIERDB_SKIP_E2E=1 to \
             skip this end-to-end test)"
        );
        eprintln!("package test skipped: TIERDB_SKIP_E2E=1 and not root");
        return;
    }
    let cargo_deb = cargo_deb();
    // dpkg-shlibdeps (dpkg-dev) gives the package its libc6 dependency.
    let programs = [
        Path::new("/usr/bin/dpkg"),
        Path::new("/usr/bin/dpkg-shlibdeps"),
        Path::new("/usr/bin/setpriv"),
        &cargo_deb,
    ];
    if !ensure_programs(&programs, "dpkg, dpkg-dev and cargo-deb") {
        return;
    }
    let _lock = lock_installs();
    let status = package_status();
    assert!(
        status.is_none(),
        "a tierdb package is on this machine ({status:?}); the test would replace it: remove \
         it first (dpkg --purge tierdb)"
    );
    for dir in [DATA, CONFIG_DIR] {
        assert!(
            !Path::new(dir).exists(),
            "{dir} exists; the test's purge would delete it: move it away first"
        );
    }

    let scratch = tempfile::tempdir().unwrap();
    let deb = build_package(scratch.path());
    let deb_path = deb.to_str().unwrap();

    // What the package holds, before anything is installed.
    let contents = run("dpkg-deb", &["--contents", deb_path]);
    for path in [
        "./usr/bin/tierdb",
        "./usr/lib/systemd/system/tierdb.service",
        "./etc/tierdb/tiers.toml",
        "./usr/share/doc/tierdb/README.md",
        "./usr/share/doc/tierdb/docs/systemd.md",
    ] {
        assert!(
            contents.lines().any(|l| l.ends_with(path)),
            "{path} not in the package:\n{contents}"
        );
    }
    assert!(
        !contents.contains("./var/lib/tierdb"),
        "the data directory is the postinst's, not dpkg's (a remove would delete it):\n{contents}"
    );
    let version = run("dpkg-deb", &["--field", deb_path, "Version"]);
    assert_eq!(version.trim(), format!("{}-1", env!("CARGO_PKG_VERSION")));
    let depends = run("dpkg-deb", &["--field", deb_path, "Depends"]);
    assert!(
        depends.contains("adduser") && depends.contains("libc6"),
        "{depends}"
    );

    let mut machine = Machine {
        user_existed: passwd_entry().is_some(),
        group_existed: group_exists(),
        policy: None,
    };
    if Path::new("/run/systemd/system").is_dir() {
        // exit 101: action forbidden (deb-systemd-invoke asks policy-rc.d before a start).
        machine.policy = Some(std::fs::read(POLICY_RC_D).ok());
        std::fs::write(POLICY_RC_D, "#!/bin/sh\nexit 101\n").unwrap();
        std::fs::set_permissions(POLICY_RC_D, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    run("dpkg", &["--install", deb_path]);
    assert_eq!(package_status().as_deref(), Some("install ok installed"));
    // The unit is the one in docs/, and the tiers the shipped ones, as a conffile.
    let unit = std::fs::read_to_string(UNIT).unwrap();
    assert_eq!(
        unit,
        std::fs::read_to_string(repo("docs/systemd/tierdb.service")).unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(TIERS).unwrap(),
        std::fs::read_to_string(repo("tiers.toml")).unwrap()
    );
    let conffiles = run("dpkg-query", &["-W", "-f=${Conffiles}", "tierdb"]);
    assert!(conffiles.contains(TIERS), "{conffiles}");
    // Enabled as deb-systemd-helper does it, without systemd running (its link names
    // /lib/systemd/system on Debian 12, where /lib is /usr/lib).
    assert!(std::fs::symlink_metadata(WANTS).unwrap().is_symlink());
    assert_eq!(
        std::fs::canonicalize(WANTS).unwrap(),
        std::fs::canonicalize(UNIT).unwrap()
    );
    let analyze = Path::new("/usr/bin/systemd-analyze");
    if analyze.exists() {
        let out = output(Command::new(analyze).args(["verify", UNIT]));
        let said = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && said.trim().is_empty(), "{said}");
    }

    // A system user with no login, and its data directory, readable by it alone.
    let entry = passwd_entry().expect("the postinst creates the tierdb user");
    let fields: Vec<&str> = entry.split(':').collect();
    let uid: u32 = fields[2].parse().unwrap();
    assert!(uid < 1000, "a system user: {entry}");
    assert_eq!(fields[5], DATA, "{entry}");
    assert_eq!(fields[6], "/usr/sbin/nologin", "{entry}");
    let data = std::fs::metadata(DATA).unwrap();
    assert_eq!((data.uid(), data.mode() & 0o777), (uid, 0o750));

    let version = run(
        "setpriv",
        &[
            "--reuid=tierdb",
            "--regid=tierdb",
            "--init-groups",
            BINARY,
            "--version",
        ],
    );
    assert_eq!(
        version.trim(),
        format!("tierdb {}", env!("CARGO_PKG_VERSION"))
    );

    // A short serve as the service: a sample in, read back, a clean stop.
    let mut server = serve_as_the_service(&unit, scratch.path().join("serve.log"));
    let addrs = server.wait_ready();
    let minute = unix_now() - unix_now() % 60 - 60;
    let mut graphite = TcpStream::connect(addrs.graphite_tcp).unwrap();
    writeln!(graphite, "deb.check 42 {minute}").unwrap();
    drop(graphite);
    let path = format!(
        "/api/v1/query?series={}&tier=1m&from={minute}&to={}",
        percent_encode("deb.check"),
        minute + 60
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = request(addrs.http, "GET", &path, &[], b"");
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        if status == 200 && answer["points"][0][1].as_f64() == Some(42.0) {
            break;
        }
        server.assert_running();
        assert!(
            Instant::now() < deadline,
            "the sample never landed: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let stopped = server.terminate(STOP_TIMEOUT);
    assert!(stopped.success(), "{stopped}\n{}", server.diagnostics());
    let written: Vec<PathBuf> = std::fs::read_dir(DATA)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    assert!(!written.is_empty());
    for path in &written {
        assert_eq!(owner(path), uid, "{} is not the service's", path.display());
    }

    // A remove keeps the data, the configuration and the user; only the program goes.
    run("dpkg", &["--remove", "tierdb"]);
    assert_eq!(
        package_status().as_deref(),
        Some("deinstall ok config-files")
    );
    assert!(!Path::new(BINARY).exists() && !Path::new(UNIT).exists());
    for path in &written {
        assert!(path.exists(), "{} went with a remove", path.display());
    }
    assert!(Path::new(TIERS).exists());
    assert!(passwd_entry().is_some());

    // A purge deletes the data and the configuration, and the unit's links.
    run("dpkg", &["--purge", "tierdb"]);
    assert_eq!(package_status(), None);
    for path in [
        DATA,
        CONFIG_DIR,
        WANTS,
        "/etc/systemd/system/tierdb.service",
    ] {
        assert!(
            std::fs::symlink_metadata(path).is_err(),
            "{path} is left after the purge"
        );
    }
    // The user stays, as with Debian's own services (scripts/deb/postrm says why); the test
    // removes the one it made.
    assert!(passwd_entry().is_some());
    let (user_existed, group_existed) = (machine.user_existed, machine.group_existed);
    drop(machine);
    assert_eq!(passwd_entry().is_some(), user_existed);
    assert_eq!(group_exists(), group_existed);
}
