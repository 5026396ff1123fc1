#!/usr/bin/env python3
"""Kills one rank at a random point of a save, again and again, and checks each time
that the last complete checkpoint still loads and that training resumed from it ends in
the same state, bit for bit, as a run never interrupted.

kill_during_save.py MTRUN PLAN DATA WORK RANKS TRIALS SEED [FLAG...]
(MTRUN: the mtrun command line, such as "mtrun --backend cpu"; FLAGs go to every run of
it, such as --async-save)."""
import os
import random
import shlex
import shutil
import subprocess
import sys

mtrun, plan, data, work, ranks, trials, seed = sys.argv[1:8]
mtrun, ranks, trials, extra = shlex.split(mtrun), int(ranks), int(trials), sys.argv[8:]
rng = random.Random(int(seed))
train = [*mtrun, "-n", str(ranks), plan, "--data", data, "--seed", "7", "--lr-decay-steps", "4",
         "--log-every", "0", *extra]


def run(args, env=None, expect_ok=True):
    result = subprocess.run(args, env={**os.environ, **(env or {})}, capture_output=True,
                            text=True)
    if expect_ok and result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {shlex.join(args)}\n{result.stdout}{result.stderr}")
    return result


def path(*parts):
    return os.path.join(work, *parts)


shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
run([*train, "--steps", "4", "--save", path("straight")])
run([*train, "--steps", "2", "--save", path("good")])
good = path("good", "iter_0000002")
points = ["before-files", "before-index", "before-rename", "before-latest", "after-latest"]
for trial in range(trials):
    rank = rng.randrange(ranks)
    file = os.path.join(good, f"rank_{rank:05d}.safetensors")
    choices = (points if rank == 0 else points[:1]) + ["bytes"] * 3
    point = rng.choice(choices)
    if point == "bytes":
        point = str(rng.randrange(1, os.path.getsize(file)))
    dir = path("trial")
    shutil.rmtree(dir, ignore_errors=True)
    shutil.copytree(path("good"), dir)
    killed = run([*train, "--steps", "4", "--load", dir, "--save", dir, "--save-every", "1"],
                 env={"MT_CHECKPOINT_FAULT": f"{rank}:{point}"}, expect_ok=False)
    if killed.returncode == 0:
        sys.exit(f"trial {trial}: rank {rank} at {point} was not killed")
    run(["mtckpt", "verify", dir])
    with open(os.path.join(dir, "latest_checkpointed_iteration.txt")) as f:
        latest = f.read().strip()
    run([*train, "--steps", "4", "--load", dir, "--save", dir])
    same = run(["mtckpt", "diff", path("straight"), dir], expect_ok=False)
    if same.returncode != 0:
        sys.exit(f"trial {trial}: rank {rank} killed at {point}: {same.stdout}{same.stderr}")
    left = [n for n in os.listdir(dir) if ".saving-" in n or ".tmp." in n]
    if left:
        sys.exit(f"trial {trial}: a finished save left {left}")
    print(f"trial {trial}: rank {rank} killed at {point}; resumed from step {latest}; "
          "the same final state")
print(f"{trials} kills, every one recovered")
