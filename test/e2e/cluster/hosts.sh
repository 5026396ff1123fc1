#!/usr/bin/env bash
# mtrun across two hosts: two network namespaces on this machine joined by a veth pair,
# each with its own address, where ranks on different hosts reach each other only
# through TCP. mpirun starts in one and launches its daemon in the other through an
# rsh agent (as it would through ssh):
#  - a 4-rank plan (tp 2 x pp 2) with two ranks per host trains to the same losses, bit
#    for bit, as on one host;
#  - cutting the link mid-run (ip link set ... down) ends the job within seconds with a
#    message naming the lost host, not a hang: Open MPI's TCP keepalive
#    (oob_tcp_keepalive_*, as a multi-host launch should set it) notices the silent peer.
# Exit 77 (reported skipped by ctest) where network namespaces cannot be made
# (MT_REQUIRE_CLUSTER_TESTS=1: a failure).
# usage: hosts.sh BIN_DIR MODELS_DIR WORK_DIR
test=hosts
source "$(dirname "$0")/common.sh"

[ "$(id -u)" -eq 0 ] || skip "making network namespaces needs root"
command -v ip >/dev/null || skip "iproute2's ip is not installed"
rm -rf "$work" && mkdir -p "$work"
cd "$work"

# Names of this run's own, so that two runs never meet (the addresses live inside the
# namespaces, so they may repeat).
hostA=mtc$$-a hostB=mtc$$-b linkA=mtc$$.a linkB=mtc$$.b
subnet=10.99.0 addrA=10.99.0.1 addrB=10.99.0.2
cleanup() {
  for ns in $hostA $hostB; do
    ip netns pids $ns 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del $ns 2>/dev/null || true
  done
  ip link del $linkA 2>/dev/null || true
}
# Namespaces an earlier run left behind when it was killed (its shell is gone).
for ns in $(ip netns list 2>/dev/null | grep -o '^mtc[0-9]*-[ab]'); do
  pid=${ns#mtc} && pid=${pid%-*}
  [ -d /proc/$pid ] || { ip netns pids $ns | xargs -r kill -9; ip netns del $ns; } 2>/dev/null || true
done
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
ip netns add $hostA 2>netns.err || skip "ip netns add fails: $(cat netns.err)"
ip netns add $hostB
ip link add $linkA type veth peer name $linkB 2>veth.err || skip "no veth pair: $(cat veth.err)"
ip link set $linkA netns $hostA
ip link set $linkB netns $hostB
ip -n $hostA addr add $addrA/24 dev $linkA
ip -n $hostB addr add $addrB/24 dev $linkB
for ns in $hostA $hostB; do ip -n $ns link set lo up; done
ip -n $hostA link set $linkA up
ip -n $hostB link set $linkB up
echo "hosts test: host A $addrA (namespace $hostA), host B $addrB (namespace $hostB)"

# The rsh agent mpirun starts its daemon with: "HOST COMMAND..." runs COMMAND on HOST.
cat >rsh <<AGENT
#!/bin/sh
host=\$1; shift
case \$host in
  $addrA) exec ip netns exec $hostA sh -c "\$*" ;;
  $addrB) exec ip netns exec $hostB sh -c "\$*" ;;
esac
echo "rsh: no host \$host" >&2; exit 1
AGENT
chmod +x rsh
printf '%s slots=2\n%s slots=2\n' $addrA $addrB >hostfile
mpirun=(ip netns exec $hostA mpirun --allow-run-as-root -n 4 --hostfile hostfile
  --mca plm_rsh_agent "$work/rsh"
  --mca btl self,tcp --mca btl_tcp_if_include $subnet.0/24 --mca oob_tcp_if_include $subnet.0/24
  --mca oob_tcp_keepalive_time 1 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3)

mtdata --input /usr/share/games/fortunes/fortunes --split-on % --train-tokenizer tok \
  --vocab-size 512 --output-prefix data >/dev/null
mtc compile "$models/gpt-tiny.mlir" --micro-batch-size 1 --global-batch-size 4 \
  --tp 2 --pp 2 -o grid.mtp >/dev/null
run=(mtrun grid.mtp --backend cpu --data data)

# Same losses as on one host; each rank reports where it ran.
timeout -k 5 60 "${run[@]}" -n 4 --steps 4 --metrics one.metrics >one.log 2>&1 ||
  { cat one.log; fail "mtrun -n 4"; }
timeout -k 5 60 "${mpirun[@]}" sh -c 'echo "rank $OMPI_COMM_WORLD_RANK on $(ip -br -4 addr | grep -o "[0-9.]*/24")"; exec "$@"' \
  sh "${run[@]}" --steps 4 --metrics two.metrics >two.log 2>&1 || { cat two.log; fail "the two-host run"; }
for rank in 0 1; do grep -q "rank $rank on $addrA/24" two.log || { cat two.log; fail "rank $rank is not on host A"; }; done
for rank in 2 3; do grep -q "rank $rank on $addrB/24" two.log || { cat two.log; fail "rank $rank is not on host B"; }; done
[ "$(wc -l <two.metrics)" -eq 4 ] || fail "the two-host run wrote no 4 steps of metrics"
cmp one.metrics two.metrics || fail "the two-host run's losses differ from one host's"
# The hosts share this machine's CPUs: their ranks count as one host's for threads.
grep -q 'per rank (.* shared by 4 ranks on this host)$' two.log ||
  { grep '^mtrun:' two.log; fail "the ranks of both hosts do not share this machine's CPUs"; }
echo "hosts test: ranks 0-1 on host A, 2-3 on host B, over TCP; the same 4 steps as on one host:"
grep -m1 '^mtrun:' two.log | sed 's/^/  /'
paste -d' ' <(cut -d' ' -f1-4 two.metrics) <(cut -d' ' -f4 one.metrics) | sed 's/^/  two hosts|one host /'

# The link cut at step 3: the job ends with a message naming host B, within seconds.
status=0
timeout -k 5 60 "${mpirun[@]}" "${run[@]}" --steps 100000 --log-every 1 >cut.log 2>&1 &
job=$!
for _ in $(seq 600); do grep -q '^step 3/' cut.log && break; sleep 0.1; done
grep -q '^step 3/' cut.log || { kill $job; cat cut.log; fail "the run to cut did not reach step 3"; }
ip -n $hostB link set $linkB down
start=$EPOCHREALTIME
wait $job || status=$?
took=$(since $start)
[ $status -ne 0 ] || fail "the job succeeded with its link cut"
below $took 30 ||
  { grep -v '^step' cut.log; fail "the job took $took s to end (exit $status)"; }
grep -q "lost communication with a remote daemon" cut.log && grep -q "on node $addrB" cut.log ||
  { grep -v '^step' cut.log; fail "no message names the lost host"; }
echo "hosts test: link to host B cut after step 3: the job ended in $took s (exit $status): $(grep -m1 'Remote daemon' cut.log | tr -s ' ')"
