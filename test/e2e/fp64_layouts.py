"""Layouts against the serial run in fp64: the runner context_parallel.py and moe.py share.

Each model trains K steps from the same seed and data serially and under each layout; in
fp64 the only difference a layout may make is the order of its sums, so each must give
the serial run's losses and gradient norms, and its final weights, within 1e-12
relative. Standard library only; the comparisons are equivalence.py's.
"""
import os
import subprocess
import sys
import time

import equivalence as eq

TOLERANCE = 1e-12


def check(what, models, layouts, skip=lambda model, layout: False, unlike=(), resume=(),
          reshard=(), common=()):
    """Trains every model of `models` under each (name, mtc flags, ranks) of `layouts`
    (but those `skip` names) and exits non-zero naming the layouts that differ; `common`
    mtc flags compile the serial run and every layout. Each (name, edit) of `unlike`
    trains the serial model as edit(its text) makes it, without `common`, which must
    differ from the serial run (or the comparisons could not see what it changes).
    Each layout named in `resume` also continues the serial run's checkpoint two more
    steps, and the serial plan its checkpoint, each of which must be the serial run's own
    two more (a checkpoint reshards, moments included). Each layout named in `reshard`
    loads the serial run's bf16 checkpoint and saves it again without a step: the same
    bits (mixed precision keeps the master weights in the distributed optimizer's shares)."""
    args, mtc, mtrun, work = eq.prepare(4)
    batch = ["--micro-batch-size", "1", "--global-batch-size", "4", "--precision", "fp64"]
    # A deadlock ends the run (the watchdog) rather than the test's time.
    train = ["--data", work("data"), "--steps", str(args.steps), "--seed", "11", "--lr", "1e-3",
             "--warmup-steps", "1", "--lr-decay-steps", str(args.steps),
             "--collective-timeout", "60"]
    failures = []

    def compile_and_train(name, model, flags, ranks):
        eq.run([mtc, "compile", model, *batch, *flags, "-o", work(name + ".mtp")])
        began = time.time()
        eq.run([*mtrun, "-n", str(ranks), work(name + ".mtp"), *train, "--save", work(name),
                "--metrics", work(name + ".txt")])
        return time.time() - began

    for model_name in models:
        model = os.path.join(args.models, model_name + ".mlir")
        serial = model_name + "_serial"
        compile_and_train(serial, model, [*common], 1)
        losses, norms = eq.losses(work(serial + ".txt")), eq.grad_norms(work(serial + ".txt"))
        weights = eq.weights(work(serial))
        for variant, edit in unlike:
            edited = work(f"{model_name}_{variant}.mlir")
            with open(model) as f, open(edited, "w") as out:
                out.write(edit(f.read()))
            compile_and_train(f"{model_name}_{variant}", edited, [], 1)
            curve = eq.curve_error(work(f"{model_name}_{variant}.txt"), losses, norms, args.steps)
            print(f"{model_name + ' ' + variant:28s} differs from the serial run by {curve:.1e}",
                  flush=True)
            if curve <= 1e-6:
                failures.append(f"{model_name} {variant} (no difference)")
        for layout, flags, ranks in layouts:
            if skip(model_name, layout):
                continue
            name = model_name + "_" + layout
            seconds = compile_and_train(name, model, [*common, *flags], ranks)
            curve = eq.curve_error(work(name + ".txt"), losses, norms, args.steps)
            error, worst = eq.weight_error(eq.weights(work(name)), weights)
            ok = curve <= TOLERANCE and error <= TOLERANCE
            print(f"{name:28s} ranks {ranks}  loss/norm rel err {curve:.1e}  weights rel err "
                  f"{error:.1e} (worst tensor {worst[1]} {worst[0]:.1e})  {seconds:.1f} s  "
                  f"{'ok' if ok else 'MISMATCH'}", flush=True)
            if not ok:
                failures.append(name)
        more = ["--steps", str(args.steps + 2), "--lr-decay-steps", str(args.steps + 2),
                "--override-opt-param-scheduler"]  # a longer schedule, knowingly
        later = lambda name, ranks, load=serial, metrics=None: eq.run(
            [*mtrun, "-n", str(ranks), work(name + ".mtp"), *train, *more, "--load", work(load),
             "--metrics", work((metrics or name) + "_more.txt")])
        for layout, flags, ranks in layouts:
            if layout not in resume or skip(model_name, layout):
                continue
            if not os.path.exists(work(serial + "_more.txt")):
                later(serial, 1)
            name = model_name + "_" + layout
            later(name, ranks)
            later(serial, 1, load=name, metrics=name + "_serially")
            for run, how in ((name, " resumed"), (name + "_serially", " saved, resumed serially")):
                curve = eq.curve_error(work(run + "_more.txt"),
                                       eq.losses(work(serial + "_more.txt")),
                                       eq.grad_norms(work(serial + "_more.txt")), 2)
                print(f"{name + how:28s} ranks {ranks}  loss/norm rel err {curve:.1e}  "
                      f"{'ok' if curve <= TOLERANCE else 'MISMATCH'}", flush=True)
                if curve > TOLERANCE:
                    failures.append(name + how)
        bf16 = lambda name, flags: eq.run([mtc, "compile", model, *batch[:-2], "--bf16", *common,
                                           *flags, "-o", work(name + "_bf16.mtp")])
        for layout, flags, ranks in layouts:
            if layout not in reshard:
                continue
            name = model_name + "_" + layout
            if not os.path.exists(work(serial + "_bf16")):
                bf16(serial, [])
                eq.run([*mtrun, work(serial + "_bf16.mtp"), *train, "--save", work(serial + "_bf16")])
            bf16(name, flags)
            eq.run([*mtrun, "-n", str(ranks), work(name + "_bf16.mtp"), *train, "--load",
                    work(serial + "_bf16"), "--save", work(name + "_bf16")])
            same = subprocess.run([eq.MTCKPT, "diff", work(serial + "_bf16"),
                                  work(name + "_bf16")], capture_output=True, text=True)
            print(f"{name + ' bf16 resharded':28s} ranks {ranks}  "
                  f"{'identical' if same.returncode == 0 else 'MISMATCH: ' + same.stdout + same.stderr}",
                  flush=True)
            if same.returncode != 0:
                failures.append(name + " bf16 resharded")
    if failures:
        sys.exit(what + " differs from the serial run: " + ", ".join(failures))
    print("every layout matches the serial run")
