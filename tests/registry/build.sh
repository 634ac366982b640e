#!/usr/bin/env bash
# Builds the test OCI registry (the CNCF distribution registry, tests/registry)
# once into a cache outside the clone and prints the binary's path. The cache
# entry is keyed by a hash of this directory's sources, so it is reused until
# they change.
#
#   build.sh          build if needed; print the registry binary's path
#   build.sh --path   print the binary's path without building (may not exist yet)
#
# Cache: ${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}/registry-<hash>/
set -euo pipefail
export LC_ALL=C

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}"
hash="$(cd "$here" && sha256sum go.mod go.sum build.sh ./*.go | sha256sum | cut -c1-16)"
dir="$cache/registry-$hash"
bin="$dir/registry"

case "${1:-}" in
  "") ;;
  --path) echo "$bin"; exit 0 ;;
  *) echo "usage: $0 [--path]" >&2; exit 2 ;;
esac

if [[ ! -x "$bin" ]]; then
  mkdir -p "$cache"
  # One build at a time per cache, whoever asks (parallel make, two clones).
  exec 9>"$cache/.registry.lock"
  flock 9
  if [[ ! -x "$bin" ]]; then
    cd "$here"
    version="$(go list -m -f '{{.Version}}' github.com/distribution/distribution/v3)"
    echo "Building the test registry (distribution $version) into $dir" >&2
    tmp="$(mktemp -d "$cache/.registry-build.XXXXXX")"
    chmod 755 "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    start=$SECONDS
    CGO_ENABLED=0 go build -mod=readonly -trimpath \
      -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=$version" \
      -o "$tmp/registry" .
    mv -T "$tmp" "$dir"
    trap - EXIT
    echo "Built in $((SECONDS - start))s: $bin" >&2
  fi
fi
echo "$bin"
