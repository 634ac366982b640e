#!/usr/bin/env bash
# Builds the rule checker (tests/promtool/main.go: `promtool check rules`,
# from the packages of the Prometheus module go.mod pins) once into a cache
# outside the clone and prints its path. The cache entry is keyed by a hash
# of this directory's sources, so it is reused until they change.
#
#   build.sh              build if needed; print the promtool binary's path
#   build.sh --path       print the binary's path without building (may not exist yet)
#   build.sh --dir        print the cache entry's directory without building
#
# Cache: ${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}/promtool-<hash>/
set -euo pipefail
export LC_ALL=C

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}"
hash="$(cd "$here" && sha256sum go.mod go.sum build.sh ./*.go | sha256sum | cut -c1-16)"
dir="$cache/promtool-$hash"
bin="$dir/promtool"

case "${1:-}" in
  "") ;;
  --path) echo "$bin"; exit 0 ;;
  --dir) echo "$dir"; exit 0 ;;
  *) echo "usage: $0 [--path | --dir]" >&2; exit 2 ;;
esac

if [[ ! -x "$bin" ]]; then
  mkdir -p "$cache"
  # One build at a time per cache, whoever asks (parallel make, two clones).
  exec 9>"$cache/.promtool.lock"
  flock 9
  if [[ ! -x "$bin" ]]; then
    cd "$here"
    version="$(go list -m -f '{{.Version}}' github.com/prometheus/prometheus)"   # e.g. v0.316.0 (Prometheus 3.16.0)
    echo "Building promtool check rules (Prometheus module $version) into $dir" >&2
    echo "(a cold build takes about a minute on 2 cores; later ones reuse the cache)" >&2
    tmp="$(mktemp -d "$cache/.promtool-build.XXXXXX")"
    chmod 755 "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    start=$SECONDS
    CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w" \
      -o "$tmp/promtool" .
    rm -rf "$dir"
    mv -T "$tmp" "$dir"
    trap - EXIT
    echo "Built in $((SECONDS - start))s: $bin" >&2
  fi
fi
echo "$bin"
