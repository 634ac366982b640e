#!/usr/bin/env bash
# Makes sure Debian's Chromium is installed (for the picture tests: a round's
# SVG from `wasmgpu policy run --render` is rendered headless to a PNG) and
# prints its path. Installs the `chromium` package with apt-get when it is
# absent; needs root for that, and says so otherwise.
#
#   install.sh          install if needed; print the binary's path
#   install.sh --path   print the path without installing (may not exist yet)
set -euo pipefail

bin="${WASMGPU_CHROMIUM:-/usr/bin/chromium}"
case "${1:-}" in
  "") ;;
  --path) echo "$bin"; exit 0 ;;
  *) echo "usage: $0 [--path]" >&2; exit 2 ;;
esac

if [[ ! -x "$bin" ]]; then
  if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
    echo "Chromium is not at $bin: install Debian's chromium package (apt-get install chromium)," >&2
    echo "or point WASMGPU_CHROMIUM at a Chromium binary" >&2
    exit 1
  fi
  echo "Installing Debian's chromium (apt-get; about a minute)" >&2
  # One install at a time, whoever asks (parallel make, two clones).
  exec 9>/var/lock/wasmgpu-chromium.lock
  flock 9
  if [[ ! -x "$bin" ]]; then
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >&2
  fi
fi
echo "$bin"
