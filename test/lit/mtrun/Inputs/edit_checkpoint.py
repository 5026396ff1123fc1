#!/usr/bin/env python3
"""Writes a copy of a safetensors checkpoint with one header field replaced:
edit_checkpoint.py IN.safetensors OUT_DIR TENSOR FIELD JSON_VALUE
(TENSOR may be __metadata__). The tensor data is copied unchanged."""
import json
import os
import struct
import sys

source, out_dir, tensor, field, value = sys.argv[1:6]
with open(source, "rb") as f:
    data = f.read()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n])
if field == "-":
    header[tensor] = json.loads(value)
else:
    header[tensor][field] = json.loads(value)
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
os.makedirs(out_dir, exist_ok=True)
with open(os.path.join(out_dir, "checkpoint.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + data[8 + n:])
