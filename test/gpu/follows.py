"""Whether a run's loss curve follows a reference's: each of the first STEPS losses
(mtrun --metrics: "step N loss L ...") within TOLERANCE of the reference's, relatively.
Prints both curves side by side; exits 1 when the run leaves the reference or a file
lacks steps.
usage: python3 follows.py REFERENCE RUN STEPS TOLERANCE [NAMES]"""
import math
import sys


def losses(path, steps):
    found = {}
    for line in open(path):
        fields = line.split()
        if len(fields) >= 4 and fields[0] == "step" and fields[2] == "loss":
            found[int(fields[1])] = float(fields[3])
    missing = [s for s in range(1, steps + 1) if s not in found]
    if missing:
        sys.exit(f"follows: {path} has no loss for step {missing[0]} (of {steps})")
    return [found[s] for s in range(1, steps + 1)]


reference, run, steps, tolerance = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
names = sys.argv[5].split(",") if len(sys.argv) > 5 else ["reference", "run"]
expected, got = losses(reference, steps), losses(run, steps)
relatives = []
print(f"  step {names[0]:>12} {names[1]:>12}  relative")
for step, (e, g) in enumerate(zip(expected, got), 1):
    relatives.append(abs(g - e) / abs(e) if e != 0 else abs(g))
    print(f"  {step:4d} {e:12.5f} {g:12.5f}  {relatives[-1]:.2e}")
# NaN counts as the worst.
at = max(range(steps), key=lambda i: math.inf if math.isnan(relatives[i]) else relatives[i])
worst, at = relatives[at], at + 1
print(f"follows: loss {expected[0]:.4f} -> {expected[-1]:.4f} ({names[0]}); the largest "
      f"relative difference is {worst:.2e} at step {at}, the tolerance {tolerance:g}")
sys.exit(0 if worst <= tolerance else 1)
