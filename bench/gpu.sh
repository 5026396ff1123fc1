#!/usr/bin/env bash
# One H100/H200: mtc against PyTorch (torch.compile, SDPA, bf16) on GPT-2 124M and a
# 1.3B model, measured in the same run, both with hidden dropout 0.1 and no dropout of
# attention probabilities (scripts/bundle.sh says why). Prints a table:
#   model | mtc tok/s | PyTorch tok/s | ratio | mtc TFLOP/s | MFU (of 989 TFLOP/s dense bf16)
#   | measured step s | `mtc estimate --system dgx-h100`'s step s | the estimate's error
# then each model's profile (device time by opcode, slowest instructions).
# Runs from the runtime bundle (scripts/bundle.sh), whose plans were compiled where mtc
# is built: the GPU node needs no compiler.
#   on the build machine:  bash scripts/bundle.sh          (writes build/mtc-runtime)
#   on the GPU node:       bash build/mtc-runtime/bench/gpu.sh [STEPS]
# From a source tree it makes the bundle first (which needs the compiler).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$here/../bin/mtrun" ]; then
  bash "$here/../scripts/build.sh" >/dev/null
  bash "$here/../scripts/bundle.sh" "$here/../build/mtc-runtime"
  exec bash "$here/../build/mtc-runtime/bench/gpu.sh" "$@"
fi
bundle=$(cd "$here/.." && pwd)
steps=${1:-30}
work=$(mktemp -d)
peak=989e12

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "commit $(cat "$bundle/COMMIT")"
# Fused attention through cuDNN, or the run fails rather than timing our kernels.
export MT_CUDA_ATTENTION=${MT_CUDA_ATTENTION:-cudnn}
echo "MT_CUDA_ATTENTION=$MT_CUDA_ATTENTION"
python3 "$here/random_tokens.py" "$work/tokens" 50257 8000000

printf '%-12s %14s %14s %7s %12s %6s %10s %10s %7s\n' model "mtc tok/s" "PyTorch tok/s" \
  ratio "mtc TFLOP/s" MFU "step s" "estimate s" error
for env in "$bundle"/plans/bench/*.env; do
  # model seq batch flops layers hidden heads vocab
  eval "$(cat "$env")"
  "$bundle/bin/mtrun" "$bundle/plans/bench/$model.mtp" --backend cuda --data "$work/tokens" \
    --steps "$steps" --log-every "$steps" --lr 1e-4 >"$work/$model.run"
  ours=$(sed -n 's/.*| \([0-9]*\) tok\/s.*/\1/p' "$work/$model.run" | tail -1)
  theirs=$(python3 "$here/torch_gpt.py" --layers "$layers" --hidden "$hidden" --heads "$heads" \
    --vocab "$vocab" --seq "$seq" --batch "$batch" --steps "$steps" \
    --attention-dropout "${attention_dropout:-0.1}" |
    python3 -c 'import json,sys; print(round(json.load(sys.stdin)["tokens_per_second"]))')
  python3 - "$model" "$ours" "$theirs" "$flops" "$((seq * batch))" "$peak" "$estimated" <<'PY'
import sys
model, ours, theirs, flops, tokens, peak, estimated = sys.argv[1], *map(float, sys.argv[2:])
tflops = flops / tokens * ours / 1e12
step = tokens / ours  # one micro-batch per step
print(f"{model:12s} {ours:14,.0f} {theirs:14,.0f} {ours / theirs:6.2f}x {tflops:12.1f} "
      f"{tflops * 1e12 / peak:6.1%} {step:10.4f} {estimated:10.4f} {estimated / step - 1:+7.1%}")
PY
done

# Where each step's time goes: device time by opcode and the slowest instructions
# (mtrun --profile). The host waits for every program there, so these steps are not
# the ones timed above.
for env in "$bundle"/plans/bench/*.env; do
  eval "$(cat "$env")"
  echo
  echo "$model:"
  "$bundle/bin/mtrun" "$bundle/plans/bench/$model.mtp" --backend cuda --data "$work/tokens" \
    --steps 10 --log-every 10 --lr 1e-4 --profile | sed -n '/^profile:/,/^arena:/{/^arena:/!p}'
done
