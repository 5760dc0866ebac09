#!/usr/bin/env bash
# The Debian packages weft needs (weft_install_packages installs those missing) and its builds (weft_configure,
# weft_build). Sourced by ./run and ./test.
set -euo pipefail
WEFT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WEFT_PACKAGES=(build-essential cmake libgtest-dev libgmock-dev libcli11-dev
               nlohmann-json3-dev libopenmpi-dev openmpi-bin libeigen3-dev libboost-context1.81-dev zlib1g-dev python3-numpy
               dataset-fashion-mnist pkg-config pybind11-dev python3-dev python3-pytest python3-mpi4py
               python3-typing-extensions bible-kjv bible-kjv-text
               libopenblas0-pthread libdnnl-dev)

weft_install_packages() {
  local missing=()
  for p in "${WEFT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "weft: installing missing Debian packages: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

weft_configure() {  # weft_configure DIR [cmake args...]
  local dir="$1"; shift
  cmake -S "$WEFT_ROOT" -B "$WEFT_ROOT/$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
}

weft_build() {  # weft_build DIR [cmake args...]: configure, then build every target
  weft_configure "$@"
  cmake --build "$WEFT_ROOT/$1" -j "$(nproc)"
}
