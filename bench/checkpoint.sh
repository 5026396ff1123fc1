#!/usr/bin/env bash
# Checkpoint throughput on this machine: a sharded save and a load of the biggest model
# it holds, beside the disk's own sequential write and read bandwidth measured in the
# same run (dd, fsync'd, and the page cache dropped where we may) as the peer.
#
#   bench/checkpoint.sh [MODEL] [RANKS] [LAYOUT FLAGS...]
#   default: gpt2-350m on 8 ranks, tp 2, pp 2, dp 2, distributed optimizer (4.3 GB of
#   state: weights and Adam's moments in fp32)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${MTC_BUILD_DIR:-build}
model=${1:-gpt2-350m}
ranks=${2:-8}
shift $(($# > 2 ? 2 : $#))
layout=("$@")
[ ${#layout[@]} -gt 0 ] || layout=(--tp 2 --pp 2 --dp 2 --distributed-optimizer)
work=${WORK:-$(mktemp -d /tmp/mtc-bench-checkpoint.XXXXXX)}
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
PATH=$PWD/$build/tools:$PATH

python3 bench/random_tokens.py "$work/tokens" 50257 100000
mtc compile "models/$model.mlir" --micro-batch-size 1 --global-batch-size 2 --seq-length 32 \
  --make-vocab-size-divisible-by 128 "${layout[@]}" -o "$work/plan.mtp" >/dev/null
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; }

echo "== $model on $ranks ranks (${layout[*]})"
mtrun --backend cpu -n "$ranks" "$work/plan.mtp" --data "$work/tokens" --steps 1 \
  --save "$work/ckpt" --log-every 0 | grep '^saved' | tee "$work/save.log"
drop_caches
mtrun --backend cpu -n "$ranks" "$work/plan.mtp" --data "$work/tokens" --steps 1 \
  --load "$work/ckpt" --save "$work/resaved" --log-every 0 | grep '^resumed' | tee "$work/load.log"
bytes=$(du -sb "$work/ckpt" | cut -f1)
rm -rf "$work/resaved"
# Asynchronous: how long training waits (each rank copies its chunks to host memory).
mtrun --backend cpu -n "$ranks" "$work/plan.mtp" --data "$work/tokens" --steps 1 \
  --save "$work/async" --async-save --log-every 0 | grep '^saved' | tee "$work/async.log"
rm -rf "$work/async"

echo "== the disk alone, $bytes bytes (dd, one writer, fsync'd; then read back)"
drop_caches
dd if=/dev/zero of="$work/dd" bs=16M count=$((bytes / (16 << 20) + 1)) conv=fsync 2>&1 |
  tail -1 | tee "$work/dd-write.log"
drop_caches
dd if="$work/dd" of=/dev/null bs=16M 2>&1 | tail -1 | tee "$work/dd-read.log"

python3 - "$work" <<'PY'
import re, sys
work = sys.argv[1]
def ours(name):
    return float(re.search(r"\(([0-9.]+) GB/s in all", open(f"{work}/{name}.log").read()).group(1))
def dd(name):
    value, unit = re.search(r", ([0-9.]+) ([kMG]B)/s", open(f"{work}/{name}.log").read()).groups()
    return float(value) * {"kB": 1e-6, "MB": 1e-3, "GB": 1.0}[unit]
def blocked(name):
    return float(re.search(r"training blocked ([0-9.]+) s", open(f"{work}/{name}.log").read()).group(1))
print(f"== ratios: save {ours('save'):.3f} GB/s = {ours('save') / dd('dd-write'):.2f} x dd's write; "
      f"load {ours('load'):.3f} GB/s = {ours('load') / dd('dd-read'):.2f} x dd's read; "
      f"training blocked {blocked('async'):.3f} s by an asynchronous save, "
      f"{blocked('async') / blocked('save'):.3f} x the synchronous one")
PY
