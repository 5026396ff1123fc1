#!/usr/bin/env bash
# Training throughput under srun against mtrun -n (mpirun) on this machine, as a
# one-node Slurm cluster (test/e2e/cluster/slurm-cluster.sh): 4 ranks (tp 2, dp 2) of
# MODEL, each rank's threads as mtrun chooses them, and as they were before it chose
# (every rank an OpenMP team of all the machine's cores: OMP_NUM_THREADS=$(nproc)).
# Prints tokens/s and the ratios to mtrun -n's.
# usage: bench/srun.sh [MODEL] [STEPS]   (default gpt-mini, 20 steps; after scripts/build.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
model=${1:-gpt-mini} steps=${2:-20}
export PATH=$root/build/tools:$PATH
skip() { echo "srun benchmark: cannot run: $*" >&2; exit 1; }
source "$root/test/e2e/cluster/slurm-cluster.sh"
slurm_up "$(mktemp -d /tmp/mtc-bench-srun.XXXXXX)"

mtdata --input /usr/share/games/fortunes/fortunes --split-on % --train-tokenizer tok \
  --vocab-size 512 --output-prefix data >/dev/null
mtc compile "$root/models/$model.mlir" --tp 2 --dp 2 --micro-batch-size 4 \
  --global-batch-size 16 --seq-length 128 -o plan.mtp | sed -n 2,3p
run=(mtrun plan.mtp --backend cpu --data data --steps "$steps" --log-every "$steps")
tokens() { grep -o '[0-9]* tok/s' "$1" | tail -n 1 | cut -d' ' -f1; }
threads() { grep -o '[0-9]* threads\? per rank (.*)' "$1"; }

env -u OMP_NUM_THREADS "${run[@]}" -n 4 >mpirun.log
env -u OMP_NUM_THREADS srun -n 4 --overcommit "${run[@]}" >srun.log
OMP_NUM_THREADS=$(nproc) srun -n 4 --overcommit "${run[@]}" >srun-all-cores.log
base=$(tokens mpirun.log)
printf '%-38s %10s %8s  %s\n' launch tok/s ratio threads
for case in mpirun:"mtrun -n 4" srun:"srun -n 4" srun-all-cores:"srun -n 4, OMP_NUM_THREADS=$(nproc)"; do
  log=${case%%:*}.log
  printf '%-38s %10s %8s  %s\n' "${case#*:}" "$(tokens $log)" \
    "$(python3 -c "print(f'{$(tokens $log) / $base:.2f}')")" "$(threads $log)"
done
