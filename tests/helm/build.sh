#!/usr/bin/env bash
# Builds Helm (helm.sh/helm/v3/cmd/helm, a `tool` of tests/helm/go.mod) once
# into a cache outside the clone and prints its path. The cache entry is keyed
# by a hash of this directory's sources, so it is reused until they change.
#
#   build.sh              build if needed; print the helm binary's path
#   build.sh --path       print the binary's path without building (may not exist yet)
#   build.sh --dir        print the cache entry's directory without building
#
# Cache: ${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}/helm-<hash>/
set -euo pipefail
export LC_ALL=C

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}"
hash="$(cd "$here" && sha256sum go.mod go.sum build.sh | sha256sum | cut -c1-16)"
dir="$cache/helm-$hash"
bin="$dir/helm"

case "${1:-}" in
  "") ;;
  --path) echo "$bin"; exit 0 ;;
  --dir) echo "$dir"; exit 0 ;;
  *) echo "usage: $0 [--path | --dir]" >&2; exit 2 ;;
esac

if [[ ! -x "$bin" ]]; then
  mkdir -p "$cache"
  # One build at a time per cache, whoever asks (parallel make, two clones).
  exec 9>"$cache/.helm.lock"
  flock 9
  if [[ ! -x "$bin" ]]; then
    cd "$here"
    version="$(go list -m -f '{{.Version}}' helm.sh/helm/v3)"                # e.g. v3.22.0
    client_go="$(go list -m -f '{{.Version}}' k8s.io/client-go)"            # e.g. v0.37.0
    minor="${client_go#v0.}"
    minor="${minor%%.*}"
    # What Helm's Makefile stamps in: its version, and the Kubernetes version
    # `helm template` and `helm lint` assume (.Capabilities.KubeVersion) when
    # no cluster is asked, that of the client-go it is built with.
    ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
    ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
    for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
      ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
    done
    echo "Building helm $version (Kubernetes 1.$minor) into $dir" >&2
    echo "(a cold build takes a few minutes on 2 cores; later ones reuse the cache)" >&2
    tmp="$(mktemp -d "$cache/.helm-build.XXXXXX")"
    chmod 755 "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    start=$SECONDS
    CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" \
      -o "$tmp/helm" helm.sh/helm/v3/cmd/helm
    rm -rf "$dir"
    mv -T "$tmp" "$dir"
    trap - EXIT
    echo "Built in $((SECONDS - start))s: $bin" >&2
  fi
fi
echo "$bin"
