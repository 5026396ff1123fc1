#!/usr/bin/env bash
# One H100/H200: mtc against PyTorch (torch.compile, SDPA, bf16) on GPT-2 124M and a
# 1.3B model, measured in the same run, both with hidden dropout 0.1 and no dropout of
# attention probabilities (scripts/bundle.sh says why), both on the vocabulary mtc pads
# to (50304). Prints a table:
#   model | mtc tok/s | mtc's tok/s kernel by kernel (MT_CUDA_GRAPHS=off) | PyTorch tok/s
#   | ratio | mtc TFLOP/s | MFU (of 989 TFLOP/s dense bf16)
#   | mtrun's start-up (launch to the first step) | what the first 10 steps took beyond
#   10 steady ones (choosing kernels, recording graphs) | measured step s | `mtc estimate`'s step
#   s (--system dgx-h200-measured on an H200, else dgx-h100-measured: as calibrated by
#   bench/calibrate.sh and calibrate-families.sh) | the estimate's error
#   | memory: mtc's prediction, what mtrun held for the plan, mtrun's whole use, PyTorch's
# then each model's profile (device time by opcode, slowest instructions).
# Runs from the runtime bundle (scripts/bundle.sh), whose plans were compiled where mtc
# is built: the GPU node needs no compiler.
#   on the build machine:  bash scripts/bundle.sh          (writes build/mtc-runtime)
#   on the GPU node:       bash build/mtc-runtime/bench/gpu.sh [STEPS]
# MT_BENCH_MODELS=gpt2-124m (a glob of the bundle's plans/bench/*.env) runs only those.
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
# mtrun's tok/s is over the steps since its last line: the last line's leaves out the
# first interval (the first step sizes and chooses the kernels, the second records the
# CUDA graphs), as PyTorch's timing leaves out its warm-up steps.
interval=10
((steps >= 2 * interval)) || { echo "gpu.sh: STEPS must be at least $((2 * interval))" >&2; exit 2; }
work=${WORK:-$(mktemp -d)} # each run's log (session.sh brings them back)
mkdir -p "$work"
peak=989e12

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
system=dgx-h100-measured
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && system=dgx-h200-measured
echo "estimates: mtc estimate --system $system"
echo "commit $(cat "$bundle/COMMIT")"
# Fused attention through cuDNN, or the run fails rather than timing our kernels.
export MT_CUDA_ATTENTION=${MT_CUDA_ATTENTION:-cudnn}
echo "MT_CUDA_ATTENTION=$MT_CUDA_ATTENTION"
python3 "$here/random_tokens.py" "$work/tokens" 50257 8000000

printf '%-12s %14s %14s %14s %7s %12s %6s %9s %9s %10s %10s %7s %9s %9s %9s %9s\n' model \
  "mtc tok/s" "eager tok/s" "PyTorch tok/s" ratio "mtc TFLOP/s" MFU "start s" "warm-up s" "step s" "estimate s" error "plan GiB" \
  "held GiB" "mtc GiB" "torch GiB"
for env in "$bundle"/plans/bench/${MT_BENCH_MODELS:-*}.env; do
  [ -e "$env" ] || { echo "gpu.sh: no model $(basename "$env" .env) in $bundle/plans/bench" >&2; exit 2; }
  # model seq batch flops layers hidden heads vocab
  eval "$(cat "$env")"
  estimated=$estimated_h100
  [ "$system" = dgx-h200-measured ] && estimated=$estimated_h200
  "$bundle/bin/mtrun" "$bundle/plans/bench/$model.mtp" --backend cuda --data "$work/tokens" \
    --steps "$steps" --log-every "$interval" --lr 1e-4 >"$work/$model.run"
  ours=$(sed -n 's/.*| \([0-9]*\) tok\/s.*/\1/p' "$work/$model.run" | tail -1)
  first=$(sed -n 's/.*| \([0-9]*\) tok\/s.*/\1/p' "$work/$model.run" | head -1)
  # The same run kernel by kernel: what recording the programs as CUDA graphs gains.
  MT_CUDA_GRAPHS=off "$bundle/bin/mtrun" "$bundle/plans/bench/$model.mtp" --backend cuda \
    --data "$work/tokens" --steps "$steps" --log-every "$interval" --lr 1e-4 >"$work/$model.eager"
  eager=$(sed -n 's/.*| \([0-9]*\) tok\/s.*/\1/p' "$work/$model.eager" | tail -1)
  python3 "$here/torch_gpt.py" --layers "$layers" --hidden "$hidden" --heads "$heads" \
    --vocab "$vocab" --seq "$seq" --batch "$batch" --steps "$steps" \
    --attention-dropout "${attention_dropout:-0.1}" >"$work/$model.torch"
  python3 - "$model" "$ours" "$flops" "$((seq * batch))" "$peak" "$estimated" "$eager" \
    "$first" "$interval" "$work/$model.run" "$work/$model.torch" <<'PY'
