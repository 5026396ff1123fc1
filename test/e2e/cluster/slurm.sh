#!/usr/bin/env bash
# mtrun under Slurm's srun, on a one-node cluster this script starts (munged, slurmctld
# and slurmd, in WORK_DIR, on free ports, with MpiDefault=pmix) and stops again:
#  - a tensor-, data- and pipeline-parallel plan trains to the same losses, bit for bit,
#    as under `mtrun -n`, each rank with its share of the node's CPUs;
#  - a rank killed mid-run ends the job within seconds, and srun names it.
# Exit 77 (reported skipped by ctest) where Slurm is not installed or cannot start.
# usage: slurm.sh BIN_DIR MODELS_DIR WORK_DIR
set -euo pipefail
bin=$(realpath "$1") models=$(realpath "$2") work=$(realpath -m "$3")
export PATH=$bin:$PATH
skip() { echo "slurm test: SKIPPED: $*"; exit 77; }
fail() { echo "slurm test: FAILED: $*" >&2; exit 1; }

for tool in munged mungekey slurmctld slurmd srun sinfo; do
  command -v $tool >/dev/null || skip "$tool is not installed (scripts/setup.sh installs Slurm)"
done
[ "$(id -u)" -eq 0 ] || skip "the daemons run as root here, and this is not root"

rm -rf "$work" && mkdir -p "$work"/{munge,state,spool}
chmod 755 "$work" && chmod 700 "$work/munge"
cd "$work"
export SLURM_CONF=$work/slurm.conf

# Whether process $1 runs (an exited one nobody reaped yet does not).
alive() { [ -r /proc/$1/stat ] && [ "$(cut -d' ' -f3 /proc/$1/stat 2>/dev/null)" != Z ]; }
# Stops the daemons this script started (their pid files) and waits until they are gone.
daemons=()
started() { for _ in $(seq 50); do [ -s "$1" ] && break; sleep 0.1; done; daemons+=("$(cat "$1")"); }
stop() {
  local pids=("${daemons[@]}") pid
  [ ${#pids[@]} -eq 0 ] && return 0
  kill "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 100); do
    for pid in "${pids[@]}"; do alive "$pid" && { sleep 0.1; continue 2; }; done
    return 0
  done
  kill -9 "${pids[@]}" 2>/dev/null || true
  echo "slurm test: a daemon ignored SIGTERM for 10 s" >&2
  return 1
}
trap 'stop || true' EXIT

mungekey -c -k munge/munge.key -f
munged -f --socket="$work/munge/sock" --key-file="$work/munge/munge.key" \
  --log-file="$work/munge/log" --pid-file="$work/munge/pid" --seed-file="$work/munge/seed" ||
  skip "munged does not start: $(tail -n 3 munge/log 2>/dev/null)"
started munge/pid

read -r ctldPort slurmdPort < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
node=$(hostname -s)
cat > slurm.conf <<CONF
ClusterName=mtc
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctldPort
SlurmdPort=$slurmdPort
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge/sock
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmix
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
slurmctld -i || skip "slurmctld does not start: $(tail -n 3 slurmctld.log 2>/dev/null)"
started slurmctld.pid
slurmd || skip "slurmd does not start: $(tail -n 3 slurmd.log 2>/dev/null)"
started slurmd.pid
for _ in $(seq 100); do
  [ "$(sinfo -h -o %t 2>/dev/null)" = idle ] && break
  sleep 0.2
done
[ "$(sinfo -h -o %t 2>/dev/null)" = idle ] ||
  skip "the node did not come up: $(sinfo -h 2>&1 | head -n 1); $(tail -n 2 slurmd.log 2>/dev/null)"
echo "slurm test: one-node cluster up ($node, $(nproc) CPUs, slurmctld port $ctldPort)"
srun -n 1 true || skip "srun cannot run a task: $(tail -n 3 slurmd.log)"

mtdata --input /usr/share/games/fortunes/fortunes --split-on % --train-tokenizer tok \
  --vocab-size 512 --output-prefix data >/dev/null
mtc compile "$models/gpt-tiny.mlir" --micro-batch-size 1 --global-batch-size 4 \
  --tp 2 --dp 2 --pp 2 -o grid.mtp >/dev/null
run=(grid.mtp --backend cpu --data data --steps 4)

# The same losses, bit for bit, as under mtrun -n (mpirun).
mtrun -n 8 "${run[@]}" --metrics mpirun.metrics >mpirun.log 2>&1 || { cat mpirun.log; fail "mtrun -n 8"; }
env -u OMP_NUM_THREADS srun -n 8 --overcommit --mpi=pmix mtrun "${run[@]}" --metrics srun.metrics \
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

# A rank killed at step 2 ends the job within seconds; srun names it.
start=$(date +%s.%N)
status=0
MT_FAULT_KILL_RANK=3 MT_FAULT_KILL_STEP=2 timeout -k 5 60 srun -n 8 --overcommit --mpi=pmix \
  mtrun grid.mtp --backend cpu --data data --steps 1000 >killed.log 2>&1 || status=$?
took=$(python3 -c "import time; print(f'{time.time() - $start:.1f}')")
[ $status -ne 0 ] || fail "srun succeeded with a killed rank"
python3 -c "import sys; sys.exit(0 if $took < 20 else 1)" ||
  { cat killed.log; fail "the job took $took s to end (exit $status)"; }
grep -q "task 3: Killed" killed.log || { cat killed.log; fail "srun does not name the killed rank"; }
echo "slurm test: rank 3 killed at step 2 ended the job in $took s (exit $status): $(grep 'task 3' killed.log)"

trap - EXIT
stop || fail "the daemons did not stop"
for pid in "${daemons[@]}"; do
  ! alive "$pid" || fail "daemon $pid still runs"
done
echo "slurm test: daemons stopped"
