# Sourced by the srun test and benchmark. slurm_up WORK starts munged, slurmctld and
# slurmd in WORK as a one-node cluster (its own config and key, free ports,
# MpiDefault=pmix; SLURM_CONF exported), and stops them at exit (slurm_down); where it
# cannot, it calls the caller's `skip REASON`. As root.
#
# Sourced by tests, whose `skip` exits 77 (ctest: skipped): MT_REQUIRE_CLUSTER_TESTS=1
# makes it a failure instead, where Slurm and namespaces are known to work.

# Whether process $1 runs (an exited one nobody reaped yet does not).
alive() { [ -r /proc/$1/stat ] && [ "$(cut -d' ' -f3 /proc/$1/stat 2>/dev/null)" != Z ]; }
daemons=()
started() { for _ in $(seq 50); do [ -s "$1" ] && break; sleep 0.1; done; daemons+=("$(cat "$1")"); }
# Cancels what still runs (steps outlive slurmd), stops the daemons slurm_up started
# and waits until they are gone.
slurm_down() {
  local pids=("${daemons[@]}") pid
  [ ${#pids[@]} -eq 0 ] && return 0
  if [ -n "$(squeue -h -o %i 2>/dev/null)" ]; then
    scancel --full -s KILL $(squeue -h -o %i) 2>/dev/null || true
    for _ in $(seq 100); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
  fi
  kill "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 100); do
    for pid in "${pids[@]}"; do alive "$pid" && { sleep 0.1; continue 2; }; done
    return 0
  done
  kill -9 "${pids[@]}" 2>/dev/null || true
  echo "slurm: a daemon ignored SIGTERM for 10 s" >&2
  return 1
}

slurm_up() {
  local work=$1
  for tool in munged mungekey slurmctld slurmd srun sinfo; do
    command -v $tool >/dev/null || skip "$tool is not installed (scripts/setup.sh installs Slurm)"
  done
  [ "$(id -u)" -eq 0 ] || skip "the daemons run as root here, and this is not root"
  # Daemons a killed earlier run left behind in WORK.
  for file in "$work"/slurmd.pid "$work"/slurmctld.pid "$work"/munge/pid; do
    [ -s "$file" ] && kill -9 "$(cat "$file")" 2>/dev/null || true
  done
  rm -rf "$work" && mkdir -p "$work"/{munge,state,spool}
  chmod 755 "$work" && chmod 700 "$work/munge"
  cd "$work"
  # This cluster's alone: not an allocation this may itself run in.
  unset $(env | grep -o '^SLURM_[A-Z_]*' | grep -v '^SLURM_CONF$') SRUN_CPUS_PER_TASK || true
  export SLURM_CONF=$work/slurm.conf
  trap 'slurm_down || true' EXIT
  trap 'exit 1' INT TERM HUP

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
  echo "slurm: one-node cluster up ($node, $(nproc) CPUs, slurmctld port $ctldPort)"
  srun -n 1 true || skip "srun cannot run a task: $(tail -n 3 slurmd.log)"
}
