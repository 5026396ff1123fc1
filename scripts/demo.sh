#!/usr/bin/env bash
# README command 1: installs what is missing, builds, and runs the main job: tokenizes
# the fortunes corpus, compiles a small GPT, trains it on CPU for a few minutes and
# shows the loss falling.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh mtdata mtc mtrun # what the demo runs: not the tests, not the CUDA-only tools
bin=build/tools
mkdir -p out

echo "== data: the fortunes corpus, SentencePiece BPE, Megatron indexed dataset"
inputs=()
for f in /usr/share/games/fortunes/*; do
  case "$f" in *.dat | *.u8) continue ;; esac
  [ -f "$f" ] && [ ! -L "$f" ] && inputs+=(--input "$f")
done
"$bin/mtdata" "${inputs[@]}" --split-on % --train-tokenizer out/fortunes --vocab-size 1024 \
  --output-prefix out/fortunes

echo; echo "== compile: gpt-mini"
"$bin/mtc" compile models/gpt-mini.mlir --micro-batch-size 16 --global-batch-size 16 -o out/gpt-mini.mtp

echo; echo "== train on CPU"
rm -f out/metrics.txt
"$bin/mtrun" out/gpt-mini.mtp --data out/fortunes --steps "${DEMO_STEPS:-800}" --lr 3e-3 \
  --min-lr 3e-4 --warmup-steps 20 --log-every 25 --metrics out/metrics.txt --save out/checkpoint

# The loss at the end: the mean of the last 10 steps (single steps are noisy).
awk '{ loss[NR] = $4 }
     END {
       for (i = NR - 9; i <= NR; i++) end += loss[i] / 10
       drop = 100 * (loss[1] - end) / loss[1]
       printf "\nloss %.3f at step 1 -> %.3f over the last 10 steps: %.0f%% lower\n", loss[1], end, drop
       exit drop >= 35 ? 0 : 1
     }' out/metrics.txt
