#!/usr/bin/env bash
# The runtime bundle (scripts/bundle.sh) as a bare GPU node sees it: sent as a tarball of
# at most 48 MiB that unpacks to the same files;
# moved elsewhere and run from a scrubbed environment it trains a CPU step; every
# library it loads is its own, the C/C++ runtime's, or CUDA's (found on the machine),
# and none belongs to a -dev package; a one-process run needs no MPI, several ranks load
# the MPI plugin from the bundle, and a launcher without the plugin gets a clear error;
# its GPU test script runs the carried plans (here: reports the skip).
# usage: bundle.sh WORK_DIR [BUILD_DIR]
set -euo pipefail
work=$(realpath -m "$1")
cd "$(dirname "$0")/../.."
export MTC_BUILD_DIR=$(realpath -m "${2:-build}")
rm -rf "$work" && mkdir -p "$work"
fail() { echo "bundle test: $*" >&2; exit 1; }

bash scripts/bundle.sh "$work/made" | tee "$work/bundle.log"
packed=$(stat -c %s "$work/made.tgz")
[ "$packed" -le $((48 << 20)) ] || fail "its tarball is $packed bytes, over 48 MiB"
mkdir "$work/unpacked" && tar xzf "$work/made.tgz" -C "$work/unpacked"
diff -r "$work/made" "$work/unpacked/made" >/dev/null || fail "its tarball does not hold the bundle"
rm -rf "$work/unpacked"
# Moved: nothing may point back into the build tree.
mv "$work/made" "$work/bundle"
bundle=$work/bundle

# Every plan session.sh's a/b steps profile (`ab ROUNDS PLAN...`).
plans=$({ grep -oE '\bab [0-9]+( [a-z0-9][a-z0-9.-]*)+' "$bundle/session.sh" || true; } |
  cut -d' ' -f3- | tr ' ' '\n' | sort -u)
[ "$(echo "$plans" | wc -l)" -ge 5 ] || fail "session.sh's a/b steps name too few plans: $plans"
for plan in $plans; do
  [ -s "$bundle/plans/ab/$plan.mtp" ] || fail "no plans/ab/$plan.mtp for session.sh's a/b steps"
done

# bench/calibrate.sh's: each calibration model's plan, and the list it reads them by.
. bench/calibration-models.sh
for name in "${calibration_models[@]}"; do
  [ -s "$bundle/plans/calibrate/$name.mtp" ] || fail "no plans/calibrate/$name.mtp for calibrate.sh"
done
cmp -s bench/calibration-models.sh "$bundle/bench/calibration-models.sh" || fail "no bench/calibration-models.sh"

# A CPU step from a scrubbed environment.
rm -rf "$work/ckpt"
env -i "$bundle/bin/mtrun" "$bundle/plans/gpt-tiny-fp32-none.mtp" --backend cpu \
  --data "$bundle/data/tiny" --steps 2 --save "$work/ckpt" >"$work/step.log" 2>&1 || { cat "$work/step.log"; fail "the CPU step failed"; }
grep -q '^step 2/2 | loss' "$work/step.log" || { cat "$work/step.log"; fail "no second step"; }
env -i "$bundle/bin/mtckpt" verify "$work/ckpt" >"$work/verify.log" 2>&1 || { cat "$work/verify.log"; fail "its checkpoint does not verify"; }
echo "bundle test: a scrubbed environment trains two CPU steps, and mtckpt verifies their checkpoint"

# The loss-curve check's parts: GPT-2 124M's plan runs on the carried text, and
# follows.py passes a curve against itself and fails one that leaves it by 2%.
env -i "$bundle/bin/mtrun" "$bundle/plans/gpt2-124m-curve.mtp" --backend cpu \
  --data "$bundle/data/fortunes" --steps 1 --seed 7 --metrics "$work/curve.metrics" \
  >"$work/curve.log" 2>&1 || { cat "$work/curve.log"; fail "a GPT-2 124M step on the carried text failed"; }
python3 "$bundle/follows.py" "$work/curve.metrics" "$work/curve.metrics" 1 1e-2 >/dev/null ||
  fail "follows.py: a curve does not follow itself"
awk '{ $4 = $4 * 1.02; print }' "$work/curve.metrics" >"$work/curve-off.metrics"
if python3 "$bundle/follows.py" "$work/curve.metrics" "$work/curve-off.metrics" 1 1e-2 >/dev/null; then
  fail "follows.py: a loss 2% off passed"
fi
echo "bundle test: GPT-2 124M trains a CPU step on the carried text; follows.py tells 2% from none"

