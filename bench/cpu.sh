#!/usr/bin/env bash
# The CPU backend against PyTorch eager on this machine, measured in the same run:
# gpt-mini (sequence 128, micro-batch 16, dropout 0.1) and llama-tiny (sequence 32,
# micro-batch 64), f32, AdamW, MT_BENCH_THREADS threads each (default 2), random tokens.
# The two alternate ROUNDS times (default 3) and the medians are printed, with the
# ratio; then mtrun --profile of each model's step. PyTorch (torch_gpt.py --device cpu,
# eager; `pip install torch`, 2.5 or later, where it is missing) is never needed by the
# tests. MT_BENCH_WORK keeps the runs' files in that folder.
#   usage: bench/cpu.sh [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/../build/tools
rounds=${1:-3}
threads=${MT_BENCH_THREADS:-2}
[ -x "$bin/mtrun" ] || { echo "cpu.sh: build first (bash scripts/build.sh)" >&2; exit 2; }
python3 -c "import torch" 2>/dev/null ||
  { echo "cpu.sh: PyTorch is not installed (pip install torch)" >&2; exit 2; }
work=${MT_BENCH_WORK:-$(mktemp -d)}
mkdir -p "$work"
export OMP_NUM_THREADS=$threads
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $threads threads;" \
  "commit $(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo unknown);" \
  "torch $(python3 -c 'import torch; print(torch.__version__)')"

# name model vocab seq batch mtrun-steps torch-steps | torch_gpt.py's model arguments
models=(
  "gpt-mini gpt-mini 1024 128 16 30 20 | --layers 4 --hidden 128 --heads 4"
  "llama-tiny llama-tiny 512 32 64 60 40 | --arch llama --layers 2 --hidden 64 --heads 8 --kv-heads 4 --ffn 176 --attention-dropout 0 --hidden-dropout 0"
)
printf '%-12s %12s %12s %7s\n' model "mtc tok/s" "torch tok/s" ratio
for line in "${models[@]}"; do
  read -r name model vocab seq batch steps tsteps _ peer <<<"$line"
  python3 "$here/random_tokens.py" "$work/$name.tokens" "$vocab" 1000000
  "$bin/mtc" compile "$here/../models/$model.mlir" --seq-length "$seq" \
    --micro-batch-size "$batch" --global-batch-size "$batch" -o "$work/$name.mtp" >/dev/null
  : >"$work/$name.mtc"
  : >"$work/$name.torch"
  for round in $(seq "$rounds"); do
    # tok/s over the last third of the steps (the first ones warm the caches)
    "$bin/mtrun" "$work/$name.mtp" --backend cpu --data "$work/$name.tokens" \
      --steps "$steps" --log-every "$((steps / 3))" --lr 1e-4 >"$work/$name.run"
    sed -n 's/.*| \([0-9]*\) tok\/s.*/\1/p' "$work/$name.run" | tail -1 >>"$work/$name.mtc"
    # shellcheck disable=SC2086 # the peer's arguments are words
    python3 "$here/torch_gpt.py" --device cpu $peer --vocab "$vocab" --seq "$seq" \
      --batch "$batch" --steps "$tsteps" >"$work/$name.peer" 2>"$work/$name.peer.err" ||
      { echo "cpu.sh: torch_gpt.py failed:" >&2; cat "$work/$name.peer.err" >&2; exit 1; }
    python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["tokens_per_second"]))' \
      "$work/$name.peer" >>"$work/$name.torch"
  done
  python3 - "$name" "$work/$name.mtc" "$work/$name.torch" <<'PY'
import statistics, sys
name, runs = sys.argv[1], [open(f).read().split() for f in sys.argv[2:]]
if not all(runs):
    sys.exit(f"cpu.sh: {name}: a run printed no tokens/s (see {sys.argv[2]}'s folder)")
ours, theirs = (statistics.median(map(float, r)) for r in runs)
print(f"{name:12s} {ours:12,.0f} {theirs:12,.0f} {ours / theirs:6.2f}x")
PY
done
for line in "${models[@]}"; do
  read -r name _ <<<"$line"
  echo; echo "== $name: mtrun --profile"
  "$bin/mtrun" "$work/$name.mtp" --backend cpu --data "$work/$name.tokens" --steps 12 \
    --lr 1e-4 --profile |
    sed -n '/^profile/,$p'
done
