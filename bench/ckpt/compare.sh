#!/usr/bin/env bash
# Side-by-side for checkpoints, in one invocation: `ringtrain bench ckpt` (config M with
# --layout dp=2 and S with pp=2, to a folder and to an embedded RF=1 ringfsd started here), the
# PyTorch anchor bench/ckpt/ckpt_torch.py (torch.save/torch.load of each rank's model and AdamW
# state over 2 gloo ranks, fsync'd, blocking), fio's sequential write with end_fsync on the same
# filesystem, and `ringfs bench` RF=1's sequential write. The passes run in ROUNDS rounds (the
# order reversed every other round: a VM's disk drifts within minutes); the table shows per
# column the median over the rounds and, for the ratios, the median of the ratios taken within
# each round. The load average is printed with the figures.
#   bench/ckpt/compare.sh [BUILD_DIR] [WORK_DIR]
# Env: ROUNDS (default 3), CASES (default "m:dp=2 s:pp=2"), STEPS and EVERY of the stall passes
# (default 10 and 10), STALL_PASSES (pairs of stall passes, default 4), FIO_MIB and RINGFS_MIB
# (sizes of fio's file and ringfs bench's, default 128: about M's checkpoint, so that the page
# cache absorbs as much of each), TORCH_PY (default /usr/bin/python3: Debian's python3-torch, from
# BENCH_PACKAGES of tools/run).
# fio: --ioengine=psync --direct=0 --bs=4M --rw=write --end_fsync=1 (buffered writes then one
# fsync: how both checkpointers write).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
WORK=${2:-$BUILD/ckpt-compare}
ROUNDS=${ROUNDS:-3}
CASES=${CASES:-"m:dp=2 s:pp=2"}
STEPS=${STEPS:-10}
EVERY=${EVERY:-10}
STALL_PASSES=${STALL_PASSES:-4}
FIO_MIB=${FIO_MIB:-128}
RINGFS_MIB=${RINGFS_MIB:-128}
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
RINGTRAIN=$BUILD/tools/ringtrain/ringtrain
RINGFSD=$BUILD/tools/ringfsd/ringfsd
RINGFS=$BUILD/tools/ringfs/ringfs
for b in "$RINGTRAIN" "$RINGFSD" "$RINGFS"; do
  [ -x "$b" ] || { echo "missing $b (build first)" >&2; exit 1; }
done
command -v fio >/dev/null || { echo "fio is not installed (tools/run setup)" >&2; exit 1; }
if ! "$TORCH_PY" -c 'import torch' 2>/dev/null; then
  echo "no torch for $TORCH_PY (apt-get install python3-torch)" >&2
  exit 1
fi
rm -rf "$WORK" && mkdir -p "$WORK"
SERVER=""
cleanup() {
  [ -z "$SERVER" ] && return
  kill "$SERVER" 2>/dev/null || true
  wait "$SERVER" 2>/dev/null || true
}
trap cleanup EXIT
log() { printf '[compare] %s\n' "$*" >&2; }
loadavg() { cut -d' ' -f1 /proc/loadavg; }

PORT=$(python3 -c \
  'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$RINGFSD" --state "$WORK/ringfsd" --port "$PORT" --log-level warn > "$WORK/ringfsd.log" 2>&1 &
SERVER=$!
log "ringfsd RF=1 on port $PORT, state in $WORK/ringfsd ($(df -T "$WORK" | awk 'NR==2{print $2}'))"

# Every pass writes OUT/NAME.json (one JSON object) and records the load average at its start.
ours_pass() {  # OUT CONFIG LAYOUT
  local out=$1 config=$2 layout=$3 name="ours-$2-${3//[=,]/_}"
  log "ringtrain bench ckpt --config $config --layout $layout (load $(loadavg))"
  "$RINGTRAIN" bench ckpt --config "$config" --layout "$layout" --dir "$WORK/posix" \
    --ringfs "ringfs://127.0.0.1:$PORT/ckpt" --steps "$STEPS" --every "$EVERY" \
    --passes "$STALL_PASSES" --rounds 3 > "$out/$name.txt" 2> "$out/$name.log"
  grep '^JSON ' "$out/$name.txt" | sed 's/^JSON //' > "$out/$name.json"
}

torch_pass() {  # OUT CONFIG
  local out=$1 config=$2
  log "ckpt_torch.py --config $config --ranks 2 (load $(loadavg))"
  "$TORCH_PY" "$ROOT/bench/ckpt/ckpt_torch.py" --config "$config" --ranks 2 \
    --dir "$WORK/torch" --rounds 3 | tail -1 > "$out/torch-$config.json"
  rm -rf "${WORK:?}/torch"
}

fio_pass() {  # OUT
  local out=$1 mibs
  log "fio: sequential write of $FIO_MIB MiB, end_fsync (load $(loadavg))"
  mibs=$(fio --name=w --filename="$WORK/fio.dat" --ioengine=psync --direct=0 --bs=4M \
    --rw=write --size="${FIO_MIB}M" --end_fsync=1 --output-format=terse --terse-version=3 |
    awk -F';' '{printf "%.1f", $48/1024}')
  echo "{\"write_mib_s\": $mibs}" > "$out/fio.json"
  rm -f "$WORK/fio.dat"
}

ringfs_pass() {  # OUT
  local out=$1 mibs
  log "ringfs bench RF=1: $RINGFS_MIB MiB (load $(loadavg))"
  mibs=$("$RINGFS" --server "127.0.0.1:$PORT" --parallel 16 bench --size-mib "$RINGFS_MIB" \
    --random-reads 16 --path /ringfs-bench.dat | awk '$1=="write"{print $2}')
  echo "{\"write_mib_s\": $mibs}" > "$out/ringfs.json"
  "$RINGFS" --server "127.0.0.1:$PORT" rm /ringfs-bench.dat >/dev/null 2>&1 || true
}

PASSES=(fio ringfs)
for c in $CASES; do PASSES+=("ours:$c" "torch:${c%%:*}"); done
run_pass() {  # OUT PASS
  local spec=${2#*:}
  case $2 in
    fio) fio_pass "$1" ;;
    ringfs) ringfs_pass "$1" ;;
    ours:*) ours_pass "$1" "${spec%%:*}" "${spec#*:}" ;;
    torch:*) torch_pass "$1" "$spec" ;;
  esac
}
LOAD_START=$(loadavg)
for ((r = 1; r <= ROUNDS; r++)); do
  out=$WORK/round$r; mkdir -p "$out"
  order=("${PASSES[@]}")
  if ((r % 2 == 0)); then
    order=()
    for ((i = ${#PASSES[@]} - 1; i >= 0; i--)); do order+=("${PASSES[i]}"); done
  fi
  log "round $r of $ROUNDS: ${order[*]}"
  for pass in "${order[@]}"; do run_pass "$out" "$pass"; done
done

"$TORCH_PY" "$ROOT/bench/ckpt/compare_table.py" "$WORK" "$ROUNDS" "$LOAD_START" "$(loadavg)" \
  "$EVERY" $CASES
