#!/usr/bin/env python3
"""Context parallelism against the serial run, in fp64.

gpt-mini (learned positions, dropout in attention and in the stream) and llama-tiny
(rotary embeddings, grouped-query attention) train K steps from the same seed and data
serially and under cp 2 and 4, alone and with tensor + sequence parallelism, data
parallelism with the distributed optimizer, and a pipeline (at most 8 ranks), with
attention's keys and values all-gathered and going round a ring (p2p). In fp64
the only difference a layout may make is the order of its sums, so each must give the
serial run's losses and gradient norms, and its final weights, within 1e-12 relative.
The runner is fp64_layouts.py.
"""
import fp64_layouts

LAYOUTS = (  # (name, mtc flags, ranks)
    ("cp2", ["--cp", "2"], 2),
    ("cp4", ["--context-parallel-size", "4", "--cp-comm-type", "all-gather"], 4),
    ("cp2_tp2_sp", ["--cp", "2", "--tp", "2", "--sp"], 4),
    ("cp2_dp2_distopt", ["--cp", "2", "--dp", "2", "--distributed-optimizer"], 4),
    ("cp2_pp2", ["--cp", "2", "--pp", "2"], 4),
    ("cp2_tp2_sp_dp2", ["--cp", "2", "--tp", "2", "--sp", "--dp", "2"], 8),
    ("cp2_p2p", ["--cp", "2", "--cp-comm-type", "p2p"], 2),
    ("cp4_p2p", ["--cp", "4", "--cp-comm-type", "p2p"], 4),
    ("cp2_p2p_tp2_sp", ["--cp", "2", "--cp-comm-type", "p2p", "--tp", "2", "--sp"], 4),
    ("cp2_p2p_dp2_distopt", ["--cp", "2", "--cp-comm-type", "p2p", "--dp", "2",
                             "--distributed-optimizer"], 4),
    ("cp2_p2p_pp2", ["--cp", "2", "--cp-comm-type", "p2p", "--pp", "2"], 4),
    # Interleaved (gpt-mini's 4 layers): a stage's ring starts while its pipeline sends
    # wait for their receives.
    ("cp2_p2p_pp2_vpp2", ["--cp", "2", "--cp-comm-type", "p2p", "--pp", "2", "--vpp", "2",
                          "--schedule", "interleaved"], 4),
)
FOUR_LAYERS = {"cp2_p2p_pp2_vpp2"}


if __name__ == "__main__":
    fp64_layouts.check("context parallelism", ("gpt-mini", "llama-tiny"), LAYOUTS,
                       lambda model, layout: layout in FOUR_LAYERS and model != "gpt-mini")