# What the loader resolves, with the wrappers' library path.
env -i sh -c "here='$bundle'; . '$bundle/lib/paths.sh'; for f in '$bundle'/libexec/* \$(ls '$bundle'/lib/*.so* | grep -v libmtc_mpi); do echo \"# \$f\"; ldd \"\$f\"; done" \
  >"$work/ldd.log"
! grep -q 'not found' "$work/ldd.log" || { grep -B20 'not found' "$work/ldd.log"; fail "a library is not found"; }
# Each library: the bundle's own copy (whose source, lib/SOURCES, must not belong to a
# -dev package), the C/C++ runtime's, or CUDA's.
owner_of() { # the Debian package that installed a path (/lib is /usr/lib), or ""
  for path in "$1" "${1/#\/lib\//\/usr\/lib\/}" "$(readlink -f "$1")"; do
    owner=$(dpkg -S "$path" 2>/dev/null | head -1 | cut -d: -f1 || true)
    [ -z "$owner" ] || { echo "$owner"; return; }
  done
}
while read -r name source; do
  owner=$(owner_of "$source")
  [ -n "$owner" ] || fail "lib/$name: no package owns its source $source"
  case "$owner" in *-dev) fail "lib/$name comes from $source, of the -dev package $owner" ;; esac
done <"$bundle/lib/SOURCES"
awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' "$work/ldd.log" | sort -u |
while read -r name path; do
  case "$path" in "$bundle"/lib/*) continue ;; esac
  case "$name" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libstdc++.so.*|libgcc_s.so.*) ;;
    libcudart.so.*|libcublas.so.*|libcublasLt.so.*|libnccl.so.*|libcudnn*.so.*|libnvrtc*.so.*) ;;
    *) fail "$name resolves outside the bundle, to $path" ;;
  esac
  owner=$(owner_of "$path")
  case "$owner" in *-dev) fail "$name resolves to $path, of the -dev package $owner" ;; esac
done
echo "bundle test: every library is the bundle's, the C/C++ runtime's or CUDA's; none of a -dev package"

# Several ranks: the launcher's MPI, the bundle's plugin.
"$MTC_BUILD_DIR/tools/mtc" compile models/gpt-tiny.mlir --micro-batch-size 2 --global-batch-size 4 --tp 2 \
  -o "$work/tp2.mtp" >/dev/null
mpirun -n 2 --allow-run-as-root --oversubscribe --mca btl self,vader "$bundle/bin/mtrun" \
  "$work/tp2.mtp" --backend cpu --data "$bundle/data/tiny" --steps 2 >"$work/tp2.log" 2>&1 ||
  { cat "$work/tp2.log"; fail "two ranks from the bundle failed"; }
grep -q '^step 2/2 | loss' "$work/tp2.log" || { cat "$work/tp2.log"; fail "two ranks: no second step"; }
echo "bundle test: two MPI ranks load the bundle's plugin"

# One rank under a launcher needs no MPI; several without the plugin: a message, exit 1.
rm "$bundle/lib/libmtc_mpi.so"
env -i PMI_SIZE=1 "$bundle/bin/mtrun" "$bundle/plans/gpt-tiny-fp32-none.mtp" --backend cpu \
  --data "$bundle/data/tiny" --steps 1 >"$work/onerank.log" 2>&1 ||
  { cat "$work/onerank.log"; fail "one rank under a launcher needed the MPI plugin"; }
if env -i PMI_SIZE=2 "$bundle/bin/mtrun" "$work/tp2.mtp" --backend cpu \
     --data "$bundle/data/tiny" --steps 1 >"$work/noplugin.log" 2>&1; then
  fail "a launched run without the MPI plugin succeeded"
fi
grep -q "the MPI communicator cannot be loaded" "$work/noplugin.log" ||
  { cat "$work/noplugin.log"; fail "no message without the plugin"; }
echo "bundle test: without the plugin a launched run says so"

# The GPU test script runs the carried plans; without a GPU it says so and passes.
env -i PATH=/usr/bin:/bin LOGS="$work/gpu-logs" bash "$bundle/test-gpu.sh" >"$work/gpu.log" 2>&1 ||
  { cat "$work/gpu.log"; fail "test-gpu.sh failed"; }
cat "$work/gpu.log"
grep -q "plans from $bundle/plans/cuda_backend_test" "$work/gpu-logs/cuda_backend_test.log" ||
  fail "cuda_backend_test did not use the carried plans"
echo "bundle test: passed"
