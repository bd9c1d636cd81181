#!/usr/bin/env bash
# Builds and runs examples/quickstart: a bf16 layer (4096 tokens, 64 experts, top-8, hidden
# 4096) through mpg, checked bit for bit against the reference path and timed. Arguments go to
# the program, e.g. `bash scripts/quickstart.sh --tokens 1024 --hidden 512`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/build.sh quickstart
"${MPG_BUILD_DIR:-build}/examples/quickstart" "$@"
