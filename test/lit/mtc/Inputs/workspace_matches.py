"""workspace_matches.py PROFILE.log ESTIMATE.json [...]: each mtrun log's measured
workspaces ("N in the backend's workspaces") against its estimate's
workspace_bytes_per_rank: the measured holds the estimated, the GEMMs' fixed 32 MiB
(CudaBackend.cu: kWorkspaceBytes) and at most 4 MiB of per-instruction scratch more."""
import json
import re
import sys

GEMMS, SCRATCH = 32 << 20, 4 << 20
pairs = sys.argv[1:]
assert pairs and len(pairs) % 2 == 0, "give each PROFILE.log with its ESTIMATE.json"
for log, estimate in zip(pairs[::2], pairs[1::2]):
    m = re.search(r"(\d+) in the backend's workspaces", open(log).read())
    assert m, f"{log}: no memory line with the backend's workspaces"
    measured = int(m.group(1))
    estimated = json.load(open(estimate))["workspace_bytes_per_rank"]
    rest = measured - GEMMS - estimated
    assert 0 <= rest <= SCRATCH, \
        f"{log}: {measured} bytes measured, {estimated} estimated + {GEMMS}: {rest} apart"
    print(f"{log}: {measured} measured, {estimated} estimated + {GEMMS} + {rest} of scratch")
