#!/usr/bin/env python3
"""Mixture of experts under parallel layouts against the serial run, in fp64.

mixtral-tiny (4 SwiGLU experts, top-2 routing, the load-balancing loss at 0.02) trains
K steps from the same seed and data serially and with data parallelism (with and
without the distributed optimizer, whose shares cut across the experts' parameters), a
pipeline, both, expert parallelism, tensor parallelism with and without sequence
parallelism, and context parallelism (each rank routing its share, the load-balancing
loss counting the whole sequence): the routing, dispatch, grouped GEMMs, combine and the auxiliary
loss's gradient, per micro-batch, must give the serial run's losses, gradient norms and
weights within 1e-12; and the serial run's checkpoint continues under expert
parallelism as serially (each rank reading its experts' share). The runner is
fp64_layouts.py.
"""
import fp64_layouts

LAYOUTS = (  # (name, mtc flags, ranks)
    ("dp2", ["--dp", "2"], 2),
    ("dp2_distopt", ["--dp", "2", "--distributed-optimizer"], 2),
    ("pp2", ["--pp", "2"], 2),
    ("pp2_dp2_distopt", ["--pp", "2", "--dp", "2", "--distributed-optimizer"], 4),
    # Expert parallelism: each rank holds 4/ep of the experts, tokens move by all-to-all.
    ("ep2_dp2", ["--dp", "2", "--ep", "2"], 2),
    ("ep4_dp4", ["--dp", "4", "--expert-model-parallel-size", "4"], 4),
    ("ep2_dp4", ["--dp", "4", "--ep", "2"], 4),
    ("ep2_dp2_pp2", ["--dp", "2", "--ep", "2", "--pp", "2"], 4),
    # The distributed optimizer: the rest's state in shares over the data-parallel ranks,
    # the experts' over the ranks holding the same experts.
    ("ep2_dp2_distopt", ["--dp", "2", "--ep", "2", "--distributed-optimizer"], 2),
    ("ep2_dp4_distopt", ["--dp", "4", "--ep", "2", "--distributed-optimizer"], 4),
    ("ep2_dp2_pp2_distopt", ["--dp", "2", "--ep", "2", "--pp", "2", "--distributed-optimizer"], 4),
    # Per token under tensor parallelism: with sp each rank routes its block of the
    # sequence (the loss's counts all-reduced), without it every rank routes all.
    ("tp2_sp", ["--tp", "2", "--sp"], 2),
    ("tp2", ["--tp", "2"], 2),
    ("ep2_dp2_tp2_sp", ["--dp", "2", "--ep", "2", "--tp", "2", "--sp"], 4),
    # A context-parallel share routes its tokens, its experts among the group's.
    ("cp2_ep2", ["--cp", "2", "--ep", "2"], 2),
    ("cp2_tp2_sp", ["--cp", "2", "--tp", "2", "--sp"], 4),
)

# Without the load-balancing loss the gradients differ: the plan carries its coefficient.
UNLIKE = (("without_aux_loss",
           lambda text: text.replace("aux_loss_coeff = 2.0e-02 : f64", "aux_loss_coeff = 0.0 : f64")),)

# A capacity factor of 1: each expert keeps at most ceil(32·2/4) = 16 of a micro-batch's
# 64 slots. Layouts whose dispatch sees the serial run's tokens (a micro-batch's, whole)
# drop the same slots; under sp or cp each rank's share has its own capacity, as in
# Megatron-Core, and so other drops.
CAPACITY = (
    ("dp2", ["--dp", "2"], 2),
    ("pp2", ["--pp", "2"], 2),
    ("tp2", ["--tp", "2"], 2),
    ("ep2_dp2", ["--dp", "2", "--ep", "2"], 2),
    ("ep2_dp2_pp2_distopt", ["--dp", "2", "--ep", "2", "--pp", "2", "--distributed-optimizer"], 4),
)

if __name__ == "__main__":
    fp64_layouts.check("mixture of experts", ("mixtral-tiny",), LAYOUTS, unlike=UNLIKE,
                       resume=("ep2_dp4", "ep4_dp4", "ep2_dp2_pp2", "ep2_dp4_distopt",
                               "ep2_dp2_pp2_distopt", "ep2_dp2_tp2_sp", "cp2_ep2"),
                       reshard=("ep2_dp4_distopt", "ep2_dp2_pp2_distopt"))
    # Megatron's default drop policy (the largest gates kept), then the first slots kept.
    fp64_layouts.check("mixture of experts with a capacity factor", ("mixtral-tiny",), CAPACITY,
                       unlike=(("dropless", lambda text: text),), resume=("ep2_dp2",),
                       common=["--moe-expert-capacity-factor", "1"])
    fp64_layouts.check("mixture of experts dropping by position", ("mixtral-tiny",), CAPACITY,
                       unlike=(("dropless", lambda text: text),),
                       common=["--moe-expert-capacity-factor", "1",
                               "--moe-token-drop-policy", "position"])
