#!/usr/bin/env bash
# The lab on a fresh Debian 12 machine, as root: installs the packages, builds the binaries
# (release), then runs `kube-ovn-lab` with the arguments given (`up` when none):
#   ./scripts/lab.sh up            # bring the lab up and print its connectivity matrix
#   ./scripts/lab.sh kubectl get pods -A -o wide
#   ./scripts/lab.sh down
# The binary is target/release/kube-ovn-lab; every verb works on it directly too.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
cargo build --release --locked --workspace --bins --quiet
if [ $# -eq 0 ]; then
  set -- up
fi
exec target/release/kube-ovn-lab "$@"
