#!/usr/bin/env bash
# Side-by-side: ringfs (RF=1 embedded server with the shared-memory data path and with data over
# TCP, RF=2 over loopback) against fio on the same filesystem, in one invocation. Prints a
# markdown table.
#   bench/iofs/compare.sh [BUILD_DIR] [WORK_DIR]
# Env: SIZE_MIB (default 4096), PARALLEL (requests in flight, default 16), RANDOM_READS (4096).
# fio runs: --ioengine=io_uring --direct=1 --bs=4M --iodepth=32 --end_fsync=1 (write, read) and
# --bs=64k --rw=randread --iodepth=32 for the random reads.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
WORK=${2:-$BUILD/iofs-compare}
SIZE_MIB=${SIZE_MIB:-4096}
PARALLEL=${PARALLEL:-16}
RANDOM_READS=${RANDOM_READS:-4096}
RINGFSD=$BUILD/tools/ringfsd/ringfsd
RINGFS=$BUILD/tools/ringfs/ringfs
for b in "$RINGFSD" "$RINGFS"; do [ -x "$b" ] || { echo "missing $b (build first)" >&2; exit 1; }; done
command -v fio >/dev/null || { echo "fio is not installed (apt-get install fio)" >&2; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

log() { printf '[compare] %s\n' "$*" >&2; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- fio on the same filesystem ---
log "fio: $SIZE_MIB MiB in $WORK ($(df -T "$WORK" | awk 'NR==2{print $2}'))"
FIO="fio --filename=$WORK/fio.dat --ioengine=io_uring --direct=1 --size=${SIZE_MIB}M --output-format=terse --terse-version=3"
fio_w=$($FIO --name=w --rw=write --bs=4M --iodepth=32 --end_fsync=1 | awk -F';' '{printf "%.1f", $48/1024}')
fio_r=$($FIO --name=r --rw=read --bs=4M --iodepth=32 | awk -F';' '{printf "%.1f", $7/1024}')
fio_rr=$($FIO --name=rr --rw=randread --bs=64k --iodepth=32 --number_ios=$RANDOM_READS | awk -F';' '{printf "%d", $8}')
rm -f "$WORK/fio.dat"

# --- the chunk engine alone (no network): 8 writer threads, one chunk per batch ---
ENGINE_BENCH=$BUILD/bench/iofs/iofs_engine_bench
eng_w=-; eng_r=-
if [ -x "$ENGINE_BENCH" ]; then
  line=$("$ENGINE_BENCH" "$WORK/engine" "$SIZE_MIB" 8 1)
  echo "$line" >&2
  eng_w=$(echo "$line" | awk '{print $3}'); eng_r=$(echo "$line" | awk '{print $6}')
fi

parse() {  # pass: write|read|rand64k
  awk -v p="$1" '$1==p {print $2}' "$2"
}

# --- ringfs RF=1: the embedded server ---
# One pass on a fresh server (NAME, then bench flags): a second bench on the same server would
# write into the space the first freed (already written blocks: no unwritten extents to convert),
# which fio's fresh file does not get.
rf1_pass() {
  local name=$1; shift
  local p; p=$(port)
  "$RINGFSD" --state "$WORK/$name" --port "$p" --log-level warn > "$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  log "ringfs RF=1 $* on port $p"
  "$RINGFS" --server 127.0.0.1:$p --parallel "$PARALLEL" bench "$@" --size-mib "$SIZE_MIB" --random-reads "$RANDOM_READS" | tee "$WORK/$name.txt" >&2
  kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true; rm -rf "${WORK:?}/$name"
}
rf1_pass rf1
rf1_pass rf1tcp --tcp

# --- ringfs RF=2: two nodes on loopback ---
P1=$(port); P2=$(port)
for n in 1 2; do
  cat > "$WORK/node$n.toml" <<TOML
[node]
id = $n
state = "$WORK/rf2-node$n"
[cluster]
nodes = "1@127.0.0.1:$P1,2@127.0.0.1:$P2"
replication = 2
chains = 8
TOML
  "$RINGFSD" --config "$WORK/node$n.toml" --log-level warn > "$WORK/rf2-node$n.log" 2>&1 &
  PIDS+=($!)
done
log "ringfs RF=2 on ports $P1, $P2"
"$RINGFS" --server 127.0.0.1:$P1 --parallel "$PARALLEL" bench --size-mib "$SIZE_MIB" --random-reads "$RANDOM_READS" | tee "$WORK/rf2.txt" >&2

rf1_w=$(parse write "$WORK/rf1.txt"); rf1_r=$(parse read "$WORK/rf1.txt"); rf1_rr=$(parse rand64k "$WORK/rf1.txt")
rft_w=$(parse write "$WORK/rf1tcp.txt"); rft_r=$(parse read "$WORK/rf1tcp.txt"); rft_rr=$(parse rand64k "$WORK/rf1tcp.txt")
rf1_path=$(parse path "$WORK/rf1.txt"); rf2_path=$(parse path "$WORK/rf2.txt")
rf2_w=$(parse write "$WORK/rf2.txt"); rf2_r=$(parse read "$WORK/rf2.txt"); rf2_rr=$(parse rand64k "$WORK/rf2.txt")
pct() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.0f%%", 100*a/b}'; }
echo
echo "| $(date -u +%F) $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg), ${SIZE_MIB} MiB | seq write MiB/s | seq read MiB/s | rand 64 KiB IOPS |"
echo "|---|---|---|---|"
echo "| fio io_uring direct, bs 4M, iodepth 32 | $fio_w | $fio_r | $fio_rr |"
echo "| iofs chunk engine alone (8 threads, no network) | $eng_w | $eng_r | – |"
echo "| ringfs RF=1 (embedded ringfsd, data path: $rf1_path) | $rf1_w ($(pct "$rf1_w" "$fio_w") of fio) | $rf1_r ($(pct "$rf1_r" "$fio_r")) | $rf1_rr |"
echo "| ringfs RF=1 (embedded ringfsd, data over TCP) | $rft_w ($(pct "$rft_w" "$fio_w")) | $rft_r ($(pct "$rft_r" "$fio_r")) | $rft_rr |"
echo "| ringfs RF=2 (2 nodes, loopback; client data path: $rf2_path) | $rf2_w ($(pct "$rf2_w" "$rf1_w") of RF=1) | $rf2_r | $rf2_rr |"
