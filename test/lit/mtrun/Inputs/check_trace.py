#!/usr/bin/env python3
"""Prints, per trace file, how many events of each name it holds and whether every
event is a complete event with a start and a non-negative duration."""
import json
import sys
from collections import Counter

for path in sys.argv[1:]:
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    well_formed = all(e["ph"] == "X" and e["ts"] >= 0 and e["dur"] >= 0 for e in events)
    ranks = sorted({e["pid"] for e in events})
    counts = ", ".join(f"{name} {n}" for name, n in sorted(Counter(e["name"] for e in events).items()))
    print(f"ranks {ranks}: {counts}; well formed: {well_formed}")
