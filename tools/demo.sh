#!/usr/bin/env bash
# The demo run by `tools/run demo`; $1 is the build folder.
set -euo pipefail
echo "demo: nothing to run yet beyond the tests" >&2
