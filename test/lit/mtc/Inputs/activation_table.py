"""activation_table.py MTC MODELS_DIR: the activation bytes each layer keeps for
backward, as `mtc compile` reports them, against Korthikanti et al. (2022), table 2
(DESIGN.md's accounting table): 16-bit activations, 1-byte dropout masks, s = 2048,
b = 1, t = 8, at the paper's configurations. Exits non-zero on any difference."""
import re
import subprocess
import sys
from fractions import Fraction

mtc, models = sys.argv[1], sys.argv[2]
S, B, T = 2048, 1, 8
CONFIGS = [("gpt-22b", 64, 6144), ("gpt3-175b", 96, 12288), ("gpt-530b", 128, 20480),
           ("gpt-1t", 160, 25600)]
# (row, mtc flags, bytes per layer as a multiple of sbh)
ROWS = [
    ("no parallelism", ["--attention", "unfused"],
     lambda a, h: 34 + Fraction(5 * a * S, h)),
    ("tensor parallel", ["--tp", str(T), "--attention", "unfused"],
     lambda a, h: 10 + Fraction(24, T) + Fraction(5 * a * S, h * T)),
    ("tensor + sequence parallel", ["--tp", str(T), "--sp", "--attention", "unfused"],
     lambda a, h: Fraction(34, T) + Fraction(5 * a * S, h * T)),
    ("tensor parallel + selective", ["--tp", str(T), "--recompute", "selective"],
     lambda a, h: 10 + Fraction(24, T)),
    ("tensor + sequence + selective", ["--tp", str(T), "--sp", "--recompute", "selective"],
     lambda a, h: Fraction(34, T)),
    ("full recompute", ["--tp", str(T), "--recompute", "full"], lambda a, h: Fraction(2)),
]

failures = 0
print(f"{'model':10s} {'layout':32s} {'mtc':>16s} {'formula':>16s}")
for model, a, h in CONFIGS:
    for row, flags, formula in ROWS:
        out = subprocess.run(
            [mtc, "compile", f"{models}/{model}.mlir", "--micro-batch-size", str(B),
             "--global-batch-size", str(B), "--seq-length", str(S), "--bf16", *flags,
             "-o", "/dev/null"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        match = re.search(r"per layer\s+([0-9,]+)", out.stdout)
        if out.returncode != 0 or not match:
            print(f"{model} {row}: mtc failed\n{out.stdout}")
            failures += 1
            continue
        got = int(match.group(1).replace(",", ""))
        expected = formula(a, h) * S * B * h
        ok = expected.denominator == 1 and got == expected
        failures += not ok
        print(f"{model:10s} {row:32s} {got:16,d} {int(expected):16,d}{'' if ok else '  MISMATCH'}")
sys.exit(1 if failures else 0)
