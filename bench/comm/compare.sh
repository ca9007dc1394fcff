#!/usr/bin/env bash
# Side-by-side all-reduce: ringtrain's CPU backend vs OpenMPI (shared-memory BTL), same sizes,
# same machine, one invocation. Usage: [REPEAT=k] [SIZES=list] bench/comm/compare.sh [build-dir] [ranks...]
# Each side runs REPEAT times (default 5), alternating ringtrain and OpenMPI size by size so both
# see the same load and vCPU placement; every figure is the median of its runs. Within a run both programs use the same method
# (bench_comm.cc, mpi_bench_comm.c): 3 warm-up ops, the count for ~0.3 s (at most 200000), and
# the median over up to 1000 timed batches of a batch's time per op. Ranks are bound to CPUs the same way on both
# sides: rank r on CPU r when the ranks fit the CPUs (mpirun's default), unbound otherwise.
# Prints: ranks, size, ringtrain time/busbw, OpenMPI time/busbw, ratio.
set -euo pipefail
BUILD=${1:-build}
shift || true
[ $# -gt 0 ] && RANKS=("$@") || RANKS=(2 4)
SIZES=${SIZES:-8,1M,4M,16M,64M}
REPEAT=${REPEAT:-5}
RT="$BUILD/bench/comm/ringtrain_bench_comm"
MPI="$BUILD/bench/comm/mpi_bench_comm"
[ -x "$RT" ] && [ -x "$MPI" ] || { echo "build $RT and $MPI first (needs libopenmpi-dev)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# "bytes time_us busbw" lines from JSON lines.
fields() { sed -n 's/.*"bytes":\([0-9]*\),"time_us":\([0-9.]*\),"algbw_GBps":[0-9.]*,"busbw_GBps":\([0-9.]*\).*/\1 \2 \3/p'; }
# Median of column $2 for bytes $1 in file $3.
median() { awk -v b="$1" -v c="$2" '$1==b{print $c}' "$3" | sort -g | awk '{v[NR]=$1} END{print (NR%2)? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs, medians of $REPEAT runs"
printf '%5s %10s | %12s %12s | %12s %12s | %7s\n' ranks bytes rt_time_us rt_busbw mpi_time_us mpi_busbw ratio
for n in "${RANKS[@]}"; do
  : > "$tmp/rt"; : > "$tmp/mpi"
  for ((i = 0; i < REPEAT; ++i)); do
    for size in ${SIZES//,/ }; do  # per size, so both sides meet the same vCPU placement
      "$RT" --op all_reduce --ranks "$n" --sizes "$size" --json | fields >> "$tmp/rt"
      # OpenBLAS tuning variables of the environment do not apply to this benchmark.
      env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE mpirun --allow-run-as-root --oversubscribe \
          -np "$n" --mca btl self,vader "$MPI" --op all_reduce --sizes "$size" --json 2>/dev/null | fields >> "$tmp/mpi"
    done
  done
  for bytes in $(awk '{print $1}' "$tmp/rt" | sort -un); do
    rt_t=$(median "$bytes" 2 "$tmp/rt"); rt_b=$(median "$bytes" 3 "$tmp/rt")
    mpi_t=$(median "$bytes" 2 "$tmp/mpi"); mpi_b=$(median "$bytes" 3 "$tmp/mpi")
    if [ "$bytes" -le 8 ]; then ratio=$(awk -v x="$mpi_t" -v y="$rt_t" 'BEGIN{printf "%.2f", x/y}')
    else ratio=$(awk -v x="$rt_b" -v y="$mpi_b" 'BEGIN{printf "%.2f", (y>0)?x/y:0}'); fi
    printf '%5s %10s | %12s %12s | %12s %12s | %7s\n' "$n" "$bytes" "$rt_t" "$rt_b" "$mpi_t" "$mpi_b" "$ratio"
  done
done
echo "(ratio: busbw ringtrain/OpenMPI; for the 8-byte row, time OpenMPI/ringtrain — above 1 is ringtrain faster)"
