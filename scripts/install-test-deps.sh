#!/usr/bin/env bash
# Installs what the test suite needs beyond the Rust toolchain: a real collectd for the
# end-to-end test in tests/it/collectd.rs (collectd -> write_graphite -> `tierdb serve`).
#
# Debian's `collectd-core` alone is enough: it ships /usr/sbin/collectd and the cpu, memory,
# load and write_graphite plugins, which link only against libc. The `collectd` package would
# add librrd and, through Recommends, the libraries of every other plugin.
#
# Idempotent: does nothing when collectd is already installed. Leaves no collectd service
# running: the package's init script and systemd unit only start with
# /etc/collectd/collectd.conf present (collectd-core does not ship one), and a temporary
# policy-rc.d forbids service starts during the install anyway.
#
# Usage: bash scripts/install-test-deps.sh   (as root, or with sudo available)
set -euo pipefail

if command -v collectd >/dev/null 2>&1 || [ -x /usr/sbin/collectd ]; then
    echo "install-test-deps: collectd already installed ($(command -v collectd || echo /usr/sbin/collectd))"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-test-deps: no apt-get here; install collectd (with its cpu, memory, load and write_graphite plugins) by hand" >&2
    exit 1
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    else
        echo "install-test-deps: must run as root (or with sudo) to apt-get install collectd-core" >&2
        exit 1
    fi
fi
as_root() { "${SUDO[@]}" "$@"; }

export DEBIAN_FRONTEND=noninteractive

LOG="$(mktemp /tmp/install-test-deps.XXXXXX.log)"
POLICY=/usr/sbin/policy-rc.d
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
# Fetch package lists only when the candidate is unknown (fresh machines have none).
policy="$(apt-cache policy collectd-core 2>/dev/null || true)"
if ! grep -q 'Candidate: [0-9]' <<<"$policy"; then
    echo "install-test-deps: apt-get update"
    quiet as_root apt-get update -qq
fi

# Forbid service starts while the package installs (invoke-rc.d and deb-systemd-invoke both
# honour policy-rc.d; exit 101 = action forbidden). Any existing policy-rc.d is put back.
if [ -e "$POLICY" ]; then
    BACKUP="$(as_root mktemp /usr/sbin/policy-rc.d.install-test-deps.XXXXXX)"
    as_root cp -p "$POLICY" "$BACKUP"
fi
POLICY_SET=1
printf '#!/bin/sh\nexit 101\n' | as_root tee "$POLICY" >/dev/null
as_root chmod 755 "$POLICY"

echo "install-test-deps: apt-get install collectd-core"
quiet as_root apt-get install -y -qq --no-install-recommends -o Dpkg::Use-Pty=0 collectd-core

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
    if [ ! -e "/usr/lib/collectd/$plugin.so" ]; then
        echo "install-test-deps: collectd plugin $plugin missing after install" >&2
        exit 1
    fi
done
echo "install-test-deps: $(/usr/sbin/collectd -h 2>/dev/null | grep -m1 -i '^collectd' || echo 'collectd installed')"
