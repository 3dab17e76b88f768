#!/usr/bin/env bash
# Installs what the test suite and the lab need on a Debian 12 machine, as root.
# Idempotent: when every package is present it only checks, which takes well under a second.
#
# Why each package:
#   openvswitch-switch/-common  ovsdb-server, ovs-vswitchd (userspace datapath), ovs-vsctl, ovsdb-client
#   ovn-central/-host/-common   NB/SB ovsdb schemas, ovn-northd, ovn-controller, ovn-nbctl, ovn-trace
#   iproute2 iputils-ping ethtool  network namespaces, veths, ping, TX offload off in pods
#   nftables iptables           gateway NAT
#   procps psmisc               ps/pkill are not used by tests, but ps helps when debugging a hung daemon
#   binutils                    nm, for the test that the CNI shim links no netlink/tokio/kube code
#   containernetworking-plugins the reference bridge + host-local plugins the CNI benchmark compares with
#   bird2 frr gobgpd            real BGP and BFD peers for the speaker's tests and benchmark (bird/birdc,
#                               bgpd/bfdd/vtysh, gobgpd/gobgp); each test starts its own in a netns
#   kubernetes-client           kubectl, only when none is on PATH (see below)
set -euo pipefail

packages=(
  openvswitch-switch openvswitch-common ovn-central ovn-host ovn-common
  iproute2 iputils-ping ethtool nftables iptables procps binutils containernetworking-plugins
  bird2 frr gobgpd
)

# kubectl, for the API emulator's kubectl tests: the machine's own when there is one (it may be a
# newer release or a cloud SDK's version dispatcher; never replace it), else Debian's. Debian 12's
# is 1.20 and the tests need 1.27+ (they fail saying so): such a machine needs a newer kubectl.
if ! command -v kubectl >/dev/null 2>&1; then
  packages+=(kubernetes-client)
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: must run as root (apt-get, network namespaces)" >&2
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Package postinst scripts must not start system daemons: tests start their own, each in its own
  # directory. Debian's invoke-rc.d honours policy-rc.d; install one only for the duration of apt.
  policy=/usr/sbin/policy-rc.d
  added_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    added_policy=1
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ "$added_policy" = 1 ] && rm -f "$policy"
fi

# A toolchain that speaks edition 2024 is required; there is no internet to fetch one here, so say so.
if ! command -v cargo >/dev/null 2>&1; then
  echo "install-deps: cargo not found; install Rust (rustup, toolchain in rust-toolchain.toml) first" >&2
  exit 1
fi
