#!/usr/bin/env bash
# Builds the test OCI registry (the CNCF distribution registry, tests/registry)
# and the ORAS CLI (oras.land/oras, a `tool` of go.mod: the tests publish and
# fetch components with it too) once into a cache outside the clone, and
# prints the registry binary's path. The cache entry is keyed by a hash of
# this directory's sources, so it is reused until they change.
#
#   build.sh              build if needed; print the registry binary's path
#   build.sh --path       print the registry binary's path without building (may not exist yet)
#   build.sh --oras-path  print the oras binary's path without building (next to the registry)
#
# Cache: ${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}/registry-<hash>/
set -euo pipefail
export LC_ALL=C

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}"
hash="$(cd "$here" && sha256sum go.mod go.sum build.sh ./*.go | sha256sum | cut -c1-16)"
dir="$cache/registry-$hash"
bin="$dir/registry"
oras="$dir/oras"

case "${1:-}" in
  "") ;;
  --path) echo "$bin"; exit 0 ;;
  --oras-path) echo "$oras"; exit 0 ;;
  *) echo "usage: $0 [--path | --oras-path]" >&2; exit 2 ;;
esac

# The directory appears whole (renamed into place), both binaries in it.
if [[ ! -x "$bin" || ! -x "$oras" ]]; then
  mkdir -p "$cache"
  # One build at a time per cache, whoever asks (parallel make, two clones).
  exec 9>"$cache/.registry.lock"
  flock 9
  if [[ ! -x "$bin" || ! -x "$oras" ]]; then
    cd "$here"
    version="$(go list -m -f '{{.Version}}' github.com/distribution/distribution/v3)"
    oras_version="$(go list -m -f '{{.Version}}' oras.land/oras)"
    echo "Building the test registry (distribution $version) and oras $oras_version into $dir" >&2
    tmp="$(mktemp -d "$cache/.registry-build.XXXXXX")"
    chmod 755 "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    start=$SECONDS
    CGO_ENABLED=0 go build -mod=readonly -trimpath \
      -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=$version" \
      -o "$tmp/registry" .
    CGO_ENABLED=0 go build -mod=readonly -trimpath \
      -ldflags "-s -w" \
      -o "$tmp/oras" oras.land/oras/cmd/oras
    rm -rf "$dir"
    mv -T "$tmp" "$dir"
    trap - EXIT
    echo "Built in $((SECONDS - start))s: $bin" >&2
  fi
fi
echo "$bin"
