#!/usr/bin/env bash
# Side-by-side: `ringtrain bench step` with the kernel set ringtrain chooses by itself
# (OPENBLAS_CORETYPE unset, a fresh cache) against the same binary with each kernel set forced,
# in one invocation. Prints the probe's cost and a markdown table (docs/blas.md).
#   usage: [CONFIG=s] [THREADS="1 2"] bench/step/kernels.sh BUILD_DIR [STEPS] [ROUNDS]
# Defaults: 20 steps, 3 rounds, config s, 1 and 2 threads. Each round runs every set once, the
# order reversed every other round; a figure is the median over the rounds of the run's median
# step time. Every set is also checked by the probe itself (RINGTRAIN_GEMM_PROBE=check, the mode
# ringtrain starts its probe children in): "wrong" marks a set that computes wrong results here.
set -euo pipefail
BUILD=$(cd "${1:?usage: bench/step/kernels.sh BUILD_DIR [STEPS] [ROUNDS]}" && pwd)
STEPS=${2:-20}
ROUNDS=${3:-3}
CONFIG=${CONFIG:-s}
read -r -a THREADS <<<"${THREADS:-1 2}"
RINGTRAIN=$BUILD/tools/ringtrain/ringtrain
SETS=(auto Prescott Sandybridge Haswell Zen SkylakeX Cooperlake)
CACHE=$(mktemp -d)
trap 'rm -rf "$CACHE"' EXIT

# The machine's OpenBLAS overrides are dropped; "auto" gets no OPENBLAS_CORETYPE at all.
run_env() {
  local set=$1
  shift
  if [ "$set" = auto ]; then
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE -u RINGTRAIN_GEMM_KERNELS XDG_CACHE_HOME="$CACHE" "$@"
  else
    env -u OPENBLAS_L2_SIZE -u RINGTRAIN_GEMM_KERNELS OPENBLAS_CORETYPE="$set" "$@"
  fi
}

now() { date +%s.%N; }
t0=$(now)
run_env auto "$RINGTRAIN" --log-level warn --help >/dev/null
t1=$(now)
run_env auto "$RINGTRAIN" --log-level warn --help >/dev/null
t2=$(now)
env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE=Haswell "$RINGTRAIN" --log-level warn --help >/dev/null
t3=$(now)
probe_s=$(awk "BEGIN { print $t1 - $t0 }")
cached_s=$(awk "BEGIN { print $t2 - $t1 }")
forced_s=$(awk "BEGIN { print $t3 - $t2 }")

checks=()
for set in "${SETS[@]:1}"; do
  report=$(env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE="$set" RINGTRAIN_GEMM_PROBE=check \
             "$RINGTRAIN" 2>&1 | grep '^gemm-probe ' || echo "gemm-probe 1 $set failed 0")
  checks+=("$report")
done

rows=()
for threads in "${THREADS[@]}"; do
  for ((round = 0; round < ROUNDS; ++round)); do
    order=("${SETS[@]}")
    if ((round % 2)); then
      order=()
      for ((i = ${#SETS[@]} - 1; i >= 0; --i)); do order+=("${SETS[i]}"); done
    fi
    for set in "${order[@]}"; do
      json=$(run_env "$set" env OPENBLAS_NUM_THREADS="$threads" "$RINGTRAIN" --log-level warn \
               bench step --config "$CONFIG" --steps "$STEPS" | sed -n 's/^JSON //p')
      rows+=("$threads|$set|$json")
    done
  done
done

/usr/bin/python3 - "$(date -u '+%Y-%m-%d %H:%M UTC')" "$(cut -d' ' -f1 /proc/loadavg)" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)" "$CONFIG" "$probe_s" "$cached_s" \
  "$forced_s" "$(cat "$CACHE"/ringtrain/*.txt 2>/dev/null | grep '^candidate' | tr '\n' ';')" \
  "${#checks[@]}" "${checks[@]}" "${rows[@]}" <<'PY'
import json, statistics, sys
date, load, cpu, config, probe_s, cached_s, forced_s, cache = sys.argv[1:9]
n_checks = int(sys.argv[9])
checks = {l.split()[2]: l.split() for l in sys.argv[10:10 + n_checks]}
rows = sys.argv[10 + n_checks:]
print(f"Kernel sets, config {config.upper()}, {date}, {cpu.strip()}, load average {load} at the start")
print(f"start-up: probe with an empty cache {float(probe_s):.2f} s, cached {float(cached_s):.2f} s, "
      f"OPENBLAS_CORETYPE set {float(forced_s):.2f} s (`ringtrain --help`)")
print(f"probe's cache: {cache.strip(';').replace(';', '; ')}\n")
by = {}
for row in rows:
    threads, s, j = row.split("|", 2)
    by.setdefault((threads, s), []).append(json.loads(j))
for threads in dict.fromkeys(t for t, _ in by):
    sets = [s for t, s in by if t == threads]
    med = {s: statistics.median(r["tokens_per_s"] for r in by[(threads, s)]) for s in sets}
    correct = [s for s in sets if s != "auto" and checks.get(s, ["", "", "", "failed"])[3] == "passed"]
    best = max(correct, key=lambda s: med[s])
    print(f"| {threads} thread(s) | runs | tokens/s (median) | rounds | vs best correct ({best}) | probe check | probe GFLOP/s |")
    print("|---|---|---|---|---|---|---|")
    for s in sets:
        runs = by[(threads, s)]
        kernels = runs[0]["blas_kernels"]
        label = f"auto → {kernels}" if s == "auto" else s
        c = checks.get(s)
        check, gf = (c[3], c[4]) if c else ("(probe above)", "")
        rounds = ", ".join("%.0f" % r["tokens_per_s"] for r in runs)
        print(f"| {label} | {kernels} | {med[s]:.0f} | {rounds} | {med[s] / med[best]:.3f} | "
              f"{check} | {gf} |")
    print()
PY
