#!/usr/bin/env bash
# Installs, with apt-get, whichever of mpg's build dependencies (plus any packages named as
# arguments) are missing. Does nothing, not even apt-get update, when all are installed.
set -euo pipefail

packages=(cmake g++ make pkg-config libeigen3-dev libgtest-dev libgmock-dev libbenchmark-dev "$@")

if ! command -v dpkg >/dev/null; then
  echo "install_deps: no dpkg (not Debian/Ubuntu); make sure these are installed: ${packages[*]}"
  exit 0
fi

missing=()
for package in "${packages[@]}"; do
  # dpkg -s also succeeds for removed packages whose config files remain: check the state.
  if ! dpkg -s "$package" 2>/dev/null | grep -q '^Status: install ok installed'; then
    missing+=("$package")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if ! command -v sudo >/dev/null; then
    echo "install_deps: missing ${missing[*]}; run as root or install them" >&2
    exit 1
  fi
  sudo=(sudo)
fi
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update
"${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
