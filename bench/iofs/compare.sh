#!/usr/bin/env bash
# Side-by-side: ringfs (RF=1 embedded server with the shared-memory data path and with data over
# TCP, RF=2 over loopback) and the chunk engine alone against fio on the same filesystem, in one
# invocation. The disk of a VM drifts by tens of percent within minutes, so the passes run in
# ROUNDS rounds (the order reversed every other round) and the table shows per column the median
# over rounds and, for the ratios, the median of the ratios taken within each round.
#   bench/iofs/compare.sh [BUILD_DIR] [WORK_DIR]
# Env: SIZE_MIB (default 4096), PARALLEL (requests in flight, default 16), RANDOM_READS (4096),
# ROUNDS (default 3).
# fio runs: --ioengine=io_uring --direct=1 --bs=4M --iodepth=32 --end_fsync=1 (write, read) and
# --bs=64k --rw=randread --iodepth=PARALLEL for the random reads: as many reads in flight as
# ringfs bench keeps (--parallel PARALLEL), so the IOPS compare like with like.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
WORK=${2:-$BUILD/iofs-compare}
SIZE_MIB=${SIZE_MIB:-4096}
PARALLEL=${PARALLEL:-16}
RANDOM_READS=${RANDOM_READS:-4096}
ROUNDS=${ROUNDS:-3}
RINGFSD=$BUILD/tools/ringfsd/ringfsd
RINGFS=$BUILD/tools/ringfs/ringfs
ENGINE_BENCH=$BUILD/bench/iofs/iofs_engine_bench
for b in "$RINGFSD" "$RINGFS" "$ENGINE_BENCH"; do [ -x "$b" ] || { echo "missing $b (build first)" >&2; exit 1; }; done
command -v fio >/dev/null || { echo "fio is not installed (apt-get install fio)" >&2; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

log() { printf '[compare] %s\n' "$*" >&2; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
stop_servers() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  PIDS=()
}

# Every pass writes OUT/NAME.txt with lines "write MiB/s", "read MiB/s", "rand64k IOPS" (ringfs
# bench's own format), on fresh space: a pass that reused the space a previous one freed would
# write blocks already written, with no unwritten extents to convert, which fio's fresh file
# does not get.
fio_pass() {  # OUT
  local out=$1 fio
  fio="fio --filename=$WORK/fio.dat --ioengine=io_uring --direct=1 --size=${SIZE_MIB}M --output-format=terse --terse-version=3"
  log "fio: $SIZE_MIB MiB in $WORK ($(df -T "$WORK" | awk 'NR==2{print $2}'))"
  {
    $fio --name=w --rw=write --bs=4M --iodepth=32 --end_fsync=1 | awk -F';' '{printf "write %.1f\n", $48/1024}'
    $fio --name=r --rw=read --bs=4M --iodepth=32 | awk -F';' '{printf "read %.1f\n", $7/1024}'
    $fio --name=rr --rw=randread --bs=64k --iodepth="$PARALLEL" --number_ios="$RANDOM_READS" | awk -F';' '{printf "rand64k %d\n", $8}'
  } > "$out/fio.txt"
  rm -f "$WORK/fio.dat"
}

engine_pass() {  # OUT: the chunk engine alone (no network), 8 writer threads, one chunk per batch
  local out=$1 line
  log "chunk engine alone"
  line=$("$ENGINE_BENCH" "$WORK/engine" "$SIZE_MIB" 8 1)
  echo "$line" >&2
  echo "$line" | awk '{print "write", $3; print "read", $6}' > "$out/engine.txt"
  rm -rf "${WORK:?}/engine"
}

rf1_pass() {  # OUT NAME [bench flags]: one embedded ringfsd
  local out=$1 name=$2 p; shift 2
  p=$(port)
  "$RINGFSD" --state "$WORK/$name" --port "$p" --log-level warn > "$out/$name.log" 2>&1 &
  PIDS+=($!)
  log "ringfs RF=1 $* on port $p"
  "$RINGFS" --server 127.0.0.1:$p --parallel "$PARALLEL" bench "$@" --size-mib "$SIZE_MIB" --random-reads "$RANDOM_READS" | tee "$out/$name.txt" >&2
  stop_servers; rm -rf "${WORK:?}/$name"
}

rf2_pass() {  # OUT: two ringfsd on loopback
  local out=$1 p1 p2 n
  p1=$(port); p2=$(port)
  for n in 1 2; do
    cat > "$WORK/node$n.toml" <<TOML
[node]
id = $n
state = "$WORK/rf2-node$n"
[cluster]
nodes = "1@127.0.0.1:$p1,2@127.0.0.1:$p2"
replication = 2
chains = 8
TOML
    "$RINGFSD" --config "$WORK/node$n.toml" --log-level warn > "$out/rf2-node$n.log" 2>&1 &
    PIDS+=($!)
  done
  log "ringfs RF=2 on ports $p1, $p2"
  "$RINGFS" --server 127.0.0.1:$p1 --parallel "$PARALLEL" bench --size-mib "$SIZE_MIB" --random-reads "$RANDOM_READS" | tee "$out/rf2.txt" >&2
  stop_servers; rm -rf "${WORK:?}/rf2-node1" "${WORK:?}/rf2-node2"
}

PASSES=(fio engine rf1 rf1tcp rf2)
run_pass() {  # OUT PASS
  case $2 in
    fio) fio_pass "$1" ;;
    engine) engine_pass "$1" ;;
    rf1) rf1_pass "$1" rf1 ;;
    rf1tcp) rf1_pass "$1" rf1tcp --tcp ;;
    rf2) rf2_pass "$1" ;;
  esac
}
LOAD_START=$(cut -d' ' -f1 /proc/loadavg)
for ((r = 1; r <= ROUNDS; r++)); do
  out=$WORK/round$r; mkdir -p "$out"
  order=("${PASSES[@]}")
  if ((r % 2 == 0)); then order=(); for ((i = ${#PASSES[@]} - 1; i >= 0; i--)); do order+=("${PASSES[i]}"); done; fi
  log "round $r of $ROUNDS: ${order[*]}"
  for pass in "${order[@]}"; do run_pass "$out" "$pass"; done
done

python3 - "$WORK" "$ROUNDS" "$SIZE_MIB" "$LOAD_START" "$PARALLEL" <<'PY'
import datetime, os, statistics, sys
work, rounds, size, load, parallel = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]

def read(r, name):
    vals = {}
    for line in open(f"{work}/round{r}/{name}.txt"):
        f = line.split()
        if len(f) >= 2:
            vals[f[0]] = f[1]
    return vals

rows = {n: [read(r, n) for r in range(1, rounds + 1)] for n in ("fio", "engine", "rf1", "rf1tcp", "rf2")}
med = lambda xs: statistics.median(xs)
num = lambda name, key: [float(v[key]) for v in rows[name]]

def cell(name, key, base=None, base_key=None, fmt="%.1f"):
    if key not in rows[name][0]:
        return "–"
    s = fmt % med(num(name, key))
    if base:
        ratios = [a / b for a, b in zip(num(name, key), num(base, base_key or key))]
        s += " (%.0f%%%s)" % (100 * med(ratios), " of RF=1" if base == "rf1" else "")
    return s

path = lambda name: rows[name][0].get("path", "?")
print()
print(f"| {datetime.date.today()} {os.cpu_count()} cores, load {load}, {size} MiB, medians of {rounds} rounds | seq write MiB/s | seq read MiB/s | rand 64 KiB IOPS |")
print("|---|---|---|---|")
print(f"| fio io_uring direct, bs 4M, iodepth 32 (rand: iodepth {parallel}) | {cell('fio', 'write')} | {cell('fio', 'read')} | {cell('fio', 'rand64k', fmt='%d')} |")
print(f"| iofs chunk engine alone (8 threads, no network) | {cell('engine', 'write', 'fio')} | {cell('engine', 'read', 'fio')} | – |")
print(f"| ringfs RF=1 (embedded ringfsd, data path: {path('rf1')}) | {cell('rf1', 'write', 'fio')} | {cell('rf1', 'read', 'fio')} | {cell('rf1', 'rand64k', 'fio', fmt='%d')} |")
print(f"| ringfs RF=1 (embedded ringfsd, data over TCP) | {cell('rf1tcp', 'write', 'fio')} | {cell('rf1tcp', 'read', 'fio')} | {cell('rf1tcp', 'rand64k', 'fio', fmt='%d')} |")
print(f"| ringfs RF=2 (2 nodes, loopback; client data path: {path('rf2')}) | {cell('rf2', 'write', 'rf1')} | {cell('rf2', 'read')} | {cell('rf2', 'rand64k', 'fio', fmt='%d')} |")
print()
pct = lambda a, b: "/".join("%.0f%%" % (100 * x / y) for x, y in zip(num(*a), num(*b)))
print("Per round: RF=1 shared-memory write / fio", pct(("rf1", "write"), ("fio", "write")),
      "· read / fio", pct(("rf1", "read"), ("fio", "read")),
      "· RF=1 TCP write / fio", pct(("rf1tcp", "write"), ("fio", "write")),
      "· RF=2 write / RF=1", pct(("rf2", "write"), ("rf1", "write")),
      "· RF=1 rand 64 KiB / fio", pct(("rf1", "rand64k"), ("fio", "rand64k")))
PY
