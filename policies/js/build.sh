#!/usr/bin/env bash
# Builds the JavaScript binpack component into the policy directory
# (target/wasm32-wasip2/policy/binpack_js.wasm, or $WASMGPU_POLICY_DIR) and
# prints its path. `build.sh --toolchain` only installs the toolchain and
# prints its node_modules directory (the Go build takes the WASI adapter from
# it). `build.sh --test` runs every unit test of the SDK, binpack and the
# examples natively under Node (test/*.test.js), needing no toolchain and
# writing nothing. `build.sh --agree [--seeds N --rounds N]` checks that the
# SDK's placeEach decides exactly what the Rust binpack and spread components
# decide (rust-agreement.mjs): it takes them from the policy directory
# when built there, else from deploy/policies/, and transpiles them with jco
# into the cache.
#
# Nothing here writes into the checkout but git-ignored paths: the
# node_modules link, types/ (the contract's declarations) and the component
# in the policy directory (under target/).
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
command -v node >/dev/null || { echo "node (20 or later) is needed to build JavaScript policies" >&2; exit 1; }
node_version="$(node --version)"
case "${1:-}" in
  --test)
    cd "$here"
    exec node --test test/*.test.js
    ;;
  "" | --toolchain | --agree) ;;
  *) echo "usage: $0 [--test | --toolchain | --agree [--seeds N] [--rounds N]]" >&2; exit 2 ;;
esac
mkdir -p "$cache" "$out_dir"

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
if [[ "${1:-}" == "--agree" ]]; then
  rust=()
  for name in binpack spread; do
    if [[ -f "$out_dir/$name.wasm" ]]; then rust+=("$out_dir/$name.wasm"); else rust+=("$root/deploy/policies/$name.wasm"); fi
  done
  oracle="$cache/rust-oracle-$( (cat "${rust[@]}"; echo "$tool_hash") | sha256sum | cut -c1-16)"
  if [[ ! -d "$oracle" ]]; then
    tmp="$(mktemp -d "$cache/.rust-oracle.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    "$toolchain/node_modules/.bin/jco" transpile "${rust[0]}" -o "$tmp/binpack" --name binpack --quiet >&2
    "$toolchain/node_modules/.bin/jco" transpile "${rust[1]}" -o "$tmp/spread" --name spread --quiet >&2
    mkdir -p "$tmp/node_modules/log"
    ln -s "$toolchain/node_modules/@bytecodealliance" "$tmp/node_modules/@bytecodealliance"
    printf '{"type":"module"}\n' >"$tmp/package.json"
    printf '{"name":"log","type":"module","main":"index.js"}\n' >"$tmp/node_modules/log/package.json"
    printf 'export default function log() {}\n' >"$tmp/node_modules/log/index.js"
    mv -T "$tmp" "$oracle"
    trap - EXIT
  fi
  flock -u 9
  echo "Comparing placeEach with ${rust[*]}" >&2
  exec node "$here/rust-agreement.mjs" "$oracle" "${@:2}"
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
