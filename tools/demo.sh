#!/usr/bin/env bash
# The demo run by `tools/run demo`; $1 is the build folder. Prepares the fortunes corpus as byte
# tokens, trains config S for a few minutes with the live progress bar, then prints the
# validation loss and a generated sample. RINGTRAIN_DEMO_STEPS overrides the step count.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:?usage: tools/demo.sh BUILD_DIR}" && pwd)
RINGTRAIN=$BUILD/tools/ringtrain/ringtrain
WORK=${RINGTRAIN_DEMO_DIR:-$BUILD/demo}
STEPS=${RINGTRAIN_DEMO_STEPS:-800}
mkdir -p "$WORK"

echo "== ringtrain demo: GPT-2 config S on Debian's fortunes (byte tokens), $STEPS steps"
"$RINGTRAIN" data prepare --input /usr/share/games/fortunes --out "$WORK/data"

echo "== training (metrics in $WORK/metrics.jsonl)"
"$RINGTRAIN" --log-level warn train --config "$ROOT/configs/s.toml" --steps "$STEPS" \
  --set data.dir="$WORK/data" --set metrics.path="$WORK/metrics.jsonl" \
  --set eval.every=$((STEPS / 4)) --out "$WORK/model.safetensors"

echo "== validation loss of the trained weights"
"$RINGTRAIN" eval --weights "$WORK/model.safetensors" --data "$WORK/data/val.bin" --batches 40

echo "== a sample (temperature 0.8, top-k 40)"
"$RINGTRAIN" sample --weights "$WORK/model.safetensors" --prompt "The secret of life is" \
  --tokens 300 --temperature 0.8 --top-k 40 --seed 7
