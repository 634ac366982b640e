#!/usr/bin/env bash
# Builds the local control plane (tests/control-plane) once into a cache outside
# the clone and prints the path of what was asked for. The cache entry is keyed
# by a hash of this directory's sources, so it is reused until they change.
#
#   build.sh              build if needed; print the control-plane binary's path
#   build.sh --kubectl    build if needed; print the path of kubectl (same binary)
#   build.sh --path       print the binary's path without building (may not exist yet)
#   build.sh --dir        print the cache entry's directory without building
#
# Cache: ${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}/control-plane-<hash>/
set -euo pipefail
export LC_ALL=C

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}"
hash="$(cd "$here" && sha256sum go.mod go.sum build.sh ./*.go | sha256sum | cut -c1-16)"
dir="$cache/control-plane-$hash"
bin="$dir/control-plane"

case "${1:-}" in
  "") want="$bin" ;;
  --kubectl) want="$dir/kubectl" ;;
  --path) echo "$bin"; exit 0 ;;
  --dir) echo "$dir"; exit 0 ;;
  *) echo "usage: $0 [--kubectl | --path | --dir]" >&2; exit 2 ;;
esac

if [[ ! -x "$bin" ]]; then
  mkdir -p "$cache"
  # One build at a time per cache, whoever asks (parallel make, two clones).
  exec 9>"$cache/.control-plane.lock"
  flock 9
  if [[ ! -x "$bin" ]]; then
    cd "$here"
    k8s_version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)" # e.g. v1.37.2
    minor="${k8s_version#v1.}"
    minor="${minor%%.*}"
    pkg=k8s.io/component-base/version
    ldflags="-s -w -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitVersion=$k8s_version"
    ldflags+=" -X $pkg.gitCommit= -X $pkg.gitTreeState=clean"
    ldflags+=" -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "Building the control plane (kube-apiserver $k8s_version, etcd, kubectl) into $dir" >&2
    echo "(a cold build takes several minutes on 2 cores; later ones reuse the cache)" >&2
    tmp="$(mktemp -d "$cache/.control-plane-build.XXXXXX")"
    chmod 755 "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    start=$SECONDS
    CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp/control-plane" .
    ln -s control-plane "$tmp/kubectl"
    mv -T "$tmp" "$dir"
    trap - EXIT
    echo "Built in $((SECONDS - start))s: $bin" >&2
  fi
fi
echo "$want"
