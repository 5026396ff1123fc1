"""mtc tune against brute force: every layout in tune's search space is estimated on
its own with `mtc estimate --json` (a full lowering each), and tune's verdicts must be
the same: the same layouts fit, with the same iteration time and memory to the bit, the
same ones do not, and tune's fastest is the fastest. Standard library only."""
import itertools
import json
import subprocess
import sys

model, system, gpus, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
max_micro = int(sys.argv[5])
common = ["--system", system, "--gpus", str(gpus), "--global-batch-size", str(batch), "--bf16"]

tuned = json.loads(subprocess.run(
    ["mtc", "tune", model, *common, "--max-micro-batch-size", str(max_micro), "--top",
     "100000", "--json"], check=True, capture_output=True, text=True).stdout)
fitting = {c["layout"]: c for c in tuned["candidates"]}
rejected = {c["layout"]: c["reason"] for c in tuned["rejected"]}
assert len(fitting) == tuned["fitting"], "--top did not show every fitting layout"

layers = None
for line in open(model):
    if "mt.repeat" in line:
        layers = int(line.split("mt.repeat")[1].split()[0])
divisors = lambda n: [d for d in range(1, n + 1) if n % d == 0]
estimated = fits = 0
for tp, pp in itertools.product(divisors(gpus), divisors(gpus)):
    if tp > 8 or gpus % (tp * pp):
        continue
    dp = gpus // (tp * pp)
    micro = 1
    while micro <= max_micro:
        # Layouts that do not divide are refused by both, once for all their variants.
        base = f"--tp {tp} --pp {pp} --dp {dp} --micro-batch-size {micro} " \
            f"--global-batch-size {batch}"
        if layers % pp or batch % (micro * dp):
            refused = subprocess.run(["mtc", "estimate", model, *common, *base.split()],
                                     capture_output=True, text=True)
            assert refused.returncode != 0, f"{base}: estimate accepts it"
            if layers % pp:
                base = base.replace(f"--micro-batch-size {micro}", "--micro-batch-size 1")
            assert base in rejected, f"{base}: tune does not refuse it"
            micro *= 2
            continue
        for vpp in divisors(layers // pp):
            if vpp > 1 and pp == 1:
                continue
            for sp, recompute, distributed in itertools.product(
                    [False, True], ["none", "selective", "full"], [False, True]):
                if (sp and tp == 1) or (distributed and dp == 1):
                    continue
                flags = f"--tp {tp} --pp {pp}" + (f" --vpp {vpp}" if vpp > 1 else "") + \
                    f" --dp {dp} --micro-batch-size {micro} --global-batch-size {batch}" + \
                    (" --sp" if sp else "") + \
                    (f" --recompute {recompute}" if recompute != "none" else "") + \
                    (" --distributed-optimizer" if distributed else "")
                run = subprocess.run(["mtc", "estimate", model, *common, *flags.split(),
                                      "--json"], capture_output=True, text=True)
                estimated += 1
                if run.returncode != 0:
                    assert flags in rejected, f"{flags}: estimate refuses it " \
                        f"({run.stderr.strip()}), tune does not"
                    continue
                e = json.loads(run.stdout)
                if not e["fits"]:
                    assert flags in rejected and "per rank" in rejected[flags], \
                        f"{flags} does not fit, tune says {rejected.get(flags, 'it fits')}"
                    continue
                fits += 1
                assert flags in fitting, f"{flags} fits, tune rejected it: {rejected.get(flags)}"
                t = fitting[flags]
                for key in ("iteration_seconds", "memory_bytes_per_rank", "workspace_bytes_per_rank",
                            "mfu", "parts"):
                    assert t[key] == e[key], f"{flags}: {key} {t[key]} != {e[key]}"
        micro *= 2
assert fits == len(fitting), f"tune found {len(fitting)} fitting layouts, brute force {fits}"
best = min(fitting.values(), key=lambda c: c["iteration_seconds"])
assert tuned["candidates"][0]["layout"] == best["layout"]
print(f"{estimated} layouts estimated one by one: {fits} fit, as tune says; "
      f"its fastest is {best['layout']}")
