#!/usr/bin/env bash
# Makes the runtime bundle: a self-contained folder that runs mtrun, the CUDA backend's
# tests and the GPU benchmark on a machine with no LLVM, no MPI and no -dev packages —
# a bare GPU node. Plans are compiled here, where mtc is built, and travel as files.
#
#   bin/mtrun, bin/mtckpt, bin/cuda_backend_test, bin/gpu_calibrate, bin/gpu_streams,
#   bin/gpu_attention (CUDA builds)
#                                      wrappers: set the library path, run libexec/*
#   lib/                               the shared libraries a bare node lacks (OpenBLAS,
#                                      OpenMP, zlib, ...) and the MPI plugin; CUDA's own
#                                      libraries are found on the node (lib/paths.sh)
#   plans/                             cuda_backend_test's cases, gpt-tiny, GPT-2 124M for
#                                      the loss curve and the benchmark's models, compiled;
#                                      data/: random tokens, and the fortunes corpus tokenized
#   test-gpu.sh, bench/gpu.sh          the GPU tests and the benchmark (with what
#                                      mtc estimate predicted for its steps)
#   bench/calibrate.sh, systems/       the micro-benchmarks behind mtc estimate's
#                                      constants, and the system files they amend
# and OUT.tgz, the same as one tarball of at most 48 MiB: what a node is sent (then there:
# tar xzf mtc-runtime.tgz && OUT=DIR bash mtc-runtime/session.sh, test/gpu/session.sh).
#
# usage: bash scripts/bundle.sh [OUT]   after scripts/build.sh; OUT defaults to
#        build/mtc-runtime; MTC_BUILD_DIR names another build directory (default build)
set -euo pipefail
out=${1:+$(realpath -m "$1")}
cd "$(dirname "$0")/.."
build=$(realpath -m "${MTC_BUILD_DIR:-build}")
out=${out:-$build/mtc-runtime}
limit=$((48 << 20))
for built in "$build/tools/mtc" "$build/tools/mtrun" "$build/tools/mtckpt" \
  "$build/tools/mtdata" "$build/test/cuda_backend_test"; do
  [ -x "$built" ] || { echo "bundle: no $built: run scripts/build.sh first" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$out"/{bin,libexec,lib,plans/cuda_backend_test,plans/bench,plans/calibrate,plans/ab,data,bench}
cp "$build/tools/mtrun" "$build/tools/mtckpt" "$build/test/cuda_backend_test" "$out/libexec/"
for tool in gpu_calibrate gpu_streams gpu_attention; do
  [ ! -x "$build/runtime/$tool" ] || cp "$build/runtime/$tool" "$out/libexec/"
done
# Under the 64 MiB a lease carries: the tools but mtrun lose their symbol tables (mtrun,
# which the sanitizers run, keeps its own for their host backtraces).
for tool in mtckpt cuda_backend_test gpu_calibrate gpu_streams gpu_attention; do
  [ ! -f "$out/libexec/$tool" ] || strip "$out/libexec/$tool"
done
cp "$build/tools/libmtc_mpi.so" "$out/lib/"
cp scripts/bundle/paths.sh "$out/lib/"
for tool in mtrun mtckpt cuda_backend_test $(cd "$out/libexec" && ls gpu_calibrate gpu_streams gpu_attention 2>/dev/null); do
  cp scripts/bundle/wrapper.sh "$out/bin/$tool"
  chmod +x "$out/bin/$tool"
done
cp test/gpu/test-gpu.sh test/gpu/follows.py test/gpu/session.sh "$out/"
cp bench/gpu.sh bench/torch_gpt.py bench/random_tokens.py bench/calibrate.sh bench/calibration-models.sh bench/families.py \
  "$out/bench/"
cp -r systems "$out/systems"

# Every library ldd resolves, except the C and C++ runtimes every Linux has and CUDA's,
# which must match the node's driver. The MPI plugin's libmpi is the cluster's own.
is_system() {
  case "$1" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|linux-vdso*) return 0 ;;
    libresolv.so.*|libutil.so.*|libnsl.so.*|libanl.so.*|libmvec.so.*) return 0 ;;
    libstdc++.so.*|libgcc_s.so.*) return 0 ;;
  esac
  return 1
}
is_cuda() {
  case "$1" in
    libcuda.so.*|libcudart.so.*|libcublas.so.*|libcublasLt.so.*|libnccl.so.*|libcudnn*|libnvrtc*) return 0 ;;
  esac
  return 1
}
# lib/SOURCES records where each copy came from.
for binary in "$out"/libexec/*; do
  if ldd "$binary" | grep -q 'not found'; then
    ldd "$binary" | grep 'not found' >&2
    echo "bundle: $binary needs a library this machine does not have" >&2
    exit 1
  fi
  ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if ! is_system "$name" && ! is_cuda "$name"; then
    cp -L "$path" "$out/lib/$name"
    echo "$name $path" >>"$out/lib/SOURCES"
  fi
done

# Plans: every case of cuda_backend_test, gpt-tiny for the GPU training tests, and the
# benchmark's models with what the benchmark needs to know of them.
"$build/test/cuda_backend_test" --write-plans "$out/plans/cuda_backend_test" >/dev/null
for precision in fp32 bf16; do
  for recompute in none selective full; do
    "$build/tools/mtc" compile models/gpt-tiny.mlir --micro-batch-size 4 --global-batch-size 8 \
      --precision "$precision" --recompute "$recompute" \
      -o "$out/plans/gpt-tiny-$precision-$recompute.mtp" >/dev/null
  done
done
# gpt-tiny in bf16 without dropout of probabilities (the plans above drop them, cuDNN
# given our keep mask): cuDNN's attention alone.
"$build/tools/mtc" compile models/gpt-tiny.mlir --micro-batch-size 4 --global-batch-size 8 \
  --precision bf16 --attention-dropout 0 -o "$out/plans/gpt-tiny-bf16-flash.mtp" >/dev/null
python3 bench/random_tokens.py "$out/data/tiny" 512 100000
# A whole GPT-2 124M in bf16 on text, whose loss curve the GPU must follow from the CPU
# backend's (test-gpu.sh): the fortunes corpus, as the demo tokenizes it.
"$build/tools/mtc" compile models/gpt2-124m.mlir --bf16 --seq-length 1024 \
  --micro-batch-size 1 --global-batch-size 1 --attention-dropout 0 \
  -o "$out/plans/gpt2-124m-curve.mtp" >/dev/null
fortunes=()
for f in /usr/share/games/fortunes/*; do
  case "$f" in *.dat | *.u8) continue ;; esac
  [ -f "$f" ] && [ ! -L "$f" ] && fortunes+=(--input "$f")
done
[ ${#fortunes[@]} -gt 0 ] || { echo "bundle: no corpus in /usr/share/games/fortunes (scripts/setup.sh installs it)" >&2; exit 1; }
"$build/tools/mtdata" "${fortunes[@]}" --split-on % --train-tokenizer "$out/data/fortunes" \
  --vocab-size 1024 --output-prefix "$out/data/fortunes" >/dev/null
rm -f "$out/data/fortunes.model" "$out/data/fortunes.vocab"
# model, sequence, micro-batch. No dropout of attention probabilities, on both sides of
# the benchmark: PyTorch's flash attention is faster without it, and so is cuDNN's (which
# then reads no keep mask of ours).
attention_dropout=0
for config in "gpt2-124m 1024 8" "gpt3-1.3b 2048 4"; do
  read -r model seq batch <<<"$config"
  "$build/tools/mtc" compile "models/$model.mlir" --bf16 --seq-length "$seq" \
    --micro-batch-size "$batch" --global-batch-size "$batch" \
    --attention-dropout "$attention_dropout" \
    -o "$out/plans/bench/$model.mtp" >"$out/plans/bench/$model.compile.txt"
  flops=$(sed -n 's/^ *model FLOPs\/step *\([0-9,]*\).*/\1/p' "$out/plans/bench/$model.compile.txt" | tr -d ,)
  info=$("$build/tools/mtc" info "models/$model.mlir")
  shape=$(sed -n 's/^shape *\([0-9]*\) layers, hidden \([0-9]*\), vocab \([0-9]*\).*/\1 \2 \3/p' <<<"$info")
  [ -n "$shape" ] || { echo "bundle: mtc info printed no shape for $model" >&2; exit 1; }
  read -r layers hidden vocab <<<"$shape"
  # PyTorch gets the vocabulary mtc compile pads to (nanoGPT's 50304 for GPT-2), so both
  # sides run the same GEMMs.
  padded=$(sed -n 's/.*vocab padded to \([0-9]*\).*/\1/p' <<<"$info")
  vocab=${padded:-$vocab}
  heads=$(grep -o 'heads = [0-9]*' "models/$model.mlir" | head -1 | grep -o '[0-9]*$')
  # What mtc estimate predicts for the same step on one H100 and one H200, to set beside
  # the measure on whichever the benchmark finds (each description's runtime: mtrun as
  # calibrated there).
  estimates=()
  for system in dgx-h100-measured dgx-h200-measured; do
    "$build/tools/mtc" estimate "models/$model.mlir" --system "$system" --gpus 1 --bf16 \
      --seq-length "$seq" --micro-batch-size "$batch" --global-batch-size "$batch" \
      --attention-dropout "$attention_dropout" --json \
      >"$out/plans/bench/$model.$system.estimate.json"
    estimates+=("$(python3 -c 'import json,sys; print(json.load(sys.stdin)["iteration_seconds"])' \
      <"$out/plans/bench/$model.$system.estimate.json")")
  done
  printf 'model=%s seq=%s batch=%s flops=%s layers=%s hidden=%s heads=%s vocab=%s estimated_h100=%s estimated_h200=%s attention_dropout=%s\n' \
    "$model" "$seq" "$batch" "$flops" "$layers" "$hidden" "$heads" "$vocab" "${estimates[0]}" \
    "${estimates[1]}" "$attention_dropout" \
    >"$out/plans/bench/$model.env"
