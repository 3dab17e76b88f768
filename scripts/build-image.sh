#!/usr/bin/env bash
# Builds the kube-ovn-rs image (deploy/Dockerfile) on this machine, where no container registry can
# be reached but Debian's apt repositories and crates.io can, then runs `kube-ovn-controller --help`
# in it. As root, on Debian 12. Too slow for CI (a release build); docs/testing.md has a recorded run.
#
#   scripts/build-image.sh [TAG]        # default kube-ovn-rs:dev
#   BINARIES=target/release scripts/build-image.sh [TAG]
#                                       # binaries built already: no builder, no cargo in podman
#
# The two images deploy/Dockerfile starts from are made here instead of pulled:
#   - the runtime base: Debian 12 from `debootstrap --variant=minbase`, imported into podman
#     (localhost/kube-ovn-rs/debian:bookworm), built once and reused;
#   - the builder: that base with gcc and this machine's Rust toolchain (the one rust-toolchain.toml
#     selects; rustup cannot download one here), localhost/kube-ovn-rs/builder:<rust version>.
# The cargo registry cache of this machine is mounted into the build (crates need not be fetched
# again) and so is a target directory kept in /var/cache/kube-ovn-rs (a second build is quick).
# With BINARIES=DIR (kube-ovn-controller, kube-ovn-daemon, kube-ovn, kube-ovn-speaker, kube-ovn-pinger, kube-ovn-monitor in DIR),
# `--build-context binaries=DIR` replaces the Dockerfile's builder: seconds once the base and the
# packages' layer exist. The lab builds the same way (lab/src/runtime/component_image.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

tag=${1:-kube-ovn-rs:dev}
base=localhost/kube-ovn-rs/debian:bookworm
cache=/var/cache/kube-ovn-rs
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if [ "$(id -u)" -ne 0 ]; then
  echo "build-image: must run as root (debootstrap, podman)" >&2
  exit 1
fi
need=()
command -v podman >/dev/null || need+=(podman)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  echo "build-image: installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! podman image exists "$base"; then
  echo "build-image: debootstrap Debian 12 into $base"
  debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
  cat >"$work/rootfs/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SOURCES
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
  tar -C "$work/rootfs" -c . | podman import --message "debootstrap --variant=minbase bookworm" - "$base" >/dev/null
  rm -rf "$work/rootfs"
fi

build=(podman build --network=host --build-arg "RUNTIME_IMAGE=$base")
if [ -n "${BINARIES:-}" ]; then
  for b in kube-ovn-controller kube-ovn-daemon kube-ovn kube-ovn-speaker kube-ovn-pinger kube-ovn-monitor; do
    [ -x "$BINARIES/$b" ] || { echo "build-image: $BINARIES/$b is missing" >&2; exit 1; }
  done
  build+=(--build-context "binaries=$(realpath "$BINARIES")")
else
  # The toolchain rust-toolchain.toml selects, as rustup resolved it (its bin/ and lib/ only).
  cargo_bin=$(rustup which cargo)
  toolchain=$(dirname "$(dirname "$cargo_bin")")
  rust_version=$("$toolchain/bin/rustc" --version | awk '{print $2}')
  builder=localhost/kube-ovn-rs/builder:$rust_version
  if ! podman image exists "$builder"; then
    echo "build-image: builder $builder from $toolchain"
    mkdir -p "$work/builder/rust"
    cp -a "$toolchain/bin" "$toolchain/lib" "$work/builder/rust/"
    cat >"$work/builder/Containerfile" <<CONTAINERFILE
FROM $base
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      gcc libc6-dev ca-certificates && rm -rf /var/lib/apt/lists/*
COPY rust /usr/local/rust
ENV CARGO_HOME=/usr/local/cargo PATH=/usr/local/rust/bin:/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CONTAINERFILE
    podman build --network=host -t "$builder" "$work/builder"
    rm -rf "$work/builder"
  fi
  mkdir -p "$cache/target" "${CARGO_HOME:-$HOME/.cargo}/registry"
  build+=(--volume "${CARGO_HOME:-$HOME/.cargo}/registry:/usr/local/cargo/registry"
    --volume "$cache/target:/src/target" --build-arg "BUILDER_IMAGE=$builder")
fi

echo "build-image: building $tag${BINARIES:+ with the binaries of $BINARIES}"
start=$(date +%s)
"${build[@]}" -f deploy/Dockerfile -t "$tag" .
echo "build-image: built $tag in $(($(date +%s) - start)) s"

# Explicit small limits: podman copies the caller's, and some sandboxes (this workplace's among
# them) refuse a container's setrlimit to those ("error setting rlimit type 7").
run=(podman run --rm --network=none --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$tag")
echo "build-image: kube-ovn-controller --help in $tag"
help=$("${run[@]}" kube-ovn-controller --help)
echo "$help" | head -n 5
grep -q -- '--ovn-nb-addr' <<<"$help" || { echo "build-image: --help lacks --ovn-nb-addr" >&2; exit 1; }
for cmd in "kube-ovn-daemon --version" "kube-ovn-speaker --version" "ovs-vswitchd --version" \
  "ovn-northd --version" "ovn-controller --version" "nft --version" "ip -V"; do
  # shellcheck disable=SC2086 # the command's words
  printf '  %-28s %s\n' "$cmd" "$("${run[@]}" $cmd 2>&1 | head -n 1)"
done
podman image ls "$tag"
