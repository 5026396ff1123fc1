"""poison.py IN.safetensors OUT.safetensors TENSOR VALUE: a copy of a safetensors file with
the first element of TENSOR (F32 or F64) set to VALUE ('nan', 'inf', '-1', ...), as a
state that no training writes. Standard library only."""
import json
import struct
import sys

source, target, tensor, value = sys.argv[1:5]
data = bytearray(open(source, "rb").read())
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n])
entry = header[tensor]
begin = 8 + n + entry["data_offsets"][0]
fmt = {"F32": "<f", "F64": "<d"}[entry["dtype"]]
struct.pack_into(fmt, data, begin, float(value))
open(target, "wb").write(data)
