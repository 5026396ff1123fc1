#!/usr/bin/env python3
"""Fails unless the planned activation peaks that mtc printed in the given files
strictly increase, in argument order."""
import re
import sys

peaks = []
for path in sys.argv[1:]:
    with open(path) as f:
        peaks.append(int(re.search(r"activations\s+([0-9,]+)", f.read()).group(1).replace(",", "")))
print(" < ".join(f"{p:,}" for p in peaks))
sys.exit(0 if all(a < b for a, b in zip(peaks, peaks[1:])) else 1)
