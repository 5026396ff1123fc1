#!/usr/bin/env bash
# One H100/H200: mtc against PyTorch (torch.compile, SDPA, bf16) on GPT-2 124M and a
# 1.3B model, measured in the same run; then the CUDA backend's tests and
# compute-sanitizer over a training step. Prints a table:
#   model | mtc tok/s | PyTorch tok/s | ratio | mtc TFLOP/s | MFU (of 989 TFLOP/s dense bf16)
# usage: bash bench/gpu.sh [STEPS]     (from the repository root, on the GPU machine)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-30}
work=$(mktemp -d)
peak=989e12

if [ ! -x build/tools/mtrun ]; then
  cmake -S . -B build -G Ninja -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit >/dev/null
  cmake --build build >/dev/null
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

python3 bench/random_tokens.py "$work/tokens" 50257 8000000

# model, sequence, micro-batch
configs=("gpt2-124m 1024 8" "gpt3-1.3b 2048 4")
printf '%-12s %14s %14s %7s %12s %6s\n' model "mtc tok/s" "PyTorch tok/s" ratio "mtc TFLOP/s" MFU
for config in "${configs[@]}"; do
  read -r model seq batch <<<"$config"
  build/tools/mtc compile "models/$model.mlir" --bf16 --seq-length "$seq" \
    --micro-batch-size "$batch" --global-batch-size "$batch" -o "$work/$model.mtp" >"$work/$model.mtc"
  flops=$(sed -n 's/^ *model FLOPs\/step *\([0-9,]*\).*/\1/p' "$work/$model.mtc" | tr -d ,)
  build/tools/mtrun "$work/$model.mtp" --backend cuda --data "$work/tokens" --steps "$steps" \
    --log-every "$steps" --lr 1e-4 >"$work/$model.run"
  ours=$(sed -n 's/.*| \([0-9]*\) tok\/s.*/\1/p' "$work/$model.run" | tail -1)
  read -r layers hidden vocab < <(build/tools/mtc info "models/$model.mlir" |
    sed -n 's/^shape *\([0-9]*\) layers, hidden \([0-9]*\), vocab \([0-9]*\).*/\1 \2 \3/p')
  heads=$(grep -o 'heads = [0-9]*' "models/$model.mlir" | head -1 | grep -o '[0-9]*$')
  theirs=$(python3 bench/torch_gpt.py --layers "$layers" --hidden "$hidden" --heads "$heads" \
    --vocab "$vocab" --seq "$seq" --batch "$batch" --steps "$steps" |
    python3 -c 'import json,sys; print(round(json.load(sys.stdin)["tokens_per_second"]))')
  python3 - "$model" "$ours" "$theirs" "$flops" "$((seq * batch))" "$peak" <<'PY'
import sys
model, ours, theirs, flops, tokens, peak = sys.argv[1], *map(float, sys.argv[2:])
tflops = flops / tokens * ours / 1e12
print(f"{model:12s} {ours:14,.0f} {theirs:14,.0f} {ours / theirs:6.2f}x {tflops:12.1f} "
      f"{tflops * 1e12 / peak:6.1%}")
PY
done

echo "--- the CUDA backend against the CPU backend"
build/runtime/cuda_backend_test --gtest_brief=1 | tail -3
echo "--- compute-sanitizer (memcheck) over two gpt-tiny training steps"
build/tools/mtc compile models/gpt-tiny.mlir --bf16 --micro-batch-size 4 --global-batch-size 8 \
  -o "$work/tiny.mtp" >/dev/null
python3 bench/random_tokens.py "$work/small" 512 100000
compute-sanitizer --tool memcheck build/tools/mtrun "$work/tiny.mtp" --backend cuda \
  --data "$work/small" --steps 2 2>&1 | tail -2
