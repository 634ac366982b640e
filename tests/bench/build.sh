#!/usr/bin/env bash
# Builds the end-to-end benchmark (tests/bench: the workload generator and
# kube-scheduler, from the same Kubernetes modules as tests/control-plane)
# once into a cache outside the clone, and prints the binary's path. The cache
# entry is keyed by a hash of this directory's sources, so it is reused until
# they change.
#
#   build.sh          build if needed; print the binary's path
#   build.sh --path   print the binary's path without building (may not exist yet)
#
# Cache: ${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}/bench-e2e-<hash>/
set -euo pipefail
export LC_ALL=C

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}"
hash="$(cd "$here" && sha256sum go.mod go.sum build.sh ./*.go | sha256sum | cut -c1-16)"
dir="$cache/bench-e2e-$hash"
bin="$dir/bench-e2e"

case "${1:-}" in
  "") ;;
  --path) echo "$bin"; exit 0 ;;
  *) echo "usage: $0 [--path]" >&2; exit 2 ;;
esac

if [[ ! -x "$bin" ]]; then
  mkdir -p "$cache"
  exec 9>"$cache/.bench-e2e.lock"
  flock 9
  if [[ ! -x "$bin" ]]; then
    cd "$here"
    k8s_version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)" # e.g. v1.37.2
    minor="${k8s_version#v1.}"
    minor="${minor%%.*}"
    pkg=k8s.io/component-base/version
    ldflags="-s -w -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitVersion=$k8s_version"
    ldflags+=" -X $pkg.gitCommit= -X $pkg.gitTreeState=clean"
    echo "Building the end-to-end benchmark and kube-scheduler $k8s_version into $dir" >&2
    tmp="$(mktemp -d "$cache/.bench-e2e-build.XXXXXX")"
    chmod 755 "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    start=$SECONDS
    CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp/bench-e2e" .
    mv -T "$tmp" "$dir"
    trap - EXIT
    echo "Built in $((SECONDS - start))s: $bin" >&2
  fi
fi
echo "$bin"