done
# GPT-2 124M as the benchmark runs it, with and without the bias-gradient fusion, for
# session.sh's fusion-ab (the one change's profile before and after, on one device),
# with its vocabulary unpadded (50,257), for vocab-ab (where the odd vocabulary's time
# goes), and without the gradient-accumulation fusion, for gemm-ab (weight gradients
# written in 16 bits, then added).
for variant in "" --no-bias-grad-fusion "--make-vocab-size-divisible-by 1" \
  --no-gradient-accumulation-fusion; do
  name=gpt2-124m${variant:+-${variant#--}}
  [[ $variant == --make-vocab* ]] && name=gpt2-124m-unpadded
  "$build/tools/mtc" compile models/gpt2-124m.mlir --bf16 --seq-length 1024 --micro-batch-size 8 \
    --global-batch-size 8 --attention-dropout "$attention_dropout" $variant \
    -o "$out/plans/ab/$name.mtp" >/dev/null
done
# And with 10% of its attention's probabilities dropped, Megatron's default, for
# dropout-ab (cuDNN with our keep mask, and our kernels).
"$build/tools/mtc" compile models/gpt2-124m.mlir --bf16 --seq-length 1024 --micro-batch-size 8 \
  --global-batch-size 8 --attention-dropout 0.1 -o "$out/plans/ab/gpt2-124m-attention-dropout.mtp" \
  >/dev/null
# LLaMA 3 8B's shapes in 4 layers (grouped-query attention, 32 heads in 8 groups of 128,
# over 2048 positions), for attention-ab: its attention through cuDNN and through our
# kernels.
sed 's/mt.repeat 32 @block/mt.repeat 4 @block/' models/llama3-8b.mlir >"$out/llama3-8b-4layers.mlir"
grep -q 'mt.repeat 4 @block' "$out/llama3-8b-4layers.mlir" ||
  { echo "bundle.sh: models/llama3-8b.mlir no longer repeats 32 blocks" >&2; exit 1; }
"$build/tools/mtc" compile "$out/llama3-8b-4layers.mlir" --bf16 --seq-length 2048 \
  --micro-batch-size 1 --global-batch-size 1 -o "$out/plans/ab/llama3-8b-4layers.mtp" >/dev/null
rm "$out/llama3-8b-4layers.mlir"
# The models bench/calibrate.sh profiles to calibrate the kernel families, apart from the
# benchmark's models, which the calibration is then checked on.
. bench/calibration-models.sh
models=$(mktemp -d)
for name in "${calibration_models[@]}"; do
  shape=$(calibration_model "$name" "$models")
  read -r seq batch <<<"$shape"
  "$build/tools/mtc" compile "$models/$name.mlir" --bf16 --seq-length "$seq" --micro-batch-size "$batch" \
    --global-batch-size "$batch" --attention-dropout "$attention_dropout" \
    -o "$out/plans/calibrate/$name.mtp" >/dev/null
done
rm -rf "$models"
git rev-parse HEAD >"$out/COMMIT" 2>/dev/null || echo unknown >"$out/COMMIT"

# What a lease carries: the bundle as one tarball, beside the working tree (64 MiB in all).
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
bytes=$(du -sb "$out" | cut -f1) packed=$(stat -c %s "$out.tgz")
echo "bundle: $out, $((bytes >> 20)) MiB ($bytes bytes), $(ls "$out/lib" | wc -l) libraries;" \
  "$out.tgz, $((packed >> 20)) MiB"
if [ "$packed" -gt "$limit" ]; then
  echo "bundle: $out.tgz is larger than 48 MiB: with a working tree, more than a lease carries" >&2
  exit 1
fi
