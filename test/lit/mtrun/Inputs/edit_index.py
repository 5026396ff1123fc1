#!/usr/bin/env python3
"""Copies one checkpoint (an iter_N directory) with one field of its index.json
replaced: edit_index.py IN_DIR OUT_DIR PATH JSON_VALUE, PATH's keys separated by '/'
(tensor names hold dots), e.g. tensors/wte/shape or state/step; a JSON_VALUE of '-'
removes the field. The files are copied unchanged."""
import json
import os
import shutil
import sys

source, out_dir, path, value = sys.argv[1:5]
shutil.rmtree(out_dir, ignore_errors=True)
shutil.copytree(source, out_dir)
with open(os.path.join(source, "index.json")) as f:
    index = json.load(f)
keys = path.split("/")
node = index
for key in keys[:-1]:
    node = node[int(key)] if isinstance(node, list) else node[key]
last = int(keys[-1]) if isinstance(node, list) else keys[-1]
if value == "-":
    del node[last]
else:
    node[last] = json.loads(value)
with open(os.path.join(out_dir, "index.json"), "w") as f:
    json.dump(index, f)
