#!/usr/bin/env bash
# On one GPU: the micro-benchmarks behind `mtc estimate`'s constants (bench/calibrate.cu),
# and the system file they make: SYSTEM.json with the GPU's measured GEMM efficiency,
# table of products (gpu.gemm_table), streaming-memory efficiency and kernel overhead in
# place of the specification's. Beside it, for the kernel families: `mtrun --profile` of
# each calibration model (bench/calibration-models.sh; OUT's name with .MODEL.profile.log)
# and GPT-2 350M's steps kernel by kernel (.eager.log), which bench/calibrate-families.sh
# turns into the families' rates where mtc is built; and each calibration model's steps
# as mtrun runs them, its programs replayed as CUDA graphs (.MODEL.step.log), which it
# sets beside the profile's device time. Each field's source names this
# command, the GPU and the date.
#   bash build/mtc-runtime/bench/calibrate.sh [SYSTEM [OUT]]
#     SYSTEM  the description to start from (default: the bundle's systems/dgx-h100.json)
#     OUT     where to write (default: SYSTEM's name with -measured.json); the raw
#             measurements go to OUT's name with .raw.json
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bundle=$(cd "$here/.." && pwd)
system=${1:-$bundle/systems/dgx-h100.json}
out=${2:-${system%.json}-measured.json}
raw=${out%.json}.raw.json
read -r peak bandwidth tile_m tile_n < <(python3 - "$system" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))["gpu"]
print(g["peak_tflops"]["bf16"], g["memory_bandwidth_gbs"], *g["gemm_tile"])
PY
)
"$bundle/bin/gpu_calibrate" "$peak" "$bandwidth" "$tile_m" "$tile_n" | tee "$raw"
python3 - "$system" "$raw" "$out" <<'PY'
import datetime, json, sys
system, raw, out = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
when = datetime.date.today().isoformat()
how = f"bench/calibrate.sh on {raw['device']}, {when} (raw: {sys.argv[2].rsplit('/', 1)[-1]})"
system["name"] += " (measured)"
system["gpu"]["gemm_efficiency"] = round(min(1.0, raw["gemm_efficiency"]), 4)
system["gpu"]["memory_efficiency"] = round(min(1.0, raw["memory_efficiency"]), 4)
system["gpu"]["kernel_overhead_us"] = round(raw["kernel_overhead_us"], 3)
sources = system.setdefault("sources", {})
sources["gpu.gemm_efficiency"] = ("median over bf16 cuBLAS products of at least 1 TFLOP of "
                                  "the tile-and-wave model's time over the measured; " + how)
sources["gpu.memory_efficiency"] = (f"a 1 GiB device-to-device copy: {raw['copy_gbs']} GB/s "
                                    "read and written, over the datasheet; " + how)
sources["gpu.kernel_overhead_us"] = "10,000 empty kernels launched back to back; " + how
# The grid's products not run (over 2^41 FLOPs) take the best rate measured at no larger
# m, n and k: a product's rate grows with each of its dimensions until it reaches the peak.
table = raw["gemm_table"]
dims, rates = table["dims"], table["tflops"]
d = len(dims)
def at(i, j, l):
    return rates[(i * d + j) * d + l]
for i in range(d):
    for j in range(d):
        for l in range(d):
            if at(i, j, l) is None:
                rates[(i * d + j) * d + l] = max(at(a, b, c) for a in range(i + 1)
                                                 for b in range(j + 1) for c in range(l + 1)
                                                 if at(a, b, c) is not None)
system["gpu"]["gemm_table"] = {"dims": dims, "tflops": rates}
sources["gpu.gemm_table"] = ("bf16 cuBLAS products (f32 accumulation) over every m, n, k of dims: "
                             "the row-major C (m x n) = A (m x k) · B (k x n), TFLOP/s in the "
                             "order [m][n][k]; those over 2^41 FLOPs not run but given the best "
                             "rate at no larger m, n and k; " + how)
json.dump(system, open(out, "w"), indent=2)
print(f"calibrate: wrote {out}")
PY

# The kernel families' profiles, on models the benchmark's are not (calibration-models.sh),
# and 350M's step kernel by kernel, whose excess over its device time is the host's.
# bench/calibrate-families.sh fits the families to them where mtc is built.
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
python3 "$here/random_tokens.py" "$work/tokens" 50257 400000
export MT_CUDA_ATTENTION=${MT_CUDA_ATTENTION:-cudnn}
MT_CUDA_GRAPHS=off "$bundle/bin/mtrun" "$bundle/plans/calibrate/gpt2-350m.mtp" --backend cuda \
  --data "$work/tokens" --steps 20 --log-every 10 --lr 1e-4 >"${out%.json}.eager.log"
. "$here/calibration-models.sh"
for model in "${calibration_models[@]}"; do
  "$bundle/bin/mtrun" "$bundle/plans/calibrate/$model.mtp" --backend cuda --data "$work/tokens" \
    --steps 10 --log-every 10 --lr 1e-4 --profile >"${out%.json}.$model.profile.log"
  # The last line's tok/s: steps 11 to 20, the graphs recorded.
  "$bundle/bin/mtrun" "$bundle/plans/calibrate/$model.mtp" --backend cuda --data "$work/tokens" \
    --steps 20 --log-every 10 --lr 1e-4 >"${out%.json}.$model.step.log"
done
echo "calibrate: profiles beside $out; where mtc is built: bench/calibrate-families.sh $(basename "$out") OUT"
