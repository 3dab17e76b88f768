#!/usr/bin/env bash
# Builds upstream Kubernetes and etcd from source (the Go module in kubernetes/, which pins the
# release) into /opt/kube-ovn-rs/kubernetes-<version>/, once per version and module contents:
#   etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl
# Nothing prebuilt is downloaded: the Go tool fetches sources from the module proxy and go.sum
# checks them. A second run with the same module is a stamp comparison (milliseconds).
#
# Prints the directory on stdout. KUBE_OVN_RS_K8S_ROOT overrides /opt/kube-ovn-rs.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$self")/../kubernetes"

version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' go.mod)
if [ -z "$version" ]; then
  echo "build-kubernetes: no 'k8s.io/kubernetes vX.Y.Z' requirement in kubernetes/go.mod" >&2
  exit 1
fi
root=${KUBE_OVN_RS_K8S_ROOT:-/opt/kube-ovn-rs}
dest="$root/kubernetes-$version"
# The stamp covers everything that decides the binaries: a changed main or pin rebuilds.
stamp=$(cat go.mod go.sum cmd/*/main.go "$self" | sha256sum | cut -d' ' -f1)
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

if [ "$(cat "$dest/.stamp" 2>/dev/null || true)" = "$stamp" ]; then
  echo "$dest"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "build-kubernetes: go not found; Go 1.24 or newer is needed to build Kubernetes $version" >&2
  exit 1
fi

echo "build-kubernetes: building Kubernetes $version and etcd into $dest (first build: several minutes)" >&2
started=$(date +%s)
# Without these the servers report v0.0.0-master and clients that compare versions complain.
minor=${version#v*.}
minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor \
  -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
staging="$dest.partial"
rm -rf "$staging"
mkdir -p "$staging"
# One `go build` for all of them, so the packages they share compile once.
CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags "$ldflags" -o "$staging/" \
  $(printf './cmd/%s ' "${binaries[@]}")
echo "$stamp" >"$staging/.stamp"
rm -rf "$dest"
mv "$staging" "$dest"
echo "build-kubernetes: built in $(($(date +%s) - started)) s, $(du -sh "$dest" | cut -f1) in $dest" >&2
echo "$dest"
