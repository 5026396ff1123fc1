#!/usr/bin/env python3
"""save_memory.py LOG STAGING_MIB SLACK_MIB: from mtrun's "saved step" line, checks that
rank 0's resident memory grew during the save by at most its staging buffer plus slack,
and says by how much, beside the whole state's bytes."""
import re
import sys

log, staging, slack = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
text = open(log).read()
match = re.search(r"saved step \d+: (\d+) bytes from .*rank 0's resident memory (\d+) bytes, "
                  r"at most (\d+) during the save", text)
if not match:
    sys.exit(f"no 'saved step' line with memory figures in {log}:\n{text}")
state, before, peak = map(int, match.groups())
growth = peak - before
if growth > (staging + slack) << 20:
    sys.exit(f"rank 0 grew by {growth} bytes during the save, more than {staging} MiB of staging "
             f"and {slack} MiB of slack (the state is {state} bytes)")
print(f"state {state} bytes; rank 0 grew by {growth} bytes during the save, within {staging} MiB "
      f"of staging and {slack} MiB of slack")