import json, re, sys
model, ours, flops, tokens, peak, estimated, eager, first, interval = (
    sys.argv[1], *map(float, sys.argv[2:10]))
run, torch = open(sys.argv[10]).read(), json.load(open(sys.argv[11]))
theirs = torch["tokens_per_second"]
tflops = flops / tokens * ours / 1e12
step = tokens / ours  # one micro-batch per step
# mtrun's memory line: held for the plan, mtc's prediction, the most held at once,
# and the device's use at the end (the plan's buffers, the backend's workspaces, the
# libraries' own memory and the CUDA context).
m = re.search(r"memory: (\d+) bytes held for the plan, (\d+) predicted .*?at most (\d+) at once"
              r"(?:.*?the device: (\d+) of)?", run)
if not m:
    sys.exit(f"gpu.sh: mtrun printed no memory line for {model}")
held, predicted, most = (int(g) for g in m.groups()[:3])
device = int(m.group(4)) if m.group(4) else float("nan")
gib = 2.0 ** 30
start = re.search(r"start-up: ([0-9.]+) s from launch", run)
if not start:
    sys.exit(f"gpu.sh: mtrun printed no start-up line for {model}")
# What the first interval took beyond as many steady steps: choosing kernels, recording.
warmup = interval * tokens * (1 / first - 1 / ours)
print(f"{model:12s} {ours:14,.0f} {eager:14,.0f} {theirs:14,.0f} {ours / theirs:6.2f}x {tflops:12.1f} "
      f"{tflops * 1e12 / peak:6.1%} {float(start.group(1)):9.2f} {warmup:9.2f} {step:10.4f} {estimated:10.4f} "
      f"{estimated / step - 1:+7.1%} "
      f"{predicted / gib:9.2f} {most / gib:9.2f} {(device - held + most) / gib:9.2f} "
      f"{torch['peak_bytes'] / gib:9.2f}")
PY
done
echo "plan GiB: mtc compile's prediction per rank; held GiB: the most mtrun held for the plan"
echo "at once; mtc GiB: the device's memory in use (device-wide) at mtrun's peak: the plan's"
echo "buffers, workspaces, libraries, the CUDA context; torch GiB: PyTorch's max_memory_allocated."
echo "mtc GiB less held GiB, less the workspaces mtc estimate counts (its workspace_bytes_per_rank"
echo "in plans/bench/MODEL.SYSTEM.estimate.json), is what systems/*.json's gpu.reserved_gib allows for."

# Where each step's time goes: device time by opcode and the slowest instructions
# (mtrun --profile). The host waits for every program there, so these steps are not
# the ones timed above.
for env in "$bundle"/plans/bench/${MT_BENCH_MODELS:-*}.env; do
  eval "$(cat "$env")"
  echo
  echo "$model:"
  "$bundle/bin/mtrun" "$bundle/plans/bench/$model.mtp" --backend cuda --data "$work/tokens" \
    --steps 10 --log-every 10 --lr 1e-4 --profile >"$work/$model.profile"
  sed -n '/^profile:/,/^arena:/{/^arena:/!p}' "$work/$model.profile"
  # The profile beside what mtc estimate --system $system predicted for each family.
  echo "$model: measured beside mtc estimate --system $system, by family:"
  python3 "$here/families.py" compare "$work/$model.profile" \
    "$bundle/plans/bench/$model.$system.estimate.json"
  # The backend's workspaces beside the estimate's (those that grow with the model) and
  # the GEMMs' fixed 32 MiB (CudaBackend.cu: kWorkspaceBytes).
  python3 - "$work/$model.profile" "$bundle/plans/bench/$model.$system.estimate.json" <<'PY'
import json, re, sys
m = re.search(r"(\d+) in the backend's workspaces", open(sys.argv[1]).read())
estimated = json.load(open(sys.argv[2]))["workspace_bytes_per_rank"]
if m:
    measured = int(m.group(1))
    print(f"workspaces: {measured:,} bytes measured, {estimated:,} estimated + 33,554,432 "
          f"of the GEMMs': {measured - estimated - (32 << 20):+,} bytes apart")
PY
done
