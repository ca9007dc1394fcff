#!/usr/bin/env bash
# The distributed engine's per-step host overhead on CUDA, side by side (issue 16): config S,
# fp32, train.device = "cuda", evaluation off, STEPS steps (default 3000) of
#   - `ringtrain train` in one process (the single-process Trainer), and
#   - `ringtrain train --layout dp=1 --ranks 1` (the distributed engine on one NCCL rank: the
#     path of every daemon worker),
# in ROUNDS (default 2) alternating rounds. Each run reports the median and the mean of the
# per-step tokens/s that its progress lines print (every 50 steps; the first 10% of the steps
# are warm-up and left out) and its final loss; the two must train the same numbers.
#   usage: bench/step/gpu_engine_overhead.sh BUILD_DIR DATA_DIR [STEPS] [ROUNDS]
# DATA_DIR holds train_*.bin and val.bin from `ringtrain data prepare` (byte tokens). About a
# minute on an H200 with the defaults.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
usage="usage: bench/step/gpu_engine_overhead.sh BUILD_DIR DATA_DIR [STEPS] [ROUNDS]"
BUILD=$(cd "${1:?$usage}" && pwd)
DATA=$(cd "${2:?$usage}" && pwd)
STEPS=${3:-3000}
ROUNDS=${4:-2}
RINGTRAIN=$BUILD/tools/ringtrain/ringtrain
[ -x "$RINGTRAIN" ] || { echo "no $RINGTRAIN: build the ringtrain target first" >&2; exit 1; }
compgen -G "$DATA/train_*.bin" >/dev/null ||
  { echo "no train_*.bin in $DATA: run 'ringtrain data prepare --input ... --out $DATA'" >&2; exit 1; }

common=(--log-level warn train --config "$ROOT/configs/s.toml" --steps "$STEPS"
        --set 'train.device="cuda"' --set "data.dir=\"$DATA\"" --set eval.every=0
        --set train.log_every=50 --set ckpt.every=0 --set 'metrics.path=""')

# Runs one configuration; prints "NAME median_tokens_per_s mean_tokens_per_s final_loss".
run() {
  local name=$1
  shift
  local out
  if ! out=$("$RINGTRAIN" "${common[@]}" "$@" 2>&1); then
    echo "$name failed:" >&2
    echo "$out" | tail -20 >&2
    exit 1
  fi
  # Progress lines: "step N/M loss L lr R tokens/s T ..." (one process) and
  # "step N/M  loss L  lr R  T tok/s" (rank 0 of the engine).
  echo "$out" | /usr/bin/python3 -c '
import re, statistics, sys
name, steps = sys.argv[1], int(sys.argv[2])
rates, loss = [], None
for line in sys.stdin:
    m = re.search(r"step (\d+)/\d+\s+loss ([0-9.naif]+).*?(?:tokens/s ([0-9.]+)|([0-9.]+) tok/s)", line)
    if not m:
        continue
    loss = m.group(2)
    if int(m.group(1)) > steps // 10:
        rates.append(float(m.group(3) or m.group(4)))
if not rates:
    sys.exit(f"{name}: no progress lines with tokens/s in its output")
print(name, f"{statistics.median(rates):.0f}", f"{statistics.mean(rates):.0f}", loss)
' "$name" "$STEPS"
}

results=()
for ((round = 0; round < ROUNDS; ++round)); do
  results+=("$(run one_process)")
  results+=("$(run engine_dp1 --layout dp=1 --ranks 1)")
done

/usr/bin/python3 - "$STEPS" "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" \
  "${results[@]}" <<'PY'
import sys
steps, gpu, rows = sys.argv[1], sys.argv[2] or "unknown GPU", sys.argv[3:]
print(f"Config S fp32 on CUDA ({gpu}), {steps} steps, eval off; tokens/s per step, median and "
      "mean over the progress samples after warm-up; one line per run, rounds alternating.\n")
print("| run | median tokens/s | mean tokens/s | final loss |")
print("|---|---|---|---|")
best = {}
for row in rows:
    name, median, mean, loss = row.split()
    print(f"| {name} | {median} | {mean} | {loss} |")
    best[name] = max(best.get(name, 0.0), float(median))
if "one_process" in best and "engine_dp1" in best:
    print(f"\nbest medians: one process {best['one_process']:.0f}, engine dp=1 "
          f"{best['engine_dp1']:.0f} tokens/s: the engine at "
          f"{best['engine_dp1'] / best['one_process']:.2f}x the single-process trainer")
PY
