#!/usr/bin/env python3
"""The runtime's floors, kept true: each folder of runtime/ includes only from itself and
the folders beneath it, so no include runs upward and none in a circle; and the runtime
never includes the compiler's folders, which it meets only at the plan schema.

  core      Status, DType, Half, Tensor, Rng, the shared math, AtomicFile, Poll
  plan      the schema's reader, the opcode table, the schedule        (core)
  data      tokenized datasets                                         (core)
  comm      communicators: local, MPI                                  (core)
  backends  CPU and CUDA kernels, NCCL beside CUDA                     (core, plan, comm)
  exec      the executor and its profile                               (... backends)
  train     optimizer, checkpoints, the training loop, and the file     (... exec, data)
            formats they read (safetensors, Hugging Face's config.json)

Prints every include that breaks the rule and exits 1, or says how many it read."""
import pathlib
import re
import sys

FLOORS = {
    "core": set(),
    "plan": {"core"},
    "data": {"core"},
    "comm": {"core"},
    "backends": {"core", "plan", "comm"},
    "exec": {"core", "plan", "comm", "backends"},
    "train": {"core", "plan", "comm", "backends", "exec", "data"},
}
COMPILER = {"compiler", "dialects", "passes", "tools"}

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else __file__).resolve()
runtime = (root if root.is_dir() else root.parent.parent) / "runtime"
include = re.compile(r'^\s*#\s*include\s+"([^"/]+)/')
broken, read = [], 0
for path in sorted(runtime.rglob("*")):
    if path.suffix not in {".h", ".cpp", ".cu", ".cuh", ".def"}:
        continue
    floor = path.relative_to(runtime).parts[0]
    if floor not in FLOORS:
        broken.append(f"{path}: runtime/{floor} is no floor of test/layering.py")
        continue
    read += 1
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = include.match(line)
        if not match:
            continue
        to = match.group(1)
        if to in COMPILER or (to in FLOORS and to != floor and to not in FLOORS[floor]):
            broken.append(f"{path}:{number}: runtime/{floor} includes {to}/")
for line in broken:
    print(line)
if broken:
    sys.exit(1)
print(f"layering: {read} files of runtime/, every include from its own floor or one beneath")
