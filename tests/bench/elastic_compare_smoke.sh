#!/usr/bin/env bash
# Smoke test of bench/elastic/compare.sh (ctest bench.elastic_compare_smoke): one run of the
# worker-kill scenario with ringtraind and with torchrun, then checks that each run recovered
# (a step of a new generation came), measured a detection and the steps lost, and that the
# table has a row per system. No timing is asserted. Exit 77 (skip) without python3-torch
# (for TORCH_PY, default /usr/bin/python3, which compare.sh uses too).
#   elastic_compare_smoke.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
SOURCE=$1 BUILD=$2 WORK=$3
if ! "${TORCH_PY:-/usr/bin/python3}" -c 'import torch' 2>/dev/null; then
  echo "SKIP: Debian's python3-torch is not installed (apt-get install python3-torch)"
  exit 77
fi
REPS=1 SCENARIOS=worker WARM=10 "$SOURCE/bench/elastic/compare.sh" "$BUILD" "$WORK" |
  tee "$WORK.table"
python3 - "$WORK" "$WORK.table" <<'PY'
import json, sys
from pathlib import Path
work, table = Path(sys.argv[1]), Path(sys.argv[2]).read_text()
for system, name in (("ours", "ringtraind"), ("torch", "torchrun")):
    r = json.loads((work / "runs" / f"{system}-worker-1" / "result.json").read_text())
    assert not r["died"], f"{system}: no step of a new generation after the kill: {r}"
    assert r["recover_s"] > 0 and r["detect_s"] is not None, f"{system}: {r}"
    assert r["detect_s"] <= r["recover_s"], f"{system}: detected after it recovered: {r}"
    assert 0 <= r["steps_lost"] <= r["step_before"], f"{system}: {r}"
    assert f"| kill -9 a worker | {name} |" in table, f"no {name} row in the table:\n{table}"
print("bench/elastic/compare.sh: both systems recovered and were measured")
PY
