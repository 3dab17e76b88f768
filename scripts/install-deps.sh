#!/usr/bin/env bash
# Installs what the test suite and the lab need on a Debian 12 machine, as root.
# Idempotent: when every package is present it only checks, which takes well under a second.
#
# Why each package:
#   openvswitch-switch/-common  ovsdb-server, ovs-vswitchd (userspace datapath), ovs-vsctl, ovsdb-client
#   ovn-central/-host/-common   NB/SB ovsdb schemas, ovn-northd, ovn-controller, ovn-nbctl, ovn-trace
#   iproute2 iputils-ping ethtool  network namespaces, veths, ping, TX offload off in pods
#   nftables iptables           gateway NAT (nft applies our ruleset; iptables for hosts' other rules)
#   ipset                       the gateway benchmark's reference: Kube-OVN's ipset + iptables-restore
#   procps psmisc               ps/pkill are not used by tests, but ps helps when debugging a hung daemon
#   binutils                    nm, for the test that the CNI shim links no netlink/tokio/kube code
#   containernetworking-plugins the reference bridge + host-local plugins the CNI benchmark compares with,
#                               and `loopback`, which containerd's CRI runs before our conflist
#   containerd                  containerd 1.6 with its CRI plugin (and runc): the runtime of node/tests/cri.rs
#   podman busybox-static       build the pause image locally (FROM scratch + static busybox; no registry here)
#   debootstrap                 the Debian 12 base of the kube-ovn-rs image the lab builds (deploy/Dockerfile)
#   protobuf-compiler           protoc, for k8s-cri's generated CRI client (testkit feature `cri`)
#   tcpdump                     VLAN tags and addresses on the wire (`tcpdump -e`) in the underlay tests
#   bird2 frr gobgpd            real BGP and BFD peers for the speaker's tests and benchmark (bird/birdc,
#                               bgpd/bfdd/vtysh, gobgpd/gobgp); each test starts its own in a netns
set -euo pipefail

packages=(
  openvswitch-switch openvswitch-common ovn-central ovn-host ovn-common
  iproute2 iputils-ping curl ethtool nftables iptables ipset procps binutils containernetworking-plugins tcpdump
  bird2 frr gobgpd containerd podman busybox-static debootstrap protobuf-compiler
)

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

# Upstream Kubernetes (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kubectl), built from source with Go from the module kubernetes/ pins: the only Kubernetes the
# tests and the lab run. Once per version (about 4 minutes and 4 GiB of Go caches on 2 cores);
# afterwards a stamp comparison. kubectl is taken from there too, never from PATH.
if ! command -v go >/dev/null 2>&1; then
  echo "install-deps: go not found; Go 1.24 or newer is needed to build Kubernetes from source" >&2
  exit 1
fi
"$(dirname "$0")/build-kubernetes.sh" >/dev/null

# kubernetes-validate (PyPI) is no longer used: lab/tests/deploy.rs applies deploy/ to a real
# kube-apiserver, which validates every object itself. Remove what earlier runs installed.
if [ -L /usr/local/bin/kubernetes-validate ] &&
  [ "$(readlink /usr/local/bin/kubernetes-validate)" = /opt/kube-ovn-rs/kubernetes-validate/bin/kubernetes-validate ]; then
  rm -f /usr/local/bin/kubernetes-validate
  rm -rf /opt/kube-ovn-rs/kubernetes-validate
fi
