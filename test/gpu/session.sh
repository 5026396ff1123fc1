#!/usr/bin/env bash
# One GPU lease's checks from the runtime bundle, the most important first, each under its
# own limit and all within BUDGET seconds (default 540), so that a lease of a few minutes
# brings back what it had time for:
#   1. bench/gpu.sh on GPT-2 124M (mtc with and without CUDA graphs, PyTorch, the profile)
#   2. test-gpu.sh: every op against the CPU, bit-exact reruns and resume, GPT-2's curve
#   3. bench/gpu.sh on the 1.3B model
#   4. test-gpu.sh --sanitize-only
# Each step's output goes to $OUT/<step>.log, a line per step to $OUT/session.log, and the
# tests' own logs to $OUT/logs.tgz.
# usage: OUT=DIR bash session.sh [BUDGET]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:?session.sh: set OUT to the folder for its logs}
budget=${1:-540}
logs=$(mktemp -d)
say() { echo "session: $*" | tee -a "$out/session.log"; }
step() { # name limit command...
  local name=$1 limit=$2 left
  shift 2
  left=$((budget - SECONDS))
  ((left < limit)) && limit=$left
  if ((limit < 20)); then
    say "$name: not run, $left s of the budget left"
    return
  fi
  local began=$SECONDS
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
  say "$name: exit $? after $((SECONDS - began)) s (limit $limit s)"
}
nvidia-smi >"$out/session.log" 2>&1
say "commit $(cat "$here/COMMIT"), budget $budget s"
step bench-gpt2 200 env MT_BENCH_MODELS=gpt2-124m bash "$here/bench/gpu.sh" 20
step test-gpu 180 env LOGS="$logs/test-gpu" bash "$here/test-gpu.sh"
step bench-1.3b 240 env MT_BENCH_MODELS=gpt3-1.3b bash "$here/bench/gpu.sh" 20
step sanitize 150 env LOGS="$logs/sanitize" bash "$here/test-gpu.sh" --sanitize-only
tar czf "$out/logs.tgz" -C "$logs" . 2>/dev/null
