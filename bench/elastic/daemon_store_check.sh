#!/usr/bin/env bash
# A daemon job on the GPU with its checkpoints in the daemons' embedded chunk store: 3 ringtraind
# on loopback, each with [store] (one store, replication 3), a one-rank job (one GPU) of CONFIG,
# memory tier every 10 steps, checkpoints every CKPT steps to ringfs:///ckpt; kill -9 of the
# daemon running rank 0 at KILL_AT; the job must finish elsewhere; then ringckpt verify of the
# store and diff against an uninterrupted one-rank run (ringtrain train --layout dp=1 --ranks 1).
# The killed daemon is started again 3 s later (as systemd's Restart=on-failure would): it may
# hold the store's namespace. Prints the recovery lines, the verify and the diff (the last line:
# "largest absolute difference D"); copies the daemons' logs to OUT_DIR. BIN_DIR holds
# ringtraind, ringctl, ringckpt, ringtrain and ringtrain_dist; DATA_DIR train_*.bin and val.bin.
#   usage: bench/elastic/daemon_store_check.sh BIN_DIR DATA_DIR OUT_DIR DEVICE CONFIG STEPS KILL_AT CKPT
#   e.g. (CPU, about 15 s): ... BIN DATA OUT cpu tiny 400 150 100
#        (GPU, about 60 s on an H200): ... BIN DATA OUT cuda s 4000 2000 1000
set -uo pipefail
BIN=$1 DATA=$2 OUT=$3 DEVICE=$4 CONFIG=$5 STEPS=$6 KILL_AT=$7 CKPT=$8
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d /tmp/dstore.XXXX)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
declare -A CP SP PID
for i in 1 2 3; do CP[$i]=$(free_port); SP[$i]=$(free_port); done
NODES="1@127.0.0.1:${SP[1]},2@127.0.0.1:${SP[2]},3@127.0.0.1:${SP[3]}"
start() {
  local i=$1; mkdir -p $W/n$i
  cat > $W/n$i/node.toml <<EOT
[node]
id = $i
listen = "127.0.0.1:${CP[$i]}"
state_dir = "$W/n$i"
slots = 1
[cluster]
seeds = "$([ $i = 1 ] && echo "" || echo 127.0.0.1:${CP[1]})"
[worker]
env = "OMP_NUM_THREADS=4"
[store]
listen = "127.0.0.1:${SP[$i]}"
nodes = "$NODES"
capacity_gib = 8
EOT
  $BIN/ringtraind --config $W/n$i/node.toml >> $W/n$i/daemon.log 2>&1 &
  PID[$i]=$!
}
ctl() { $BIN/ringctl --daemon 127.0.0.1:${CP[$1]} "${@:2}"; }
status() { for i in 1 2 3; do ctl $i --timeout-ms 3000 status --json 2>/dev/null && return 0; done; return 1; }
cleanup() { for i in 1 2 3; do kill -9 ${PID[$i]} 2>/dev/null; done; }
trap cleanup EXIT
for i in 1 2 3; do start $i; done
for _ in $(seq 100); do [ "$(status | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["view"]["members"]))' 2>/dev/null)" = 3 ] && break; sleep 0.2; done
cp $ROOT/configs/$CONFIG.toml $W/job.toml
cat >> $W/job.toml <<EOT
[job]
name = "gpu"
[elastic]
min_nodes = 1
max_nodes = 1
EOT
python3 - $W/job.toml "$DATA" $STEPS $CKPT $DEVICE <<'PY'
import re, sys
p, data, steps, ckpt, device = sys.argv[1:]
t = open(p).read()
def put(section, key, value):
    global t
    m = re.search(r'^\[' + section + r'\]\n', t, re.M)
    body_start = m.end()
    nxt = re.search(r'^\[', t[body_start:], re.M)
    end = body_start + (nxt.start() if nxt else len(t) - body_start)
    body = t[body_start:end]
    if re.search(r'^' + key + r'\s*=', body, re.M):
        body = re.sub(r'^' + key + r'\s*=.*$', key + ' = ' + value, body, flags=re.M)
    else:
        body += key + ' = ' + value + '\n'
    t = t[:body_start] + body + t[end:]
put('train', 'steps', steps); put('train', 'device', '"' + device + '"'); put('train', 'log_every', '100')
put('data', 'dir', '"' + data + '"'); put('eval', 'every', '0')
put('ckpt', 'dir', '"ringfs:///ckpt"'); put('ckpt', 'every', ckpt); put('ckpt', 'memory_every', '10')
put('ckpt', 'keep', '2'); put('ckpt', 'max_failed_saves', '0')
open(p, 'w').write(t)
PY
ctl 2 submit $W/job.toml || exit 1
step() { python3 -c 'import json,sys; s=json.load(sys.stdin); print(s.get("progress",{}).get("step",0))'; }
# Every wait below ends by this deadline (seconds since the script started).
DEADLINE=$((SECONDS + ${TIMEOUT_S:-600}))
late() { [ $SECONDS -ge $DEADLINE ] && { echo "TIMED OUT waiting for $1" >&2; exit 1; }; return 0; }
while :; do s=$(status); st=$(echo "$s" | step); [ "${st:-0}" -ge $KILL_AT ] && break
  late "step $KILL_AT"; sleep 0.05; done
victim=$(echo "$s" | python3 -c 'import json,sys; s=json.load(sys.stdin); print([n["node"] for n in s["nodes"] if any(w["rank"]==0 for w in n.get("workers",[]))][0])')
echo "killing daemon $victim (runs rank 0) at step $st"
kill -9 ${PID[$victim]}
sleep 3; start $victim   # as systemd's Restart=on-failure would (it may hold the store's namespace)
alive=$( for i in 1 2 3; do [ $i != $victim ] && echo $i; done | head -1)
while :; do late "the job to finish"; s=$(ctl $alive --timeout-ms 3000 status --json 2>/dev/null) || continue
  g=$(echo "$s" | python3 -c 'import json,sys; s=json.load(sys.stdin); print(s.get("progress",{}).get("generation",""), s.get("job",{}).get("desire",""))')
  case "$g" in *finished*) break;; esac; sleep 0.2; done
grep -h "recovery:" $W/n*/daemon.log | tail -3 | cut -c1-400
store=127.0.0.1:${SP[$alive]}
$BIN/ringckpt verify ringfs://$store/ckpt || echo "VERIFY FAILED"
# The uninterrupted reference, same engine path (one NCCL rank).
$BIN/ringtrain --log-level warn train --config $(ls -d $W/n$alive/jobs/*/ | head -1)run.toml --layout dp=1 --ranks 1 \
  --set 'ckpt.dir="'$W/ref'"' --set ckpt.memory_every=0 > $W/ref.log 2>&1 || { tail $W/ref.log; echo "REF FAILED"; }
$BIN/ringckpt diff ringfs://$store/ckpt $W/ref 2>&1 | tail -5
grep -h "chunk store on\|not supported\|io_uring" $W/n1/daemon.log | head -3
for i in 1 2 3; do cp $W/n$i/daemon.log $OUT/daemon$i.log; done
