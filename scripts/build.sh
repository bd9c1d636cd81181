#!/usr/bin/env bash
# Installs missing dependencies, configures (Release) and builds mpg; the targets to build may
# be given as arguments (default: everything).
#   MPG_BUILD_DIR  build directory (default: build)
#   MPG_WERROR     ON to turn compiler warnings into errors (default: OFF)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${MPG_BUILD_DIR:-build}
bash scripts/install_deps.sh
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DMPG_WERROR="${MPG_WERROR:-OFF}"
targets=()
for target in "$@"; do targets+=(--target "$target"); done
cmake --build "$build_dir" -j"$(nproc)" "${targets[@]}"
