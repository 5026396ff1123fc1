#!/usr/bin/env bash
# The GPU checks, run from the runtime bundle on a GPU node (no compiler, no MPI):
#   1. cuda_backend_test on the carried plans: every op and whole gpt-tiny steps against
#      the CPU backend, and two GPU runs bit for bit. Where a GPU is visible a skipped
#      case is a failure. Then again with fused attention through cuDNN only (the cases
#      it must take; those dropping probabilities, given our keep mask, on Hopper only:
#      cuDNN's deterministic backward on Blackwell drops none) and through our kernels
#      only, and the GEMMs through cuBLAS only.
#   2. Determinism of training: two GPU runs of gpt-tiny, and a run resumed from a GPU
#      checkpoint, give the same metrics and the same checkpoint bytes. A whole GPT-2
#      124M in bf16 follows the CPU backend's loss curve on text (10 steps, 1e-2).
#   3. With --sanitize: compute-sanitizer's memcheck, racecheck and initcheck over
#      gpt-tiny training steps in fp32 and bf16, without, with selective and with full
#      recomputation, and through cuDNN's flash attention (racecheck leaves cuDNN's own
#      kernels out: it cannot model their synchronisation).
# Logs go to $LOGS (default: a temporary folder). Exits non-zero on any failure.
# usage: bash test-gpu.sh [--sanitize | --sanitize-only]   (--sanitize-only: step 3 alone)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
logs=${LOGS:-$(mktemp -d)}
mkdir -p "$logs"
failures=0
note() { echo "test-gpu: $*"; }
failed() { echo "test-gpu: FAILED: $*"; failures=$((failures + 1)); }

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
note "$gpus GPU(s) visible; logs in $logs"
[ "$gpus" -gt 0 ] && export MT_REQUIRE_GPU=1
mode=${1:-}
case "$mode" in
"" | --sanitize | --sanitize-only) ;;
*) echo "usage: bash test-gpu.sh [--sanitize | --sanitize-only]" >&2; exit 2 ;;
esac

if [ "$mode" != --sanitize-only ]; then # steps 1 and 2, up to the "fi" before step 3

# 1. Every op against the CPU backend.
MT_TEST_PLANS="$here/plans/cuda_backend_test" "$here/bin/cuda_backend_test" \
  >"$logs/cuda_backend_test.log" 2>&1
status=$?
grep -E '^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \] [0-9]+ test' "$logs/cuda_backend_test.log"
[ "$status" -eq 0 ] || failed "cuda_backend_test (see $logs/cuda_backend_test.log)"
if [ "$gpus" -gt 0 ] && grep -q '^\[  SKIPPED \]' "$logs/cuda_backend_test.log"; then
  failed "cases were skipped on a machine with a GPU"
fi
# The cases of FILTER again under one switch of the backend (VAR=VALUE), logged as NAME.
variant() { # name VAR=VALUE filter
  env "$2" MT_TEST_PLANS="$here/plans/cuda_backend_test" "$here/bin/cuda_backend_test" \
    --gtest_filter="$3" >"$logs/cuda_backend_test.$1.log" 2>&1
  local status=$?
  echo "$2: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test' \
    "$logs/cuda_backend_test.$1.log" | tr '\n' ' ')"
  [ "$status" -eq 0 ] || failed "cuda_backend_test, $2 (see $logs/cuda_backend_test.$1.log)"
}
linears='*linear*:*mlp*:*gpt_tiny*:*llama_tiny*'
if [ "$gpus" -gt 0 ]; then
  # 1b. Each path of fused attention alone: cuDNN's flash attention on the cases it must
  # take (a fallback to our kernels is an error), and every case through our kernels only.
  # Blackwell (compute capability 10 and on): not the cases that drop probabilities.
  cudnn='*flash_attention*bf16:*flash_attention*fp16'
  major=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)
  [ "${major%%.*}" -ge 10 ] 2>/dev/null && cudnn="$cudnn-*dropout*"
  variant cudnn MT_CUDA_ATTENTION=cudnn "$cudnn"
  variant exact MT_CUDA_ATTENTION=exact '*'
  # 1c. The GEMMs' fallback: cuBLAS's GEMM, then the bias, GELU or GELU's gradient as
  # kernels, on every case with a linear.
  variant cublas MT_CUDA_GEMM=cublas "$linears"
  # 1d. Weight gradients on a second stream, on every case with a linear: what they read
  # and write waited for where later instructions meet it.
  variant side MT_CUDA_SIDE_STREAM=on "$linears"
fi
if [ "$gpus" -eq 0 ]; then
  note "no GPU: the CUDA cases were skipped; steps 2 and 3 need a GPU"
  exit $((failures > 0))
fi

