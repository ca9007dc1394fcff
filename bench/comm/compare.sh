#!/usr/bin/env bash
# Side-by-side all-reduce: ringtrain's CPU backend vs OpenMPI (shared-memory BTL), same sizes,
# same machine, one invocation. Usage: bench/comm/compare.sh [build-dir] [ranks...]
# Prints: ranks, size, ringtrain busbw/time, OpenMPI busbw/time, ratio.
set -euo pipefail
BUILD=${1:-build}
shift || true
RANKS=("${@:-2 4}")
[ $# -gt 0 ] && RANKS=("$@") || RANKS=(2 4)
SIZES=${SIZES:-8,1M,4M,16M,64M}
RT="$BUILD/bench/comm/ringtrain_bench_comm"
MPI="$BUILD/bench/comm/mpi_bench_comm"
[ -x "$RT" ] && [ -x "$MPI" ] || { echo "build $RT and $MPI first (needs libopenmpi-dev)" >&2; exit 2; }
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }
printf '%5s %10s | %12s %12s | %12s %12s | %7s\n' ranks bytes rt_time_us rt_busbw mpi_time_us mpi_busbw ratio
for n in "${RANKS[@]}"; do
  rt_out=$("$RT" --op all_reduce --ranks "$n" --sizes "$SIZES" --json)
  # OpenBLAS tuning variables of the environment do not apply to this benchmark.
  mpi_out=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE mpirun --allow-run-as-root --oversubscribe \
            -np "$n" --mca btl self,vader "$MPI" --op all_reduce --sizes "$SIZES" --json 2>/dev/null)
  paste <(echo "$rt_out") <(echo "$mpi_out") | while IFS=$'\t' read -r a b; do
    bytes=$(echo "$a" | field bytes); rt_t=$(echo "$a" | field time_us); rt_b=$(echo "$a" | field busbw_GBps)
    mpi_t=$(echo "$b" | field time_us); mpi_b=$(echo "$b" | field busbw_GBps)
    if [ "$bytes" -le 8 ]; then ratio=$(awk -v x="$mpi_t" -v y="$rt_t" 'BEGIN{printf "%.2f", x/y}')
    else ratio=$(awk -v x="$rt_b" -v y="$mpi_b" 'BEGIN{printf "%.2f", (y>0)?x/y:0}'); fi
    printf '%5s %10s | %12s %12s | %12s %12s | %7s\n' "$n" "$bytes" "$rt_t" "$rt_b" "$mpi_t" "$mpi_b" "$ratio"
  done
done
echo "(ratio: busbw ringtrain/OpenMPI; for the 8-byte row, time OpenMPI/ringtrain — above 1 is ringtrain faster)"
