"""big_consolidated.py OUT [ELEMENT]: an mtckpt consolidated file (what `mtckpt export`
writes and `mtckpt import` reads) of one F32 tensor of 3001 x 1000 (12 MB, several of
mtckpt's 4 MiB blocks) whose element i holds i, and one of 5; with ELEMENT, that element
of the large one is -1. Standard library only."""
import json
import struct
import sys
from array import array

out = sys.argv[1]
big = array("f", range(3001 * 1000))
if len(sys.argv) > 2:
    big[int(sys.argv[2])] = -1.0
small = array("f", [1, 2, 3, 4, 5])
header = {
    "__metadata__": {"format": "mtc-consolidated-1", "model": "big", "step": "0"},
    "big": {"dtype": "F32", "shape": [3001, 1000], "data_offsets": [0, len(big) * 4]},
    "small": {"dtype": "F32", "shape": [5], "data_offsets": [len(big) * 4, len(big) * 4 + 20]},
}
text = json.dumps(header).encode()
text += b" " * ((8 - len(text) % 8) % 8)
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + big.tobytes() + small.tobytes())
