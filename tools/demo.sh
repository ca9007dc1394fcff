#!/usr/bin/env bash
# The demo run by `tools/run demo`; $1 is the build folder. Prepares Debian's fortunes as byte
# tokens, then runs `ringtrain demo` (tools/ringtrain/demo_command.cc): 4 local ringtraind daemons
# train a job with pipeline and data parallelism and checkpoints, one daemon is killed with
# kill -9 and the job recovers, the node comes back and the job grows, then `ringckpt verify`,
# an offline `ringckpt reshard`, the validation loss and a sample. Every phase prints one line
# starting "== "; every process it starts is stopped on the way out, also on Ctrl-C.
# Everything it writes is under RINGTRAIN_DEMO_DIR (default BUILD/demo). Knobs:
#   RINGTRAIN_DEMO_STEPS (default 1000), RINGTRAIN_DEMO_CONFIG (default configs/s.toml),
#   RINGTRAIN_DEMO_NODES (4), RINGTRAIN_DEMO_SLOTS (1), RINGTRAIN_DEMO_TP (1),
#   RINGTRAIN_DEMO_PP (2), RINGTRAIN_DEMO_CKPT_EVERY (10).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:?usage: tools/demo.sh BUILD_DIR}" && pwd)
RINGTRAIN=$BUILD/tools/ringtrain/ringtrain
WORK=${RINGTRAIN_DEMO_DIR:-$BUILD/demo}
mkdir -p "$WORK"

if [ ! -f "$WORK/data/val.bin" ]; then
  echo "== preparing Debian's fortunes as byte tokens in $WORK/data"
  "$RINGTRAIN" --log-level warn data prepare --input /usr/share/games/fortunes \
    --out "$WORK/data"
fi
# exec: `ringtrain demo` itself takes Ctrl-C and SIGTERM and stops what it started.
exec "$RINGTRAIN" --log-level warn demo --config "${RINGTRAIN_DEMO_CONFIG:-$ROOT/configs/s.toml}" \
  --data "$WORK/data" --dir "$WORK" --steps "${RINGTRAIN_DEMO_STEPS:-1000}" \
  --nodes "${RINGTRAIN_DEMO_NODES:-4}" --slots "${RINGTRAIN_DEMO_SLOTS:-1}" \
  --tp "${RINGTRAIN_DEMO_TP:-1}" --pp "${RINGTRAIN_DEMO_PP:-2}" \
  --ckpt-every "${RINGTRAIN_DEMO_CKPT_EVERY:-10}"
