#!/usr/bin/env bash
# Builds the Python binpack component into the policy directory
# (target/wasm32-wasip2/policy/binpack_py.wasm, or $WASMGPU_POLICY_DIR) and
# prints its path; builds and tests a policy kept anywhere else (--policy,
# --test-policy).
#
#   build.sh              build the component, print its path
#   build.sh --test       run every unit test of the SDK and its policies
#                         natively (every test_*.py under policies/python)
#   build.sh --toolchain  print the path of the cached componentize-py
#                         (installing it first if needed), e.g.
#                         PATH="$(dirname "$(policies/python/build.sh --toolchain)"):$PATH"
#   build.sh --bindings   print the directory of the contract's generated
#                         Python bindings (wit_world), for PYTHONPATH and editors
#   build.sh --policy DIR [--out FILE]
#                         build the policy whose sources are in DIR (anywhere
#                         on disk; `wasmgpu policy new NAME --lang python`
#                         writes one): its entry module DIR/app.py (which binds
#                         `WitWorld = export_policy(describe, allocate)`) and
#                         the other .py files under DIR (test_*.py, *_test.py,
#                         hidden directories, __pycache__, venv/ and
#                         node_modules/ left out), with the SDK; writes the
#                         component to FILE (default
#                         DIR/<DIR's name, - as _>.wasm) and prints its path
#   build.sh --test-policy DIR [UNITTEST ARGS...]
#                         run DIR's unit tests (test_*.py) natively, from DIR,
#                         with the SDK and the bindings importable; ARGS go to
#                         `unittest discover` (-v, -k PATTERN, -f)
#
# DIR and FILE may be relative to the caller's directory. Nothing is written
# into DIR but the component (--policy); tests run with
# PYTHONDONTWRITEBYTECODE=1, so not even __pycache__. Tests that hold
# decisions to the host's rules (testing.validate) run $WASMGPU (a relative
# path is the caller's), else `wasmgpu` on PATH, and skip without one.
#
# componentize-py (pinned in requirements.txt) is installed once per
# requirements file and Python version into a virtual environment cached
# outside the clone; the contract's bindings (wit_world) are generated once
# per WIT and toolchain into the cache too (nothing is written into the
# checkout); the component is cached by a hash of its sources, the WIT and
# the toolchain, so a rebuild with nothing changed is a copy.
#
# Cache: ${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}/{py-toolchain,py-bindings,policy-py}-<hash>/
set -euo pipefail
export LC_ALL=C

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${WASMGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmgpu}"
out_dir="${WASMGPU_POLICY_DIR:-$root/target/wasm32-wasip2/policy}"
python="${PYTHON:-python3}"
usage="usage: $0 [--test | --toolchain | --bindings | --policy DIR [--out FILE] | --test-policy DIR [UNITTEST ARGS...]]"
mode="${1:-}"
policy_dir=""
policy_out=""
unittest_args=()
case "$mode" in
  "" | --test | --toolchain | --bindings) ;;
  --policy | --test-policy)
    if [[ $# -lt 2 || -z "$2" ]]; then
      echo "$mode needs the policy's directory: $mode DIR (\`.\` for this one)" >&2
      exit 2
    fi
    if [[ ! -d "$2" ]]; then
      echo "$mode $2: no such directory" >&2
      exit 2
    fi
    # Resolved now, before any cd: paths are the caller's.
    policy_dir="$(cd "$2" && pwd)"
    shift 2
    if [[ "$mode" == --policy ]]; then
      if [[ $# -eq 2 && "$1" == --out && -n "$2" ]]; then
        policy_out="$(realpath -m -- "$2")"
      elif [[ $# -ne 0 ]]; then
        echo "$usage" >&2
        exit 2
      else
        name="$(basename "$policy_dir")"
        policy_out="$policy_dir/${name//-/_}.wasm"
      fi
      if [[ ! -f "$policy_dir/app.py" ]]; then
        echo "no $policy_dir/app.py: a Python policy's entry module is app.py, binding" \
          "\`WitWorld = export_policy(describe, allocate)\` (\`wasmgpu policy new NAME --lang python\` writes one)" >&2
        exit 1
      fi
    else
      unittest_args=("$@")
    fi
    ;;
  *)
    echo "$usage" >&2
    exit 2
    ;;
esac
mkdir -p "$cache"
# The wasmgpu binary the tests' `testing.validate` runs: a relative
# $WASMGPU is the caller's, so it is made absolute before the tests cd.
if [[ -n "${WASMGPU:-}" && "$WASMGPU" != /* ]]; then
  export WASMGPU="$PWD/$WASMGPU"
fi

py_version="$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
tool_hash="$( (cat "$here/requirements.txt"; echo "$py_version") | sha256sum | cut -c1-16)"
venv="$cache/py-toolchain-$tool_hash"
componentize="$venv/bin/componentize-py"

exec 9>"$cache/.policy-py.lock"
flock 9
if [[ ! -x "$componentize" ]]; then
  echo "Installing the Python policy toolchain into $venv" >&2
  rm -rf "$venv"
  # Build the venv at its final path (venvs are not relocatable); a failed
  # install leaves no componentize-py behind, so the next run starts over.
  "$python" -m venv "$venv"
  if ! "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt" >&2; then
    rm -rf "$venv"
    echo "installing $(grep -v '^#' "$here/requirements.txt" | tr '\n' ' ')failed" >&2
    exit 1
  fi
fi

if [[ "$mode" == --toolchain ]]; then
  echo "$componentize"
  exit 0
fi

# The contract's bindings, generated into the cache (keyed by the WIT and the
# toolchain), for native tests and editors; the component generates its own.
bindings_hash="$( (cat "$root/wit/policy.wit"; echo "$tool_hash") | sha256sum | cut -c1-16)"
bindings="$cache/py-bindings-$bindings_hash"
if [[ ! -d "$bindings/wit_world" ]]; then
  tmp="$(mktemp -d "$cache/.py-bindings.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$root" && "$componentize" -d wit -w policy bindings "$tmp" >/dev/null)
  rm -rf "$bindings"
  mv -T "$tmp" "$bindings"
  trap - EXIT
fi

if [[ "$mode" == --bindings ]]; then
  echo "$bindings"
  exit 0
fi

if [[ "$mode" == --test ]]; then
  cd "$here"
  # Every directory holding test_*.py files (hidden directories left out),
  # each discovered on its own; the SDK, binpack and the examples are
  # importable from all of them.
  mapfile -t dirs < <(find . -mindepth 1 -name '.*' -prune -o -name 'test_*.py' -type f -printf '%h\n' | sort -u)
  if [[ ${#dirs[@]} -eq 0 ]]; then
    echo "no test_*.py under $here" >&2
    exit 1
  fi
  pythonpath="$bindings:$here:$here/binpack"
  for example in "$here"/examples/*/; do
    [[ -d "$example" ]] && pythonpath="$pythonpath:${example%/}"
  done
  status=0
  for dir in "${dirs[@]}"; do
    echo "==> ${dir#./}" >&2
    PYTHONPATH="$pythonpath" PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m unittest discover -s "$dir" -t "$dir" -p 'test_*.py' || status=1
  done
  exit "$status"
fi

if [[ "$mode" == --test-policy ]]; then
  # From DIR, as `python -m unittest` there would; the SDK and the bindings
  # come from the cache and this checkout, nothing is copied into DIR.
  cd "$policy_dir"
  if [[ -z "$(find . -mindepth 1 \( -name '.*' -o -name venv \) -prune -o -name 'test_*.py' -type f -print -quit)" ]]; then
    echo "no test_*.py under $policy_dir" >&2
    exit 1
  fi
  exec 9>&-  # the cache is ready: other builds need not wait for the tests
  status=0
  PYTHONPATH="$bindings:$here:$policy_dir" PYTHONDONTWRITEBYTECODE=1 \
    "$venv/bin/python" -m unittest discover -s . -t . -p 'test_*.py' "${unittest_args[@]}" || status=$?
  exit "$status"
fi

if [[ "$mode" == --policy ]]; then
  # The policy's sources: every .py under DIR but its tests, hidden
  # directories, __pycache__ and virtual environments, by relative path.
  mapfile -t sources < <(cd "$policy_dir" && find . -mindepth 1 \
    \( -name '.*' -o -name __pycache__ -o -name venv -o -name node_modules \) -prune \
    -o -name '*.py' ! -name 'test_*.py' ! -name '*_test.py' -type f -printf '%P\n' | sort)
  src_hash="$( (cd "$policy_dir" && for f in "${sources[@]}"; do echo "== $f"; cat -- "$f"; done
    cd "$here" && cat build.sh wasmgpu_policy/*.py "$root/wit/policy.wit"; echo "$tool_hash") | sha256sum | cut -c1-16)"
  built="$cache/policy-py-$src_hash/policy.wasm"
  if [[ ! -f "$built" ]]; then
    echo "Building $(basename "$policy_out") from $policy_dir (componentize-py)" >&2
    # A staging copy: the policy's modules, and the SDK beside them.
    tmp="$(mktemp -d "$cache/.policy-py.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/policy" "$tmp/sdk/wasmgpu_policy" "$tmp/out"
    (cd "$policy_dir" && cp --parents -- "${sources[@]}" "$tmp/policy/")
    cp "$here"/wasmgpu_policy/*.py "$tmp/sdk/wasmgpu_policy/"
    (cd "$root" && "$componentize" -d wit -w policy componentize \
      -p "$tmp/policy" -p "$tmp/sdk" app -o "$tmp/out/policy.wasm" >&2)
    rm -rf "$(dirname "$built")"
    mv -T "$tmp/out" "$(dirname "$built")"
    rm -rf "$tmp"
    trap - EXIT
  fi
  mkdir -p "$(dirname "$policy_out")"
  cp "$built" "$policy_out"
  echo "$policy_out"
  exit 0
fi

mkdir -p "$out_dir"
src_hash="$( (cd "$here" && cat build.sh wasmgpu_policy/*.py binpack/*.py "$root/wit/policy.wit"; echo "$tool_hash") | sha256sum | cut -c1-16)"
built="$cache/policy-py-$src_hash/binpack_py.wasm"
if [[ ! -f "$built" ]]; then
  echo "Building binpack_py.wasm (componentize-py)" >&2
  # Only the SDK and binpack go into the component: a staging copy keeps
  # tests, examples and caches of the checkout out of it.
  tmp="$(mktemp -d "$cache/.policy-py.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/src/wasmgpu_policy" "$tmp/src/binpack" "$tmp/out"
  cp "$here"/wasmgpu_policy/*.py "$tmp/src/wasmgpu_policy/"
  cp "$here"/binpack/*.py "$tmp/src/binpack/"
  (cd "$root" && "$componentize" -d wit -w policy componentize \
    -p "$tmp/src/binpack" -p "$tmp/src" binpack -o "$tmp/out/binpack_py.wasm" >&2)
  rm -rf "$(dirname "$built")"
  mv -T "$tmp/out" "$(dirname "$built")"
  rm -rf "$tmp"
  trap - EXIT
fi
cp "$built" "$out_dir/binpack_py.wasm"
echo "$out_dir/binpack_py.wasm"
