#!/usr/bin/env bash
# The whole test suite, on a fresh Debian 12 machine, as root: installs what the tests need, then
# runs every test of the workspace, the ones against real ovsdb-server / OVN daemons included.
# Nothing is skipped: a test whose daemon is missing fails and says how to install it.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
# A failing test's error names what failed; anyhow's backtrace of where the error was made (20-odd
# frames of the test harness) would push that message out of a CI log that keeps only its head
# and tail. Panics still print theirs when RUST_BACKTRACE asks.
export RUST_LIB_BACKTRACE="${RUST_LIB_BACKTRACE:-0}"
# Each test process keeps its shared etcd's data in $TMPDIR/kube-ovn-rs-etcd-<pid>-*, and the next
# test process removes those whose process has exited; the last ones are removed here.
remove_etcd_dirs() {
    local dir pid
    for dir in "${TMPDIR:-/tmp}"/kube-ovn-rs-etcd-*; do
        [[ -d $dir ]] || continue
        pid=${dir##*/kube-ovn-rs-etcd-}
        pid=${pid%%-*}
        [[ -d /proc/$pid ]] || rm -rf -- "$dir"
    done
}
trap remove_etcd_dirs EXIT
cargo test --workspace --locked "$@"
