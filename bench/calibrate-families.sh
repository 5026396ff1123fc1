#!/usr/bin/env bash
# Where mtc is built: the kernel families of a system file that bench/calibrate.sh measured
# on a GPU. Each calibration model (bench/calibration-models.sh) profiled there
# (MEASURED's name with .MODEL.profile.log; GPT-2 350M's at least) is estimated on
# MEASURED and set beside its profile; then bench/families.py fits each family's fixed
# time and rate to every profile's runs, and writes OUT: MEASURED with `kernels`, and a
# `runtime` whose host gap per launch comes from GPT-2 350M's step kernel by kernel
# (MEASURED's name with .eager.log). MEASURED must have neither yet (its estimates would
# be calibrated already). Then each model's step as mtrun ran it, its programs replayed as
# CUDA graphs (.MODEL.step.log), beside its profile's device time: what the profile's
# kernel-by-kernel timing adds or leaves out, which the estimate has no term for yet.
#   bash bench/calibrate-families.sh MEASURED.json OUT.json
#     MTC: the mtc to run (a path, or a name on PATH; default: the build's)
set -euo pipefail
(($# == 2)) || { echo "usage: calibrate-families.sh MEASURED.json OUT.json" >&2; exit 2; }
measured=$(realpath "$1")
out=$(realpath -m "$2")
mtc=${MTC:-}
[[ $mtc != */* ]] || mtc=$(realpath "$mtc")
cd "$(dirname "$0")/.."
mtc=${mtc:-$(realpath build/tools/mtc)}
python3 - "$measured" <<'PY'
import json, sys
system = json.load(open(sys.argv[1]))
if "kernels" in system or "runtime" in system:
    sys.exit(f"calibrate-families: {sys.argv[1]} has kernels or a runtime already: "
             "give the file bench/calibrate.sh wrote")
PY
. bench/calibration-models.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pairs=() used=()
declare -A tokens_of
for name in "${calibration_models[@]}"; do
  profile=${measured%.json}.$name.profile.log
  if [ ! -s "$profile" ]; then
    [ "$name" != gpt2-350m ] || { echo "calibrate-families: no $profile" >&2; exit 1; }
    echo "calibrate-families: no profile of $name: fitted without it"
    continue
  fi
  used+=("$name")
  shape=$(calibration_model "$name" "$work")
  read -r seq batch <<<"$shape"
  tokens_of[$name]=$((seq * batch))
  [ "$name" != gpt2-350m ] || tokens=$((seq * batch))
  "$mtc" estimate "$work/$name.mlir" --system "$measured" --gpus 1 --bf16 \
    --seq-length "$seq" --micro-batch-size "$batch" --global-batch-size "$batch" \
    --attention-dropout 0 --json >"$work/$name.estimate.json"
  pairs+=("$profile" "$work/$name.estimate.json")
done
eager=${measured%.json}.eager.log
rate=$(sed -n 's/.*| \([0-9]*\) tok\/s.*/\1/p' "$eager" | tail -1)
[ -n "$rate" ] || { echo "calibrate-families: no tok/s in $eager" >&2; exit 1; }
# Where and when: as bench/calibrate.sh wrote it for the measured table.
how=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["sources"]["gpu.gemm_table"].rsplit("; ", 1)[-1])' "$measured")
python3 bench/families.py calibrate "${pairs[@]}" --system "$measured" \
  --eager-step-seconds "$(python3 -c "print($tokens / $rate)")" \
  --source "mtrun --profile of the calibration models (bench/calibration-models.sh: ${used[*]}), fitted by bench/calibrate-families.sh; $how" \
  -o "$out"
echo "calibrate-families: each model's step, its programs replayed as graphs, against its profile"
for name in "${used[@]}"; do
  log=${measured%.json}.$name.step.log
  [ -s "$log" ] || { echo "  $name: no step log ($log)"; continue; }
  step_rate=$(sed -n 's/.*| \([0-9]*\) tok\/s.*/\1/p' "$log" | tail -1)
  [ -n "$step_rate" ] || { echo "calibrate-families: no tok/s in $log" >&2; exit 1; }
  python3 - "$name" "${measured%.json}.$name.profile.log" "${tokens_of[$name]}" "$step_rate" <<'PY'
import sys
sys.path.insert(0, "bench")
import families
name, profile, tokens, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
total = []
families.read_profile(profile, total)
launches, device = total
step = tokens / rate
print(f"  {name}: step {step * 1e3:.3f} ms, profile {device * 1e3:.3f} ms in {launches} "
      f"launches: {100 * (step - device) / device:+.2f}%, "
      f"{(step - device) / launches * 1e6:+.2f} us a launch")
PY
done
