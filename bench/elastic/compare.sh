#!/usr/bin/env bash
# Recovery side by side with torchrun (issue 13's benchmark; method: docs/elastic_benchmark.md).
# The same small job — config tiny, global batch BATCH, on 2 nodes × 2 workers — run by
#   ours:  3 ringtraind daemons on loopback: nodes 1 and 2 with 2 slots, node 3 a witness (1
#          slot, drained before the job is submitted, so it trains nothing: with 2 daemons the
#          survivor of a node kill has no majority), job tp=2 and dp over the nodes, memory tier
#          on (ckpt.memory_every = 1);
#   torch: 2 torchrun agents × 2 workers (train_torch.py: DDP over gloo, rank 0 saves after
#          every step), c10d rendezvous on loopback hosted by agent 1, --nnodes=1:2,
#          --max_restarts, --monitor_interval MONITOR_S, last_call_timeout LAST_CALL_S;
# and one fault per run, in three scenarios:
#   worker  kill -9 one worker of node 2;
#   node    kill -9 node 2: its daemon/agent and its workers (the process group, and ours'
#           workers, which run in groups of their own);
#   leader  kill -9 node 1 the same way: the daemon that led the last view change (and runs
#           rank 0 and the generation's rendezvous store) / the agent that hosts torchrun's store.
# Each run starts a fresh cluster, waits for WARM steps on all 4 workers, kills, and waits (at
# most RECOVERY_S) for the first step of a new generation. Every step line is stamped with the
# time it was seen (stamp.py); measure.py turns a run into recovery, detection, steps lost;
# table.py prints the medians of the REPS runs per scenario as a markdown table.
#   bench/elastic/compare.sh BUILD_DIR [WORK_DIR]
# Env: REPS (default 5), SCENARIOS (default "worker node leader"), SYSTEMS (default "ours
# torch"), BATCH (32), WARM (30 steps), RECOVERY_S (180), MONITOR_S (0.1), LAST_CALL_S (1),
# TORCH_PY (/usr/bin/python3: Debian's python3-torch). Without torch for TORCH_PY the torch runs
# are skipped with a message (exit 0 when only torch was asked for).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "${1:?usage: bench/elastic/compare.sh BUILD_DIR [WORK_DIR]}" && pwd)
WORK=${2:-$BUILD/elastic-compare}
REPS=${REPS:-5}
SCENARIOS=${SCENARIOS:-"worker node leader"}
SYSTEMS=${SYSTEMS:-"ours torch"}
BATCH=${BATCH:-32}
WARM=${WARM:-30}
RECOVERY_S=${RECOVERY_S:-180}
MONITOR_S=${MONITOR_S:-0.1}
LAST_CALL_S=${LAST_CALL_S:-1}
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
RINGTRAIN=$BUILD/tools/ringtrain/ringtrain
RINGTRAIND=$BUILD/tools/ringtraind/ringtraind
RINGCTL=$BUILD/tools/ringctl/ringctl
for b in "$RINGTRAIN" "$RINGTRAIND" "$RINGCTL"; do
  [ -x "$b" ] || { echo "missing $b (build first)" >&2; exit 1; }
