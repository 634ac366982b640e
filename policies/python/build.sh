#!/usr/bin/env bash
# Builds the Python binpack component into the policy directory
# (target/wasm32-wasip2/policy/binpack_py.wasm, or $WASMGPU_POLICY_DIR) and
# prints its path. `build.sh --test` runs the unit tests natively instead.
#
# componentize-py (pinned in requirements.txt) is installed once per
# requirements file and Python version into a virtual environment cached
# outside the clone; the contract's bindings (wit_world) are generated into
# bindings/ for editors and native tests; the component is cached by a hash of
# its sources, the WIT and the toolchain, so a rebuild with nothing changed is
# a copy.
#
# Cache: ${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}/{py-toolchain,policy-py}-<hash>/
set -euo pipefail
export LC_ALL=C

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}"
out_dir="${WASMGPU_POLICY_DIR:-$root/target/wasm32-wasip2/policy}"
python="${PYTHON:-python3}"
mkdir -p "$cache" "$out_dir"

py_version="$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
tool_hash="$( (cat "$here/requirements.txt"; echo "$py_version") | sha256sum | cut -c1-16)"
venv="$cache/py-toolchain-$tool_hash"

exec 9>"$cache/.policy-py.lock"
flock 9
if [[ ! -x "$venv/bin/componentize-py" ]]; then
  echo "Installing the Python policy toolchain into $venv" >&2
  tmp="$(mktemp -d "$cache/.py-toolchain.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  rm -rf "$venv"
  # Build the venv at its final path (venvs are not relocatable).
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt" >&2
  trap - EXIT
  rm -rf "$tmp"
fi

# Bindings for native tests and editors (cheap; not part of the component's key).
rm -rf "$here/bindings"
(cd "$root" && "$venv/bin/componentize-py" -d wit -w policy bindings "$here/bindings" >/dev/null)

if [[ "${1:-}" == "--test" ]]; then
  cd "$here"
  PYTHONPATH="$here/bindings:$here/binpack:$here" "$venv/bin/python" -m unittest discover -s tests
  exit 0
fi

src_hash="$( (cd "$here" && cat build.sh wasmgpu_policy/*.py binpack/*.py "$root/wit/policy.wit"; echo "$tool_hash") | sha256sum | cut -c1-16)"
built="$cache/policy-py-$src_hash/binpack_py.wasm"
if [[ ! -f "$built" ]]; then
  echo "Building binpack_py.wasm (componentize-py)" >&2
  tmp="$(mktemp -d "$cache/.policy-py.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$root" && "$venv/bin/componentize-py" -d wit -w policy componentize \
    -p "$here/binpack" -p "$here" binpack -o "$tmp/binpack_py.wasm" >&2)
  mv -T "$tmp" "$(dirname "$built")"
  trap - EXIT
fi
cp "$built" "$out_dir/binpack_py.wasm"
echo "$out_dir/binpack_py.wasm"
