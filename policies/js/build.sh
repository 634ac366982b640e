#!/usr/bin/env bash
# Builds the JavaScript binpack component into the policy directory
# (target/wasm32-wasip2/policy/binpack_js.wasm, or $WASMGPU_POLICY_DIR) and
# prints its path. `build.sh --toolchain` only installs the toolchain and
# prints its node_modules directory (the Go build takes the WASI adapter from
# it).
#
# The toolchain (componentize-js, jco; pinned by package-lock.json) is
# installed once per lock file into a cache outside the clone, and linked as
# node_modules; the component is cached by a hash of its sources, the WIT, the
# lock file and the Node version, so a rebuild with nothing changed is a copy.
#
# Cache: ${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}/{js-toolchain,policy-js}-<hash>/
set -euo pipefail
export LC_ALL=C

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}"
out_dir="${WASMGPU_POLICY_DIR:-$root/target/wasm32-wasip2/policy}"
mkdir -p "$cache" "$out_dir"

command -v node >/dev/null || { echo "node (20 or later) is needed to build JavaScript policies" >&2; exit 1; }
node_version="$(node --version)"
tool_hash="$( (cd "$here" && cat package.json package-lock.json; echo "$node_version") | sha256sum | cut -c1-16)"
toolchain="$cache/js-toolchain-$tool_hash"

exec 9>"$cache/.policy-js.lock"
flock 9
if [[ ! -d "$toolchain/node_modules" ]]; then
  echo "Installing the JavaScript policy toolchain into $toolchain" >&2
  tmp="$(mktemp -d "$cache/.js-toolchain.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  cp "$here/package.json" "$here/package-lock.json" "$tmp/"
  (cd "$tmp" && npm ci --no-audit --no-fund --loglevel=error >&2)
  mv -T "$tmp" "$toolchain"
  trap - EXIT
fi
ln -sfn "$toolchain/node_modules" "$here/node_modules"
if [[ "${1:-}" == "--toolchain" ]]; then
  echo "$toolchain/node_modules"
  exit 0
fi

src_hash="$( (cd "$here" && cat build.mjs sdk/*.js binpack/*.js "$root/wit/policy.wit"; echo "$tool_hash") | sha256sum | cut -c1-16)"
built="$cache/policy-js-$src_hash/binpack_js.wasm"
if [[ ! -f "$built" ]]; then
  echo "Building binpack_js.wasm (componentize-js; about a minute on 2 cores)" >&2
  tmp="$(mktemp -d "$cache/.policy-js.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  node "$here/build.mjs" --out "$tmp/binpack_js.wasm"
  mv -T "$tmp" "$(dirname "$built")"
  trap - EXIT
else
  # The declarations are cheap and not cached: keep types/ present.
  node "$here/build.mjs" --types-only
fi
cp "$built" "$out_dir/binpack_js.wasm"
echo "$out_dir/binpack_js.wasm"
