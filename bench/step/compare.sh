#!/usr/bin/env bash
# Side-by-side training-step benchmark, one invocation: `ringtrain bench step` against the same
# model in PyTorch (train_step_torch.py, Debian's python3-torch) on configs S and M at 1 and 2
# threads, plus OpenBLAS sgemm peak measured in the same run. Prints a markdown table.
#   usage: bench/step/compare.sh BUILD_DIR [STEPS] [ROUNDS]
# Each figure is the better of ROUNDS (default 2) alternating runs of the two implementations,
# each run reporting its median step time, so a busy machine's spikes hurt neither side.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:?usage: bench/step/compare.sh BUILD_DIR [STEPS]}" && pwd)
STEPS=${2:-10}
ROUNDS=${3:-2}
RINGTRAIN=$BUILD/tools/ringtrain/ringtrain

# PyTorch is large, so it is installed here, for this benchmark only (not by tools/run setup).
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "installing python3-torch for the PyTorch anchor" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-torch
fi

# The machine's OpenBLAS tuning overrides are dropped for these runs only, so OpenBLAS picks its
# kernels for the CPU it finds (both implementations link the same system OpenBLAS).
bench_env() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS="$1" OMP_NUM_THREADS="$1" "${@:2}"; }

rows=()
for cfg in s m; do
  for threads in 1 2; do
    for ((round = 0; round < ROUNDS; ++round)); do
      ours=$(bench_env "$threads" "$RINGTRAIN" --log-level warn bench step --config "$cfg" \
               --steps "$STEPS" | sed -n 's/^JSON //p')
      torch=$(bench_env "$threads" /usr/bin/python3 "$ROOT/bench/step/train_step_torch.py" \
                --config "$cfg" --threads "$threads" --steps "$STEPS")
      rows+=("$cfg|$threads|$ours|$torch")
    done
  done
done

/usr/bin/python3 - "$(date -u +%Y-%m-%d)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)" "${rows[@]}" <<'PY'
import json, sys
date, cpu, rows = sys.argv[1], sys.argv[2].strip(), sys.argv[3:]
print(f"Training step, fp32, {date}, {cpu}; best of the rounds; tokens/s from the median step time after warm-up; sgemm peak = median of n³ GEMMs run between the steps.\n")
print("| config | threads | ringtrain tokens/s | PyTorch tokens/s | speed-up | ringtrain GFLOP/s | "
      "sgemm peak GFLOP/s | % of peak | ringtrain RSS MiB | PyTorch RSS MiB |")
print("|---|---|---|---|---|---|---|---|---|---|")
best = {}
for row in rows:
    cfg, threads, ours, torch = row.split("|", 3)
    o, t = json.loads(ours), json.loads(torch)
    b = best.setdefault((cfg, threads), [o, t])
    if o["tokens_per_s"] > b[0]["tokens_per_s"]:
        b[0] = o
    if t["tokens_per_s"] > b[1]["tokens_per_s"]:
        b[1] = t
for (cfg, threads), (o, t) in best.items():
    print(f"| {cfg.upper()} | {threads} | {o['tokens_per_s']:.0f} | {t['tokens_per_s']:.0f} | "
          f"{o['tokens_per_s'] / t['tokens_per_s']:.2f}x | {o['gflops']:.1f} | "
          f"{o['sgemm_gflops']:.1f} | {100 * o['gflops'] / o['sgemm_gflops']:.0f}% | "
          f"{o['peak_rss_mib']:.0f} | {t['peak_rss_mib']:.0f} |")
print("\nGFLOP/s count 6N + 12·L·C·T FLOPs per token (N = parameters without wpe); "
      f"PyTorch {json.loads(rows[0].split('|', 3)[3])['torch']}.")
PY
