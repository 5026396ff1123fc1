#!/usr/bin/env bash
# README command 1: installs what is missing, builds, and runs the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
mtc=build/tools/mtc

echo "== parameter counts"
for model in gpt-tiny gpt2-124m gpt3-175b gpt-1t; do
  "$mtc" info "models/$model.mlir" | grep -E "^(model|parameters|padded)"
done

mkdir -p out
echo; echo "== GPT-2 124M: compile a training step"
"$mtc" compile models/gpt2-124m.mlir --micro-batch-size 4 --global-batch-size 32 -o out/gpt2-124m.mtp
echo; echo "== the 1T configuration"
"$mtc" compile models/gpt-1t.mlir --micro-batch-size 1 --global-batch-size 1536 -o out/gpt-1t.mtp
