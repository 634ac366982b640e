#!/usr/bin/env bash
# Builds and tests JavaScript policies (the SDK in sdk/, binpack in binpack/,
# policies of their own anywhere on disk):
#
#   build.sh              build binpack into the policy directory
#                         (target/wasm32-wasip2/policy/binpack_js.wasm, or
#                         $WASMGPU_POLICY_DIR) and print its path
#   build.sh --policy DIR [--out FILE]
#                         build the policy in DIR (any directory; the layout
#                         `wasmgpu policy new NAME --lang js` writes: policy.js
#                         exporting describe() and allocate(snapshot), importing
#                         the SDK by its absolute path, this directory's
#                         sdk/index.js) into FILE, default
#                         DIR/<DIR's name, - as _>.wasm (zone-first/zone_first.wasm),
#                         and print its path; relative paths are the caller's.
#                         The component holds DIR's modules (*.js, *.mjs, *.cjs
#                         outside node_modules and dot-directories) and the SDK
#   build.sh --test       run every unit test of the SDK, binpack and the
#                         examples natively under Node (test/*.test.js), needing
#                         no toolchain and writing nothing
#   build.sh --test-policy DIR [ARGS…]
#                         run DIR's unit tests natively under Node (`node --test
#                         ARGS…` in DIR: *.test.js and test/ files; ARGS such as
#                         --test-name-pattern=zone); the SDK is imported by its
#                         path, so nothing is installed and nothing written, in
#                         DIR or the clone
#   build.sh --toolchain  only install the toolchain and print its node_modules
#                         directory (the Go build takes the WASI adapter from it)
#   build.sh --agree [--seeds N --rounds N]
#                         check that the SDK's placeEach decides exactly what the
#                         Rust binpack and spread components decide
#                         (rust-agreement.mjs): it takes them from the policy
#                         directory when built there, else from deploy/policies/,
#                         and transpiles them with jco into the cache
#
# The tests that hold decisions to the host's validator (testing.js
# `validate`) run `wasmgpu policy validate`: $WASMGPU (made absolute here),
# else wasmgpu on PATH; with neither they skip, and the test modes say so first.
#
# Nothing here writes into the checkout but git-ignored paths: the
# node_modules link, types/ (the contract's declarations) and the component
# in the policy directory (under target/).
#
# The toolchain (componentize-js, jco; pinned by package-lock.json) is
# installed once per lock file into a cache outside the clone, and linked as
# node_modules; a component is cached by a hash of its sources (the SDK's,
# and for --policy DIR's path and modules but its tests), the WIT, the lock
# file and the Node version, so a rebuild with nothing changed is a copy.
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
usage() {
  echo "usage: $0 [--policy DIR [--out FILE] | --test | --test-policy DIR [ARGS...] | --toolchain | --agree [--seeds N] [--rounds N]]" >&2
  exit 2
}
# A directory given on the command line, made absolute (symbolic links
# resolved, as Node resolves the modules in it); an error naming the option.
directory() {
  [[ -d "$2" ]] || { echo "$1 $2: no such directory (give the directory that holds the policy's policy.js)" >&2; exit 2; }
  (cd "$2" && pwd -P)
}
# The test modes: a relative $WASMGPU is the caller's, so make it absolute
# before changing directory; say when the validator's tests will skip.
wasmgpu_for_tests() {
  if [[ -n "${WASMGPU:-}" && "$WASMGPU" != /* && "$WASMGPU" == */* ]]; then
    export WASMGPU="$PWD/$WASMGPU"
  fi
  if [[ -n "${WASMGPU:-}" ]]; then
    [[ -x "$WASMGPU" ]] || echo "note: WASMGPU=$WASMGPU is not an executable: the tests that use the host's validator will fail" >&2
  elif ! command -v wasmgpu >/dev/null; then
    echo "note: neither \$WASMGPU nor wasmgpu on PATH: the tests that use the host's validator skip (make build, then WASMGPU=$root/target/release/wasmgpu)" >&2
  fi
}
policy_dir=""
policy_out=""
case "${1:-}" in
  --test)
    wasmgpu_for_tests
    cd "$here"
    exec node --test test/*.test.js
    ;;
  --test-policy)
    [[ $# -ge 2 ]] || usage
    dir="$(directory --test-policy "$2")"
    wasmgpu_for_tests
    cd "$dir"
    # With no files named, node --test finds the tests itself (*.test.js,
    # test-*.js, files under test/; not in node_modules).
    exec node --test "${@:3}"
    ;;
  --policy)
    [[ $# -ge 2 ]] || usage
    policy_dir="$(directory --policy "$2")"
    shift 2
    while [[ $# -gt 0 ]]; do
      case "$1" in
        --out) [[ $# -ge 2 && -n "$2" ]] || usage; policy_out="$2"; shift 2 ;;
        *) usage ;;
      esac
    done
    policy_out="${policy_out:-$policy_dir/$(basename "$policy_dir" | tr - _).wasm}"
    [[ "$policy_out" == /* ]] || policy_out="$PWD/$policy_out"
    ;;
  "" | --toolchain | --agree) ;;
  *) usage ;;
esac
mkdir -p "$cache"

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
  # `make policies` (cargo) names them wasmgpu_NAME.wasm in the policy directory.
  rust=()
  for name in binpack spread; do
    if [[ -f "$out_dir/wasmgpu_$name.wasm" ]]; then rust+=("$out_dir/wasmgpu_$name.wasm")
    elif [[ -f "$out_dir/$name.wasm" ]]; then rust+=("$out_dir/$name.wasm")
    else rust+=("$root/deploy/policies/$name.wasm"); fi
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

if [[ -n "$policy_dir" ]]; then
  # The policy's modules: what the component may import from DIR (tests left out).
  mapfile -t sources < <(find "$policy_dir" -mindepth 1 \( -name node_modules -o -name '.*' \) -prune -o \
    -type f \( -name '*.js' -o -name '*.mjs' -o -name '*.cjs' \) ! -name '*.test.*' -print | sort)
  [[ -f "$policy_dir/policy.js" ]] || {
    echo "--policy $policy_dir: no policy.js there (the module that exports describe() and allocate(snapshot); \`wasmgpu policy new NAME --lang js\` writes one)" >&2
    exit 1
  }
  src_hash="$( (cd "$here" && cat build.mjs sdk/*.js "$root/wit/policy.wit"; echo "$tool_hash"; echo "$policy_dir"
    for f in "${sources[@]}"; do echo "$f"; cat "$f"; done) | sha256sum | cut -c1-16)"
  built="$cache/policy-js-$src_hash/policy.wasm"
  if [[ ! -f "$built" ]]; then
    echo "Building $policy_out (componentize-js; 10 s to a minute on 2 cores)" >&2
    tmp="$(mktemp -d "$cache/.policy-js.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    # The SDK and the policy's modules at their absolute paths under one
    # root, where the policy's imports resolve as they do natively (build.mjs).
    mkdir "$tmp/stage"
    for f in "$(cd "$here" && pwd -P)"/sdk/*.js "$here"/sdk/*.js "${sources[@]}"; do
      cp --parents "$f" "$tmp/stage/"
    done
    node "$here/build.mjs" --policy "$policy_dir" --stage "$tmp/stage" --out "$tmp/policy.wasm"
    rm -rf "$tmp/stage"
    mv -T "$tmp" "$(dirname "$built")"
    trap - EXIT
  fi
  mkdir -p "$(dirname "$policy_out")"
  cp "$built" "$policy_out"
  echo "$policy_out"
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
mkdir -p "$out_dir"
cp "$built" "$out_dir/binpack_js.wasm"
echo "$out_dir/binpack_js.wasm"
