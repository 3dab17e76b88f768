#!/usr/bin/env bash
# The whole test suite, on a fresh Debian 12 machine, as root: installs what the tests need, then
# runs every test of the workspace, the ones against real ovsdb-server / OVN daemons included.
# Nothing is skipped: a test whose daemon is missing fails and says how to install it.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
cargo test --workspace --locked "$@"