done
log() { printf '[elastic] %s\n' "$*" >&2; }
loadavg() { cut -d' ' -f1 /proc/loadavg; }
now() { date +%s.%N; }
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
if [[ " $SYSTEMS " == *" torch "* ]] && ! "$TORCH_PY" -c 'import torch' 2>/dev/null; then
  log "SKIP torch: no torch for $TORCH_PY (apt-get install python3-torch); ringtraind only"
  SYSTEMS=${SYSTEMS//torch/}
fi
[ -n "${SYSTEMS// /}" ] || exit 0
mkdir -p "$WORK"
rm -rf "${WORK:?}/runs" && mkdir -p "$WORK/runs"
if [ ! -f "$WORK/data/train_000.bin" ]; then
  log "preparing Debian's fortunes as byte tokens in $WORK/data"
  "$RINGTRAIN" --log-level warn data prepare --input /usr/share/games/fortunes \
    --out "$WORK/data" >/dev/null
fi

# Process groups (and single pids) of the current run; all killed when it ends or on exit.
GROUPS_=()
PIDS_=()
teardown() {
  local g p
  for g in "${GROUPS_[@]}"; do kill -9 -- "-$g" 2>/dev/null || true; done
  for p in "${PIDS_[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  # (Braces: bash reports a killed job on the shell's stderr, not on wait's.)
  for p in "${GROUPS_[@]}" "${PIDS_[@]}"; do { wait "$p"; } 2>/dev/null || true; done
  GROUPS_=()
  PIDS_=()
}
trap teardown EXIT
# Runs "$@" in a new session (process group = its pid) in the background; sets STARTED.
start_group() {
  local out=$1
  shift
  setsid "$@" > "$out" 2>&1 &
  STARTED=$!
  GROUPS_+=("$STARTED")
}
# Waits (at most $1 s) until the command line $2 succeeds; fails naming $3.
wait_until() {
  local limit=$1 what=$3 cond=$2 end
  end=$(($(date +%s) + limit))
  until eval "$cond"; do
    (($(date +%s) < end)) || { log "timed out after ${limit} s waiting for $what"; return 1; }
    sleep 0.1
  done
}
# The number of step lines of generation $2 in the stamped file $1 (all generations when "").
steps_seen() {
  python3 -c '
import json, sys
n = 0
for line in open(sys.argv[1]):
    try: j = json.loads(line.partition(" ")[2])
    except ValueError: continue
    n += "loss" in j and (sys.argv[2] == "" or str(j.get("generation")) == sys.argv[2]) \
         and j.get("world", 4) == 4
print(n)' "$1" "$2"
}
# The generation of the last step line in the stamped file $1 (fails when there is none).
last_generation() {
  tail -1 "$1" | python3 -c '
import json, sys
print(json.loads(sys.stdin.read().partition(" ")[2])["generation"])'
}

# --- ours ------------------------------------------------------------------------------------
ours_ctl() { "$RINGCTL" --daemon "127.0.0.1:${OURS_PORT[1]}" --timeout-ms 20000 "$@"; }
ours_start() {  # RUN_DIR
  local dir=$1 id slots seeds
  declare -gA OURS_PORT OURS_PID
  for id in 1 2 3; do OURS_PORT[$id]=$(free_port); done
  for id in 1 2 3; do
    slots=2 seeds=""
    ((id == 3)) && slots=1
    ((id > 1)) && seeds="127.0.0.1:${OURS_PORT[1]}"
    mkdir -p "$dir/node$id"
    cat > "$dir/node$id/node.toml" <<EOF
[node]
id = $id
listen = "127.0.0.1:${OURS_PORT[$id]}"
state_dir = "$dir/node$id"
slots = $slots
[cluster]
seeds = "$seeds"
[worker]
stop_grace_ms = 500
env = "OMP_NUM_THREADS=1"
EOF
    start_group "$dir/node$id/daemon.log" "$RINGTRAIND" --config "$dir/node$id/node.toml"
    OURS_PID[$id]=$STARTED
    # Node 1 bootstraps; the others join through it.
    ((id == 1)) && wait_until 30 "ours_ctl status" "daemon 1 to answer" >/dev/null
  done
  wait_until 60 "ours_members 3" "a view of 3 members"
  ours_ctl drain 3 >/dev/null
  cat > "$dir/job.toml" <<EOF
[job]
name = "bench"
[elastic]
tp = 2
min_nodes = 1
[model]
n_layer = 2
n_embd = 64
n_head = 4
seq_len = 32
[train]
batch_size = $BATCH
steps = 1000000
log_every = 1000000
[optim]
schedule = "constant"
lr = 1e-3
[data]
dir = "$WORK/data"
[eval]
every = 0
[metrics]
path = "$dir/metrics.jsonl"
[ckpt]
dir = "$dir/ckpt"
every = 1000
memory_every = 1
async = true
EOF
  python3 "$HERE/stamp.py" "$dir/metrics.jsonl" > "$dir/stamped.txt" &
  PIDS_+=($!)
  ours_ctl submit "$dir/job.toml" >/dev/null
}
ours_members() {
  ours_ctl status --json 2>/dev/null |
    python3 -c 'import json,sys; sys.exit(len(json.load(sys.stdin)["view"]["members"]) != int(sys.argv[1]))' "$1"
}
# The victims, from `ringctl status --json`: "worker" a worker pid of node 2, "node" node 2,
# "leader" the node whose membership proposal installed the current view.
ours_victim_node() {  # SCENARIO
  ours_ctl status --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
nodes = {n["node"]: n for n in s["nodes"]}
if sys.argv[1] == "worker": print(nodes[2]["workers"][-1]["pid"])
elif sys.argv[1] == "node": print(2)
else:
    leader = [i for i, n in nodes.items() if n.get("led_view") == s["view"]["generation"]]
    if not leader or not nodes[leader[0]].get("workers"):
        sys.exit("the last view leader (%s) runs no worker" % leader)
    print(leader[0])' "$1"
}
ours_run() {  # SCENARIO RUN_DIR
  local scenario=$1 dir=$2 victim pid kill_t logs=() id
  ours_start "$dir"
  wait_until "$RECOVERY_S" "[ \$(steps_seen $dir/stamped.txt '') -ge $WARM ]" "$WARM steps"
  victim=$(ours_victim_node "$scenario")
  local before
  before=$(last_generation "$dir/stamped.txt")
  if [ "$scenario" = worker ]; then
    kill_t=$(now)
    kill -9 "$victim"
    victim=2
  else
    pid=${OURS_PID[$victim]}
    kill_t=$(now)
    # The daemon's group and its workers (each worker runs in a process group of its own).
    kill -9 -- "-$pid" $(pgrep -P "$pid") 2>/dev/null || true
  fi
  for id in 1 2 3; do
    [ "$scenario" != worker ] && ((id == victim)) && continue
    logs+=("$dir/node$id/daemon.log")
  done
  wait_until "$RECOVERY_S" "new_generation $dir/stamped.txt $before $kill_t" \
    "a step of a new generation" || true
  python3 "$HERE/measure.py" ours "$scenario" "$kill_t" "$dir/stamped.txt" "${logs[@]}"
}
# True once the stamped file $1 has a step line of a generation other than $2 after time $3.
new_generation() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    t, _, text = line.partition(" ")
    try: j = json.loads(text)
    except ValueError: continue
    if float(t) > float(sys.argv[3]) and str(j.get("generation")) != sys.argv[2]: sys.exit(0)
sys.exit(1)' "$@"
}

