#!/usr/bin/env bash
# One GPU lease's checks from the runtime bundle, the most important first, each under its
# own limit and all within BUDGET seconds (default 540), so that a lease of a few minutes
# brings back what it had time for. The steps, in the order given (default: bench-gpt2,
# test-gpu, bench-1.3b and sanitize; backend and mtc-1.3b are parts of those):
#   bench-gpt2   bench/gpu.sh on GPT-2 124M (mtc with and without CUDA graphs, PyTorch,
#                the profile)
#   backend      cuda_backend_test alone: every op against the CPU backend
#   test-gpu     test-gpu.sh: every op, bit-exact reruns and resume, GPT-2's loss curve
#   bench-1.3b   bench/gpu.sh on the 1.3B model
#   mtc-1.3b     mtc alone on the 1.3B model: its throughput after 10 steps, its profile
#   fusion-ab    GPT-2 124M with and without the bias-gradient fusion, each profiled in
#                turn, twice: one change's profile before and after on one device
#   vocab-ab     GPT-2 124M with its vocabulary padded (50,304) and not (50,257), each
#                profiled: where an odd vocabulary's time goes
#   dropout-ab   GPT-2 124M without and with 10% of its attention's probabilities
#                dropped (cuDNN given our keep mask), each profiled; then the latter
#                through our kernels (MT_CUDA_ATTENTION=exact)
#   attention-ab LLaMA 3 8B's shapes in 4 layers, its grouped-query attention through
#                cuDNN (its queries packed) and through our kernels, each profiled
#   gemm-ab      GPT-2 124M profiled with cuBLASLt's heuristic's first algorithms, then
#                choosing the fastest of its candidates (MT_CUDA_GEMM_CHOICES, a new
#                file), then reading that file (the same losses), then choosing for its
#                weight gradients written in 16 bits and added apart (without the
#                gradient-accumulation fusion); the 1.3B model chosen for too; the files,
#                with every candidate's time, go to logs.tgz
#   kernels      Nsight Compute (where the node has ncu) on one eager step of GPT-2 124M:
#                the first launches of each bandwidth-bound family and of the forward's
#                and the backward's GEMMs, each one's speed of light (memory and compute
#                throughput against the device's peaks): what bounds each
#   streams      gpu_streams: a layer's backward products with the weight gradients on a
#                second stream beside the input gradients, against one stream (GPT-2
#                124M's and the 1.3B's shapes): what overlapping them would save
#   side-ab      GPT-2 124M trained with its weight gradients on one stream and on two
#                (MT_CUDA_SIDE_STREAM=on), twice in turn, unprofiled (a profile runs one
#                stream): tokens/s, and whether the losses are the same bits
#   attention-engines  gpu_attention: every engine cuDNN's flash attention offers for
#                GPT-2 124M's and the 1.3B's attention, forward and backward
#                (deterministic, and with atomics for the price of determinism)
#   sanitize     test-gpu.sh --sanitize-only
#   calibrate    bench/calibrate.sh with the H100's or H200's system file: GEMMs (and
#                their grid), copies, launches, then the calibration models' profiles;
#                the system file it writes, its raw figures and the profiles go to
#                logs.tgz, for bench/calibrate-families.sh where mtc is built
# Each step's output goes to $OUT/<step>.log, a line per step to $OUT/session.log, and the
# tests' own logs (not their checkpoints) to $OUT/logs.tgz.
# usage: OUT=DIR bash session.sh [BUDGET [STEP...]]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:?session.sh: set OUT to the folder for its logs}
budget=${1:-540}
[[ $budget =~ ^[0-9]+$ ]] || { echo "usage: OUT=DIR bash session.sh [BUDGET [STEP...]]" >&2; exit 2; }
shift $(($# > 0))
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(bench-gpt2 test-gpu bench-1.3b sanitize)
logs=$(mktemp -d)
say() { echo "session: $*" | tee -a "$out/session.log"; }
# What each took, with a margin: on an H100 on 2026-11-26, test-gpu's (182 s),
# gemm-ab's (13 s), kernels' (55 s) and attention-ab's (4 s) on an H200 on 2026-11-28,
# calibrate's with its step runs, and dropout-ab's, guessed. The default four's limits add to 660 s: under
# the default budget the last, sanitize, gets what is left.
declare -A limits=([bench-gpt2]=90 [backend]=60 [test-gpu]=300 [bench-1.3b]=150 [mtc-1.3b]=70 [sanitize]=120
  [calibrate]=180 [streams]=30 [side-ab]=90 [attention-engines]=90 [fusion-ab]=60 [vocab-ab]=45 [dropout-ab]=60 [attention-ab]=90 [gemm-ab]=120 [kernels]=150)
# ROUNDS rounds of each plan of plans/ab profiled in turn, on the same tokens.
ab() {
  local rounds=$1
  shift
  [ -s "$logs/tokens.idx" ] || python3 "$here/bench/random_tokens.py" "$logs/tokens" 50257 2000000 ||
    return
  for ((round = 1; round <= rounds; ++round)); do
    for plan in "$@"; do
      echo "== $plan, round $round"
      "$here/bin/mtrun" "$here/plans/ab/$plan.mtp" --backend cuda --data "$logs/tokens" \
        --steps 8 --log-every 8 --lr 1e-4 --profile || return
    done
  done
}
run_step() {
  case "$1" in
  bench-gpt2) WORK="$logs/bench" MT_BENCH_MODELS=gpt2-124m bash "$here/bench/gpu.sh" 20 ;;
  backend)
    MT_REQUIRE_GPU=1 MT_TEST_PLANS="$here/plans/cuda_backend_test" "$here/bin/cuda_backend_test" \
      >"$logs/cuda_backend_test.log" 2>&1
    local status=$?
    # What failed, with the lines that say why.
    grep -E -B1 -A12 '^\[  FAILED  \]|Failure$' "$logs/cuda_backend_test.log" | head -200
    grep -E '^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test' "$logs/cuda_backend_test.log"
    return $status
    ;;
  test-gpu) LOGS="$logs/test-gpu" bash "$here/test-gpu.sh" ;;
  bench-1.3b) WORK="$logs/bench" MT_BENCH_MODELS=gpt3-1.3b bash "$here/bench/gpu.sh" 20 ;;
  mtc-1.3b)
    python3 "$here/bench/random_tokens.py" "$logs/tokens" 50257 2000000 &&
      MT_CUDA_ATTENTION=cudnn "$here/bin/mtrun" "$here/plans/bench/gpt3-1.3b.mtp" --backend cuda \
        --data "$logs/tokens" --steps 20 --log-every 10 --lr 1e-4 &&
      MT_CUDA_ATTENTION=cudnn "$here/bin/mtrun" "$here/plans/bench/gpt3-1.3b.mtp" --backend cuda \
        --data "$logs/tokens" --steps 6 --log-every 6 --lr 1e-4 --profile
    ;;
  sanitize) LOGS="$logs/sanitize" bash "$here/test-gpu.sh" --sanitize-only ;;
  streams) "$here/bin/gpu_streams" ;;
  side-ab)
    [ -s "$logs/tokens.idx" ] || python3 "$here/bench/random_tokens.py" "$logs/tokens" 50257 2000000 ||
      return
    for round in 1 2; do
      for side in off on; do
        echo "== MT_CUDA_SIDE_STREAM=$side, round $round"
        MT_CUDA_SIDE_STREAM=$side "$here/bin/mtrun" "$here/plans/ab/gpt2-124m.mtp" --backend cuda \
          --data "$logs/tokens" --steps 30 --log-every 10 --lr 1e-4 \
          --metrics "$logs/side-$side.$round.metrics" || return
      done
    done
    cmp "$logs/side-off.1.metrics" "$logs/side-on.1.metrics" && echo "side-ab: the same losses"
    ;;
  attention-engines) "$here/bin/gpu_attention" ;;
  fusion-ab) ab 2 gpt2-124m gpt2-124m-no-bias-grad-fusion ;;
  vocab-ab) ab 1 gpt2-124m gpt2-124m-unpadded ;;
  dropout-ab)
    ab 1 gpt2-124m gpt2-124m-attention-dropout &&
      echo "== MT_CUDA_ATTENTION=exact" &&
      MT_CUDA_ATTENTION=exact ab 1 gpt2-124m-attention-dropout
    ;;
  attention-ab)
    for path in cudnn exact; do
      echo "== MT_CUDA_ATTENTION=$path"
      MT_CUDA_ATTENTION=$path ab 1 llama3-8b-4layers || return
    done
    ;;
  gemm-ab)
    rm -f "$logs"/*.choices
    echo "== the heuristic's first" && ab 1 gpt2-124m &&
      echo "== choosing" && MT_CUDA_GEMM_CHOICES="$logs/gpt2-124m.choices" ab 1 gpt2-124m &&
      echo "== the file's choices" && MT_CUDA_GEMM_CHOICES="$logs/gpt2-124m.choices" ab 1 gpt2-124m &&
      echo "== choosing, weight gradients in 16 bits" &&
      MT_CUDA_GEMM_CHOICES="$logs/gpt2-124m.choices" ab 1 gpt2-124m-no-gradient-accumulation-fusion ||
      return
    for choices in "" "$logs/gpt3-1.3b.choices"; do
      echo "== gpt3-1.3b, MT_CUDA_GEMM_CHOICES=$choices"
      MT_CUDA_ATTENTION=cudnn MT_CUDA_GEMM_CHOICES=$choices "$here/bin/mtrun" \
        "$here/plans/bench/gpt3-1.3b.mtp" --backend cuda --data "$logs/tokens" --steps 6 \
        --log-every 6 --lr 1e-4 --profile || return
    done
    ;;
  kernels)
    # The toolkit's own ncu first, else the newest installed apart.
    local ncu
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null ||
      ls /usr/local/cuda/nsight-compute*/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null |
      sort -V | tail -1)
    [ -n "$ncu" ] || { echo "kernels: no ncu on this node"; return 1; }
    [ -s "$logs/tokens.idx" ] || python3 "$here/bench/random_tokens.py" "$logs/tokens" 50257 2000000 ||
      return
    # Each family's first launches (FAMILY:COUNT[:SKIPPED]): the weight-gradient GEMMs
    # come after the 49 of the forward.
    local family name count skip
    for family in adamwKernel:1 normGradRows:2 crossEntropyWithGrad:1 biasDropoutAdd:1 \
      dropoutGrad:1 sumOfSquares:1 columnPartials:2 layerNormRows:1 'gemm|nvjet|xmma:6' \
      'gemm|nvjet|xmma:12:49'; do
      IFS=: read -r name count skip <<<"$family"
      echo "== $name: $count launches after ${skip:-0}"
      MT_CUDA_GRAPHS=off "$ncu" --target-processes all --kernel-name "regex:$name" \
        --launch-skip "${skip:-0}" --launch-count "$count" --section SpeedOfLight \
        "$here/bin/mtrun" "$here/plans/ab/gpt2-124m.mtp" --backend cuda --data "$logs/tokens" \
        --steps 1 --lr 1e-4 || return
    done
    ;;
  calibrate)
    local system=dgx-h100
    nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && system=dgx-h200
    mkdir -p "$logs/calibrate"
    WORK="$logs/calibrate" bash "$here/bench/calibrate.sh" "$here/systems/$system.json" \
      "$logs/calibrate/$system-measured.json"
    ;;
  *) echo "session.sh: no step $1" >&2; return 2 ;;
  esac
}
nvidia-smi >"$out/session.log" 2>&1
say "commit $(cat "$here/COMMIT"), budget $budget s, steps ${steps[*]}"
for name in "${steps[@]}"; do
  limit=${limits[$name]:-60} left=$((budget - SECONDS))
  ((left < limit)) && limit=$left
  if ((limit < 20)); then
    say "$name: not run, $left s of the budget left"
    continue
  fi
  began=$SECONDS
  # In a subshell under timeout: a step that hangs costs its limit, not the lease.
  export -f run_step ab
  export here logs
  timeout -k 5 "$limit" bash -c "run_step $name" >"$out/$name.log" 2>&1
  say "$name: exit $? after $((SECONDS - began)) s (limit $limit s)"
done
(cd "$logs" && find . -name '*.log' -o -name '*.metrics' -o -name '*.run' -o -name '*.eager' \
  -o -name '*.torch' -o -name '*.profile' -o -name '*-measured*.json' -o -name '*.choices' |
  tar czf "$out/logs.tgz" -T -) 2>/dev/null
