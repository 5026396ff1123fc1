#!/usr/bin/env python3
"""Qwen3's normalised query and key heads under parallel layouts against the serial run,
in fp64.

qwen3-tiny (each query and key head RMS-normalised by weights every head shares, heads of
16 in a hidden of 64, a tied output layer) trains K steps from the same seed and data
serially and under tensor parallelism with and without sequence parallelism (each rank
normalising its own groups' heads, so the norms' weight gradients are sums the group
adds), with full recomputation, with data parallelism and the distributed optimizer, a
pipeline and context parallelism: each must give the serial run's losses, gradient norms and weights within
1e-12. The runner is fp64_layouts.py.
"""
import fp64_layouts

LAYOUTS = (  # (name, mtc flags, ranks)
    ("tp2", ["--tp", "2"], 2),
    ("tp2_recompute_full", ["--tp", "2", "--recompute", "full"], 2),
    ("tp4_sp", ["--tp", "4", "--sp"], 4),
    ("tp2_sp_dp2_distopt", ["--tp", "2", "--sp", "--dp", "2", "--distributed-optimizer"], 4),
    ("pp2_tp2", ["--pp", "2", "--tp", "2"], 4),
    ("cp2_tp2_sp", ["--cp", "2", "--tp", "2", "--sp"], 4),
    ("cp2_p2p", ["--cp", "2", "--cp-comm-type", "p2p"], 2),
)

# With an epsilon of 1 the norms scale every head down: the curve must move.
UNLIKE = (("qk_norm_epsilon_1",
           lambda text: text.replace("%kn_w {heads = 8 : i64, kv_heads = 4 : i64, epsilon = 1.0e-06",
                                     "%kn_w {heads = 8 : i64, kv_heads = 4 : i64, epsilon = 1.0")),)

if __name__ == "__main__":
    fp64_layouts.check("normalised query and key heads", ("qwen3-tiny",), LAYOUTS, unlike=UNLIKE,
                       resume=("tp2",))