# --- torch -----------------------------------------------------------------------------------
torch_start() {  # RUN_DIR
  local dir=$1 port agent
  port=$(free_port)
  declare -gA TORCH_PID
  python3 "$HERE/stamp.py" "$dir/metrics.jsonl" > "$dir/stamped.txt" &
  PIDS_+=($!)
  for agent in 1 2; do
    # Agent 1 hosts the rendezvous store (is_host), as the first node of a real job would.
    start_group "$dir/agent$agent.log" env LOGLEVEL=INFO OMP_NUM_THREADS=1 \
      "$TORCH_PY" "$HERE/torchrun_logged.py" --nnodes=1:2 --nproc_per_node=2 \
      --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=bench \
      --rdzv_conf="is_host=$((agent == 1)),last_call_timeout=$LAST_CALL_S" \
      --max_restarts=10 --monitor_interval="$MONITOR_S" --redirects=1 --tee=2 \
      --log_dir="$dir/logs$agent" "$HERE/train_torch.py" --data "$WORK/data" \
      --ckpt "$dir/ckpt.pt" --metrics "$dir/metrics.jsonl" --batch "$BATCH"
    TORCH_PID[$agent]=$STARTED
  done
}
torch_run() {  # SCENARIO RUN_DIR
  local scenario=$1 dir=$2 kill_t before victim=2 survivor=1
  torch_start "$dir"
  # WARM steps of one generation on all 4 workers (agent 2 may join after agent 1 started).
  wait_until "$RECOVERY_S" "torch_warm $dir/stamped.txt" "$WARM steps on 4 workers"
  before=$(last_generation "$dir/stamped.txt")
  [ "$scenario" = leader ] && victim=1 survivor=2
  kill_t=$(now)
  if [ "$scenario" = worker ]; then
    kill -9 "$(pgrep -P "${TORCH_PID[2]}" | tail -1)"
  else
    kill -9 -- "-${TORCH_PID[$victim]}"
  fi
  # Until a new generation trains, or every agent has exited (the job died).
  wait_until "$RECOVERY_S" "torch_over $dir $before $kill_t" "a step of a new generation" || true
  local logs=("$dir/agent$survivor.log")
  [ "$scenario" = worker ] && logs+=("$dir/agent2.log")
  python3 "$HERE/measure.py" torch "$scenario" "$kill_t" "$dir/stamped.txt" "${logs[@]}"
}
torch_warm() {
  local last
  last=$(last_generation "$1" 2>/dev/null) || return 1
  [ -n "$last" ] && [ "$(steps_seen "$1" "$last")" -ge "$WARM" ]
}
torch_over() {  # RUN_DIR GENERATION KILL_T
  new_generation "$1/stamped.txt" "$2" "$3" && return 0
  local a
  for a in 1 2; do kill -0 "${TORCH_PID[$a]}" 2>/dev/null && return 1; done
  return 0
}

LOAD_START=$(loadavg)
log "$REPS rep(s) of: $SCENARIOS; systems: $SYSTEMS; load average $LOAD_START"
for ((r = 1; r <= REPS; r++)); do
  for scenario in $SCENARIOS; do
    for system in $SYSTEMS; do
      dir=$WORK/runs/$system-$scenario-$r
      mkdir -p "$dir"
      log "rep $r: $system, kill -9 $scenario (load $(loadavg))"
      if ! "${system}_run" "$scenario" "$dir" > "$dir/result.json"; then
        log "FAILED: $system $scenario rep $r (logs in $dir)"
        teardown
        exit 1
      fi
      teardown
      log "  $(cat "$dir/result.json")"
    done
  done
done
python3 "$HERE/table.py" "$WORK/runs" "$LOAD_START" "$(loadavg)"
