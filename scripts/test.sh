#!/usr/bin/env bash
# Builds everything and runs the tests; ends with ctest's summary and its exit status.
# Arguments go to ctest, e.g. `bash scripts/test.sh -R packaging`. MPG_BUILD_DIR and MPG_WERROR
# as in scripts/build.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/build.sh
cd "${MPG_BUILD_DIR:-build}"
exec ctest --output-on-failure "$@"