# 2. Bit-exact reruns and resume on the GPU, the validation losses included. The -flash
# plan's attention must go through cuDNN.
train() { # plan name steps [flags...]
  local plan=$1 name=$2 steps=$3 path=${MT_CUDA_ATTENTION:-}
  shift 3
  case "$plan" in *-flash) path=cudnn ;; esac
  MT_CUDA_ATTENTION=$path "$here/bin/mtrun" "$here/plans/$plan.mtp" --backend cuda --data "$here/data/tiny" \
    --steps "$steps" --seed 7 --warmup-steps 1 --lr-decay-steps 6 \
    --split 9,1,0 --eval-interval 3 --eval-iters 2 --metrics "$logs/$name.metrics" "$@" >"$logs/$name.log" 2>&1 ||
    failed "mtrun $name (see $logs/$name.log)"
}
for plan in gpt-tiny-fp32-none gpt-tiny-bf16-none gpt-tiny-bf16-full gpt-tiny-bf16-flash; do
  rm -rf "$logs/$plan".*
  train "$plan" "$plan.a" 6 --save "$logs/$plan.a.ckpt"
  train "$plan" "$plan.b" 6
  train "$plan" "$plan.c1" 3 --save "$logs/$plan.c.ckpt"
  train "$plan" "$plan.c2" 6 --load "$logs/$plan.c.ckpt" --save "$logs/$plan.c.ckpt"
  cat "$logs/$plan.c1.metrics" "$logs/$plan.c2.metrics" >"$logs/$plan.c.metrics"
  if cmp -s "$logs/$plan.a.metrics" "$logs/$plan.b.metrics"; then
    note "$plan: two GPU runs equal bit for bit"
  else
    failed "$plan: two GPU runs differ"
  fi
  if cmp -s "$logs/$plan.a.metrics" "$logs/$plan.c.metrics" &&
     "$here/bin/mtckpt" diff "$logs/$plan.a.ckpt" "$logs/$plan.c.ckpt" >/dev/null; then
    note "$plan: 3 steps + save + resume + 3 equal 6 steps bit for bit"
  else
    failed "$plan: the resumed run differs from the straight one"
  fi
done
# Weight gradients on a second stream: the same bits as on one.
for plan in gpt-tiny-bf16-none gpt-tiny-bf16-full; do
  MT_CUDA_SIDE_STREAM=on train "$plan" "$plan.side" 6
  if cmp -s "$logs/$plan.a.metrics" "$logs/$plan.side.metrics"; then
    note "$plan: weight gradients on a second stream equal one stream's bit for bit"
  else
    failed "$plan: weight gradients on a second stream differ from one stream's"
  fi
done

# 2b. A whole GPT-2 124M in bf16 on the GPU follows the CPU backend's loss curve: the
# same plan, seed and text, the CPU run on the node's cores beside the GPU's; each of the
# first 10 losses within 1e-2 of the CPU's, relatively.
curve() { # backend: mtrun in place of the subshell that calls it
  exec "$here/bin/mtrun" "$here/plans/gpt2-124m-curve.mtp" --backend "$1" \
    --data "$here/data/fortunes" --steps 10 --seed 7 --lr 3e-4 --warmup-steps 2 \
    --lr-decay-steps 10 --metrics "$logs/gpt2-124m.$1.metrics" >"$logs/gpt2-124m.$1.log" 2>&1
}
rm -f "$logs"/gpt2-124m.*.metrics
# The CPU run leaves a core to the GPU run's host thread, and dies with this script.
(OMP_NUM_THREADS=$(( $(nproc) > 2 ? $(nproc) - 1 : 1 )) curve cpu) &
cpu=$!
trap 'kill "$cpu" 2>/dev/null' EXIT
(curve cuda) || failed "mtrun gpt2-124m on the GPU (see $logs/gpt2-124m.cuda.log)"
wait "$cpu" || failed "mtrun gpt2-124m on the CPU (see $logs/gpt2-124m.cpu.log)"
trap - EXIT
if ! command -v python3 >/dev/null; then
  failed "gpt2-124m bf16: no python3 to compare the loss curves (logs in $logs)"
elif python3 "$here/follows.py" "$logs/gpt2-124m.cpu.metrics" "$logs/gpt2-124m.cuda.metrics" \
     10 1e-2 CPU,GPU >"$logs/gpt2-124m.follows.log" 2>&1; then
  note "gpt2-124m bf16: $(tail -1 "$logs/gpt2-124m.follows.log")"
else
  cat "$logs/gpt2-124m.follows.log"
  failed "gpt2-124m bf16: the GPU's loss curve leaves the CPU's"
fi

fi

# 3. compute-sanitizer.
if [ -n "$mode" ]; then
  if [ "$gpus" -eq 0 ]; then
    failed "$mode: no GPU visible"
    exit 1
  fi
  PATH=$PATH:/usr/local/cuda/bin
  if ! command -v compute-sanitizer >/dev/null; then
    failed "--sanitize: no compute-sanitizer on PATH or in /usr/local/cuda/bin"
    exit 1
  fi
  for plan in gpt-tiny-fp32-none gpt-tiny-bf16-none gpt-tiny-fp32-selective \
              gpt-tiny-bf16-selective gpt-tiny-fp32-full gpt-tiny-bf16-full gpt-tiny-bf16-flash; do
    for tool in memcheck racecheck initcheck; do
      log="$logs/sanitize-$plan-$tool.log"
      # racecheck does not model the wgmma/mbarrier synchronisation of cuDNN's Hopper
      # flash kernels (it reported 68 hazards inside cudnn_generated_*_sdpa_* alone): it
      # checks our kernels, memcheck and initcheck every kernel.
      exclude=()
      [ "$tool" = racecheck ] && exclude=(--kernel-name-exclude kns=cudnn)
      compute-sanitizer --tool "$tool" ${exclude[@]+"${exclude[@]}"} --target-processes all --error-exitcode 99 "$here/bin/mtrun" \
        "$here/plans/$plan.mtp" --backend cuda --data "$here/data/tiny" --steps 2 >"$log" 2>&1
      status=$?
      summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)
      if [ "$status" -eq 0 ]; then
        note "$tool $plan: clean ($summary)"
      else
        failed "$tool $plan: exit $status ($summary; see $log)"
      fi
    done
  done
fi

note "$failures failure(s)"
exit $((failures > 0))
