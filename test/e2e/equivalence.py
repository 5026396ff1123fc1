#!/usr/bin/env python3
"""Parallel layouts against the serial run.

gpt-tiny (dropout on) trains K steps from the same seed and data under every layout of
tp in {1,2,4} x sp in {off,on} x dp in {1,2} x distributed optimizer in {off,on} (at most
8 ranks), llama-tiny under eight layouts with recomputation, pipelines (one interleaved),
bf16 and fp16, and gpt-mini
under pipelines (pp in {2,4}, every schedule, recomputation,
combined with tp/sp/dp up to 8 ranks); each must match its serial run: losses and gradient norms within 1e-5 relative, final weights
within 1e-4 relative (norm-wise, all weights as one vector); bf16 layouts match the serial bf16 run within 1e-2. Checkpoints saved under one layout resume under another on the
serial loss curve. Standard library only.
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import time
from array import array

LOSS_TOLERANCE = 1e-5
WEIGHT_TOLERANCE = 1e-4
# bf16 activations round at every op, so a layout's other summation order shows.
BF16_TOLERANCE = 1e-2


def run(cmd, **kw):
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if result.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{result.stdout}")
    return result.stdout


def losses(path):
    with open(path) as f:
        return [float(line.split()[3]) for line in f]


def grad_norms(path):
    """Adam is blind to a gradient's scale; the norm is not, so it catches a gradient
    counted twice or summed where it should be averaged."""
    with open(path) as f:
        return [float(line.split()[7]) for line in f]


def curve_error(path, reference_losses, reference_norms, steps):
    loss, norm = losses(path), grad_norms(path)
    assert len(reference_losses) == len(reference_norms) == steps, "a short reference run"
    if len(loss) != steps or len(norm) != steps:
        return float("inf")
    # A value that is not finite is infinitely wrong (max() would skip a NaN).
    return max(abs(a - b) / abs(b) if math.isfinite(a) and math.isfinite(b) and b else math.inf
               for a, b in zip(loss + norm, reference_losses + reference_norms))


MTCKPT = "mtckpt"


def weights(checkpoint):
    """The weight tensors (not the optimizer's moments) of a checkpoint directory, as
    `mtckpt export` consolidates them."""
    consolidated = checkpoint.rstrip("/") + ".safetensors"
    run([MTCKPT, "export", checkpoint, "-o", consolidated])
    with open(consolidated, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__" or name.startswith("optimizer."):
            continue
        begin, end = entry["data_offsets"]
        out[name] = array("f" if entry["dtype"] == "F32" else "d", body[begin:end])
    return out


def weight_error(final, reference):
    """Norm-wise relative error over all weights, as one vector; and the worst tensor's
    own relative error, for information. A tensor can be far off relative to itself
    without any layout bug: the key part of the QKV bias has an exactly zero gradient
    (softmax ignores a constant added to every key), so its updates are Adam's
    normalisation of rounding noise, which any change of summation order changes."""
    diff = norm = 0.0
    worst = (0.0, "")
    assert final.keys() == reference.keys(), \
        f"other tensors: {sorted(final.keys() ^ reference.keys())}"
    for name, b in reference.items():
        assert len(final[name]) == len(b), f"{name}: {len(final[name])} elements, not {len(b)}"
        d = sum((x - y) ** 2 for x, y in zip(final[name], b))
        n = sum(y * y for y in b)
        diff, norm = diff + d, norm + n
        worst = max(worst, ((d / n) ** 0.5 if n else d ** 0.5, name))
    return (diff / norm) ** 0.5, worst


def layouts():
    """Every layout of the matrix but the serial one, which is the reference."""
    for tp in (1, 2, 4):
        for sp in ((False, True) if tp > 1 else (False,)):
            for dp in (1, 2):
                for distributed in ((False, True) if dp > 1 else (False,)):
                    if tp * dp > 1:
                        yield tp, sp, dp, distributed


def flags(tp, sp, dp, distributed):
    f = ["--tp", str(tp), "--dp", str(dp)]
    if sp:
        f.append("--sp")
    if distributed:
        f.append("--distributed-optimizer")
    return f


def prepare(steps):
    """A suite's command line (--bin, --models, --work, --steps: `steps` unless given), an
    empty work directory and the fortunes tokenized into its "data": (the arguments, mtc,
    mtrun on the CPU backend, the path of a file of the work directory)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--steps", type=int, default=steps)
    args = parser.parse_args()
    mtc, mtrun, mtdata = (os.path.join(args.bin, t) for t in ("mtc", "mtrun", "mtdata"))
    global MTCKPT
    MTCKPT = os.path.join(args.bin, "mtckpt")
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    work = lambda *p: os.path.join(args.work, *p)
    run([mtdata, "--input", "/usr/share/games/fortunes/fortunes", "--split-on", "%",
         "--train-tokenizer", work("tok"), "--vocab-size", "512", "--output-prefix", work("data")])
    # The CPU backend on purpose: the same suite means the same on a machine with a GPU.
    return args, mtc, [mtrun, "--backend", "cpu"], work


def main():
    args, mtc, mtrun, work = prepare(6)
    model = os.path.join(args.models, "gpt-tiny.mlir")
    batch = ["--micro-batch-size", "1", "--global-batch-size", "4"]
    # The decay horizon is explicit, so runs that stop halfway keep the same schedule.
    schedule = ["--seed", "11", "--lr", "1e-3", "--warmup-steps", "1",
                "--lr-decay-steps", str(args.steps)]
    train = ["--data", work("data"), "--steps", str(args.steps), *schedule]

    def compile_and_train(name, layout, extra=()):
        run([mtc, "compile", model, *batch, *flags(*layout), "-o", work(name + ".mtp")])
        ranks = layout[0] * layout[2]
        started = time.time()
        run([*mtrun, "-n", str(ranks), work(name + ".mtp"), *train, "--save", work(name),
             "--metrics", work(name + ".txt"), *extra])
        return time.time() - started

    failures = []

    def resume(a, first, first_ranks, b, second, second_ranks, label):
        """Half the steps compiled with `first`, the rest resumed with `second`; the
        result is compared with the serial run of the current model."""
        run([mtc, "compile", model, *batch, *first, "-o", work(a + ".mtp")])
        run([mtc, "compile", model, *batch, *second, "-o", work(b + ".mtp")])
        run([*mtrun, "-n", str(first_ranks), work(a + ".mtp"), "--data", work("data"),
             "--steps", str(args.steps // 2), *schedule, "--save", work(b),
             "--metrics", work(b + ".txt")])
        run([*mtrun, "-n", str(second_ranks), work(b + ".mtp"), *train, "--load", work(b),
             "--save", work(b), "--metrics", work(b + ".txt")])
        loss_error = curve_error(work(b + ".txt"), serial_losses, serial_norms, args.steps)
        error, _ = weight_error(weights(work(b)), serial_weights)
        ok = loss_error <= LOSS_TOLERANCE and error <= WEIGHT_TOLERANCE
        print(f"resume {label}: loss/norm rel err {loss_error:.1e}  weights rel err "
              f"{error:.1e}  {'ok' if ok else 'MISMATCH'}")
        if not ok:
            failures.append(f"{a}->{b}")

    def check(name, layout, seconds, tolerances=(LOSS_TOLERANCE, WEIGHT_TOLERANCE)):
        loss_error = curve_error(work(name + ".txt"), serial_losses, serial_norms, args.steps)
        error, worst = weight_error(weights(work(name)), serial_weights)
        ok = loss_error <= tolerances[0] and error <= tolerances[1]
        print(f"{name:24s} ranks {layout[0] * layout[2]}  loss/norm rel err {loss_error:.1e}  "
              f"weights rel err {error:.1e} (worst tensor {worst[1]} {worst[0]:.1e})  "
              f"{seconds:.1f} s  {'ok' if ok else 'MISMATCH'}")
        if not ok:
            failures.append(name)

    compile_and_train("serial_tiny", (1, False, 1, False))
    serial_losses = losses(work("serial_tiny.txt"))
    serial_norms = grad_norms(work("serial_tiny.txt"))
    serial_weights = weights(work("serial_tiny"))
    started = time.time()
    for layout in layouts():
        name = "tp%d%s_dp%d%s" % (layout[0], "_sp" if layout[1] else "", layout[2],
                                  "_distopt" if layout[3] else "")
        seconds = compile_and_train(name, layout)
        check(name, layout, seconds)
    print(f"matrix: {time.time() - started:.1f} s")

    # A dropout inside a parallel region and a replicated linear outside any.
    model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "Inputs",
                         "gpt-tiny-regions.mlir")
    compile_and_train("serial", (1, False, 1, False))
    serial_losses = losses(work("serial.txt"))
    serial_norms = grad_norms(work("serial.txt"))
    serial_weights = weights(work("serial"))
    for layout in ((2, False, 1, False), (2, True, 1, False), (4, True, 2, True)):
        name = "regions_tp%d%s_dp%d" % (layout[0], "_sp" if layout[1] else "", layout[2])
        check(name, layout, compile_and_train(name, layout))

    # llama-tiny (RMSNorm, SwiGLU, rotary embeddings, grouped-query attention, untied
    # output): tensor, sequence and data parallelism with the distributed optimizer and
    # recomputation, pipelines, and bf16 and fp16 (against their serial runs); four of its layers under an interleaved
    # pipeline.
    def serial_reference(name):
        nonlocal serial_losses, serial_norms, serial_weights
        compile_and_train(name, (1, False, 1, False))
        serial_losses = losses(work(name + ".txt"))
        serial_norms = grad_norms(work(name + ".txt"))
        serial_weights = weights(work(name))

    def check_layout(prefix, layout, extra, tolerances=(LOSS_TOLERANCE, WEIGHT_TOLERANCE)):
        pp = int(extra[extra.index("--pp") + 1]) if "--pp" in extra else 1
        name = "%s_tp%d%s_dp%d%s%s" % (prefix, layout[0], "_sp" if layout[1] else "", layout[2],
                                       "_distopt" if layout[3] else "",
                                       "".join(extra).replace("--", "_"))
        run([mtc, "compile", model, *batch, *flags(*layout), *extra, "-o", work(name + ".mtp")])
        begin = time.time()
        run([*mtrun, "-n", str(layout[0] * layout[2] * pp), work(name + ".mtp"), *train,
             "--save", work(name), "--metrics", work(name + ".txt")])
        check(name, (layout[0], layout[1], layout[2] * pp, layout[3]), time.time() - begin,
              tolerances)

    model = os.path.join(args.models, "llama-tiny.mlir")
    serial_reference("serial_llama")
    for layout, extra in (((2, True, 1, False), []), ((4, True, 2, True), []),
                          ((2, False, 2, False), ["--recompute", "selective"]),
                          ((1, False, 2, True), ["--pp", "2", "--recompute", "full"]),
                          ((2, True, 1, False), ["--pp", "2", "--schedule", "gpipe",
                                                 "--recompute", "selective"])):
        check_layout("llama", layout, extra)
    # fp16 starts from a loss scale its gradients do not overflow, so that every step
    # updates the weights.
    for half, scale in (("bf16", []), ("fp16", ["--initial-loss-scale", "16384"])):
        batch.append("--" + half)
        train.extend(scale)
        serial_reference("serial_llama_" + half)
        check_layout("llama_" + half, (2, True, 2, True), [], (BF16_TOLERANCE, BF16_TOLERANCE))
        del batch[-1], train[len(train) - len(scale):]
    with open(model) as f:
        four = f.read().replace("mt.repeat 2 @block", "mt.repeat 4 @block")
    model = work("llama-tiny-4.mlir")
    with open(model, "w") as f:
        f.write(four)
    serial_reference("serial_llama4")
    check_layout("llama4", (2, False, 1, False),
                 ["--pp", "2", "--vpp", "2", "--schedule", "interleaved"])

    model = os.path.join(args.models, "gpt-tiny.mlir")
    serial_losses = losses(work("serial_tiny.txt"))
    serial_norms = grad_norms(work("serial_tiny.txt"))
    serial_weights = weights(work("serial_tiny"))

    # Mixed precision: bf16 layouts against the serial bf16 run.
    batch += ["--bf16"]
    compile_and_train("serial_bf16", (1, False, 1, False))
    serial_losses = losses(work("serial_bf16.txt"))
    serial_norms = grad_norms(work("serial_bf16.txt"))
    serial_weights = weights(work("serial_bf16"))
    for layout in ((2, True, 1, False), (2, False, 2, True)):
        name = "bf16_tp%d%s_dp%d" % (layout[0], "_sp" if layout[1] else "", layout[2])
        check(name, layout, compile_and_train(name, layout), (BF16_TOLERANCE, BF16_TOLERANCE))
    batch = batch[:-1]
    serial_losses = losses(work("serial_tiny.txt"))
    serial_norms = grad_norms(work("serial_tiny.txt"))
    serial_weights = weights(work("serial_tiny"))

    # Pipelines, on gpt-mini (4 layers): every schedule, with recomputation, combined
    # with tensor, sequence and data parallelism, up to 8 ranks.
    model = os.path.join(args.models, "gpt-mini.mlir")
    batch = ["--micro-batch-size", "1", "--global-batch-size", "8", "--seq-length", "32"]
    compile_and_train("serial_mini", (1, False, 1, False))
    serial_losses = losses(work("serial_mini.txt"))
    serial_norms = grad_norms(work("serial_mini.txt"))
    serial_weights = weights(work("serial_mini"))
    pipelines = [
        ((1, False, 1, False), ["--pp", "2", "--schedule", "gpipe"]),
        ((1, False, 1, False), ["--pp", "2", "--schedule", "1f1b", "--recompute", "selective"]),
        ((1, False, 1, False), ["--pp", "4", "--schedule", "1f1b", "--recompute", "full"]),
        ((1, False, 1, False), ["--pp", "2", "--vpp", "2", "--schedule", "interleaved"]),
        ((2, True, 1, False), ["--pp", "2", "--schedule", "1f1b", "--recompute", "full"]),
        ((2, True, 2, True), ["--pp", "2", "--vpp", "2", "--schedule", "interleaved"]),
        ((1, False, 2, False), ["--pp", "4", "--schedule", "gpipe", "--recompute", "selective"]),
        ((1, False, 1, False), ["--pp", "3", "--decoder-first-pipeline-num-layers", "2"]),
        ((2, False, 1, False), ["--pp", "2", "--schedule", "gpipe", "--recompute", "full",
                                "--recompute-method", "block"]),
    ]
    started = time.time()
    for layout, pipeline in pipelines:
        pp = int(pipeline[1])
        name = "tp%d%s_dp%d_%s" % (layout[0], "_sp" if layout[1] else "", layout[2],
                                   "_".join(pipeline).replace("--", "").replace(" ", ""))
        run([mtc, "compile", model, *batch, *flags(*layout), *pipeline, "-o", work(name + ".mtp")])
        begin = time.time()
        run([*mtrun, "-n", str(layout[0] * layout[2] * pp), work(name + ".mtp"), *train,
             "--save", work(name), "--metrics", work(name + ".txt")])
        check(name, (layout[0], layout[1], layout[2] * pp, layout[3]), time.time() - begin)
    print(f"pipelines: {time.time() - started:.1f} s")
    # A pipeline's checkpoint resumes under another pipeline, and under none.
    for first, second in ((["--pp", "2", "--vpp", "2"], ["--pp", "4"]),
                          (["--pp", "2", "--tp", "2"], [])):
        a, b = "pipe_from_" + "".join(first).replace("--", ""), "pipe_to_" + "".join(second).replace("--", "")
        ranks = lambda f: (int(f[f.index("--pp") + 1]) if "--pp" in f else 1) * \
            (int(f[f.index("--tp") + 1]) if "--tp" in f else 1)
        resume(a, first, ranks(first), b, second, ranks(second),
               f"{' '.join(first)} -> {' '.join(second) or 'serial'}")

    # Checkpoints across layouts: half the steps under one, the rest under another.
    model = os.path.join(args.models, "gpt-tiny.mlir")
    batch = ["--micro-batch-size", "1", "--global-batch-size", "4"]
    serial_losses = losses(work("serial_tiny.txt"))
    serial_norms = grad_norms(work("serial_tiny.txt"))
    serial_weights = weights(work("serial_tiny"))
    for first, second in (((2, False, 2, False), (4, False, 1, False)),
                          ((4, True, 1, False), (1, False, 1, False)),
                          ((1, False, 2, True), (2, True, 2, False))):
        a = "from_" + "_".join(map(str, first))
        b = "to_" + "_".join(map(str, second))
        resume(a, flags(*first), first[0] * first[2], b, flags(*second),
               second[0] * second[2], f"{first} -> {second}")

    # Resharding alone is exact: the serial run's checkpoint, loaded under another
    # layout and saved again without a step, holds the same bits (weights, moments,
    # training state), whoever wrote which chunk.
    for layout, ranks in ((flags(2, True, 2, True), 4), (["--pp", "2", "--dp", "2",
                           "--distributed-optimizer", "--bf16"], 4), (["--pp", "2", "--tp", "2", "--sp"], 4)):
        name = "reshard_" + "".join(layout).replace("--", "")
        run([mtc, "compile", model, *batch, *layout, "-o", work(name + ".mtp")])
        run([*mtrun, "-n", str(ranks), work(name + ".mtp"), *train, "--load", work("serial_tiny"),
             "--save", work(name)])
        same = subprocess.run([MTCKPT, "diff", work("serial_tiny"), work(name)],
                              capture_output=True, text=True)
        print(f"reshard serial -> {' '.join(layout)}: "
              f"{'identical' if same.returncode == 0 else 'MISMATCH: ' + same.stdout + same.stderr}")
        if same.returncode != 0:
            failures.append(name)
    # And from one sharded layout to another: what tp 2 x sp x dp 2 with the distributed
    # optimizer saved, loaded under pp 2 x tp 2 x sp and saved again.
    source = "reshard_" + "".join(flags(2, True, 2, True)).replace("--", "")
    run([*mtrun, "-n", "4", work("reshard_pp2tp2sp.mtp"), *train, "--load", work(source),
         "--save", work("reshard_sharded")])
    same = subprocess.run([MTCKPT, "diff", work("serial_tiny"), work("reshard_sharded")],
                          capture_output=True, text=True)
    print(f"reshard tp 2 sp dp 2 distributed -> pp 2 tp 2 sp: "
          f"{'identical' if same.returncode == 0 else 'MISMATCH: ' + same.stdout + same.stderr}")
    if same.returncode != 0:
        failures.append("reshard_sharded")
    if failures:
        sys.exit("layouts that differ from the serial run: " + ", ".join(failures))


if __name__ == "__main__":
    main()
