#!/usr/bin/env python3
"""Sliding-window attention under parallel layouts against the serial run, in fp64.

mistral-tiny (each query sees its own position and the 5 before it, of 32), with the
attention probabilities dropped at 0.1 so that the masks are drawn for the keys each
query sees, trains K steps from the same seed and data serially and under tensor and
sequence parallelism, a pipeline, the unfused attention of selective recomputation, and
context parallelism of both forms: the keys and values all-gathered, and going round a
ring, where under cp 4 (chunks of 4) a query's window reaches into the chunk before it
and into another rank's share. Each must give the serial run's losses, gradient norms and
weights within 1e-12. The runner is fp64_layouts.py.
"""
import fp64_layouts

LAYOUTS = (  # (name, mtc flags, ranks)
    ("tp2_sp", ["--tp", "2", "--sp"], 2),
    ("pp2", ["--pp", "2"], 2),
    ("recompute_selective", ["--recompute", "selective"], 1),
    ("cp2", ["--cp", "2"], 2),
    ("cp4", ["--cp", "4"], 4),
    ("cp2_p2p", ["--cp", "2", "--cp-comm-type", "p2p"], 2),
    ("cp4_p2p", ["--cp", "4", "--cp-comm-type", "p2p"], 4),
    ("cp2_p2p_tp2_sp", ["--cp", "2", "--cp-comm-type", "p2p", "--tp", "2", "--sp"], 4),
)

# Without its window the model sees every earlier position: the curve must move.
UNLIKE = (("no_window", lambda text: text.replace(", window = 6 : i64", "")),)

if __name__ == "__main__":
    fp64_layouts.check("sliding-window attention", ("mistral-tiny",), LAYOUTS, unlike=UNLIKE,
                       resume=("cp4_p2p",), common=["--attention-dropout", "0.1"])
