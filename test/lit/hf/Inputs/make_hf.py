"""Writes a Hugging Face directory (fp32, standard library only) of random weights for a
LLaMA config.json, altered on request: make_hf.py CONFIG OUT [drop|extra|reshape NAME]."""
import json
import os
import random
import struct
import sys

with open(sys.argv[1]) as f:
    c = json.load(f)
h, f_, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
nh, ng = c["num_attention_heads"], c["num_key_value_heads"]
d = h // nh
shapes = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h], "lm_head.weight": [v, h]}
for l in range(c["num_hidden_layers"]):
    for name, shape in (("input_layernorm.weight", [h]), ("self_attn.q_proj.weight", [nh * d, h]),
                        ("self_attn.k_proj.weight", [ng * d, h]), ("self_attn.v_proj.weight", [ng * d, h]),
                        ("self_attn.o_proj.weight", [h, nh * d]), ("post_attention_layernorm.weight", [h]),
                        ("mlp.gate_proj.weight", [f_, h]), ("mlp.up_proj.weight", [f_, h]),
                        ("mlp.down_proj.weight", [h, f_])):
        shapes[f"model.layers.{l}.{name}"] = shape
if len(sys.argv) > 4:
    what, name = sys.argv[3], sys.argv[4]
    if what == "drop":
        del shapes[name]
    elif what == "extra":
        shapes[name] = [4]
    elif what == "reshape":
        shapes[name][0] -= 1
rng = random.Random(3)
header, body, offset = {}, [], 0
for name, shape in shapes.items():
    n = 1
    for s in shape:
        n *= s
    raw = struct.pack(f"<{n}f", *(rng.gauss(0, 0.1) for _ in range(n)))
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(raw)]}
    body.append(raw)
    offset += len(raw)
os.makedirs(sys.argv[2])
text = json.dumps(header).encode()
with open(os.path.join(sys.argv[2], "model.safetensors"), "wb") as out:
    out.write(len(text).to_bytes(8, "little") + text + b"".join(body))
with open(os.path.join(sys.argv[2], "config.json"), "w") as out:
    json.dump(c, out)
