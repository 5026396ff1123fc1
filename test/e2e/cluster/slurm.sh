#!/usr/bin/env bash
# mtrun under Slurm's srun, on a one-node cluster this script starts (munged, slurmctld
# and slurmd, in WORK_DIR, on free ports, with MpiDefault=pmix) and stops again:
#  - a tensor-, data- and pipeline-parallel plan trains to the same losses, bit for bit,
#    as under `mtrun -n`, each rank with its share of the node's CPUs;
#  - a rank killed mid-run ends the job within seconds, and srun names it.
# Exit 77 (reported skipped by ctest) where Slurm is not installed or cannot start
# (MT_REQUIRE_CLUSTER_TESTS=1: a failure).
# usage: slurm.sh BIN_DIR MODELS_DIR WORK_DIR
test=slurm
source "$(dirname "$0")/common.sh"

source "$(dirname "$0")/slurm-cluster.sh"
slurm_up "$work"

mtdata --input /usr/share/games/fortunes/fortunes --split-on % --train-tokenizer tok \
  --vocab-size 512 --output-prefix data >/dev/null
mtc compile "$models/gpt-tiny.mlir" --micro-batch-size 1 --global-batch-size 4 \
  --tp 2 --dp 2 --pp 2 -o grid.mtp >/dev/null
run=(grid.mtp --backend cpu --data data --steps 4)

# The same losses, bit for bit, as under mtrun -n (mpirun).
timeout -k 5 60 mtrun -n 8 "${run[@]}" --metrics mpirun.metrics >mpirun.log 2>&1 ||
  { cat mpirun.log; fail "mtrun -n 8"; }
env -u OMP_NUM_THREADS timeout -k 5 60 srun -n 8 --overcommit --mpi=pmix mtrun "${run[@]}" --metrics srun.metrics \
  >srun.log 2>&1 || { cat srun.log; fail "srun -n 8"; }
[ -s srun.metrics ] && [ "$(wc -l <srun.metrics)" -eq 4 ] || fail "srun wrote no 4 steps of metrics"
cmp mpirun.metrics srun.metrics || fail "srun's losses differ from mtrun -n's"
echo "slurm test: srun -n 8 (tp 2, dp 2, pp 2) and mtrun -n 8 wrote the same 4 steps:"
paste -d' ' <(cut -d' ' -f1-4 srun.metrics) <(cut -d' ' -f4 mpirun.metrics) | sed 's/^/  srun|mpirun /'
# Eight unbound ranks share the node's CPUs.
share=$(($(nproc) / 8)) && [ $share -ge 1 ] || share=1
grep -q "^mtrun: gpt-tiny on cpu x 8 (tp 2, dp 2, pp 2), .*, $share threads\? per rank ($(nproc) CPUs\? shared by 8 ranks on this host)$" srun.log ||
  { head -n 1 srun.log; fail "srun's ranks do not each take their share of $(nproc) CPUs"; }
head -n 1 srun.log | sed 's/^/  /'

# A rank killed at step 2 ends the job within seconds (from the end of step 1); srun
# names it.
status=0
MT_FAULT_KILL_RANK=3 MT_FAULT_KILL_STEP=2 timeout -k 5 60 srun -n 8 --overcommit --mpi=pmix \
  mtrun grid.mtp --backend cpu --data data --steps 1000 >killed.log 2>&1 &
job=$!
until grep -q '^step 1/' killed.log || ! kill -0 $job 2>/dev/null; do sleep 0.05; done
start=$EPOCHREALTIME
wait $job || status=$?
took=$(since $start)
grep -q '^step 1/' killed.log || { cat killed.log; fail "the job ended before step 1"; }
[ $status -ne 0 ] || fail "srun succeeded with a killed rank"
below $took 20 ||
  { cat killed.log; fail "the job took $took s to end (exit $status)"; }
grep -q "task 3: Killed" killed.log || { cat killed.log; fail "srun does not name the killed rank"; }
echo "slurm test: rank 3 killed at step 2 ended the job $took s after step 1 (exit $status): $(grep 'task 3' killed.log)"

trap - EXIT INT TERM HUP
slurm_down || fail "the daemons did not stop"
for pid in "${daemons[@]}"; do
  ! alive "$pid" || fail "daemon $pid still runs"
done
echo "slurm test: daemons stopped"
