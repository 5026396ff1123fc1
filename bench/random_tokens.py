#!/usr/bin/env python3
"""random_tokens.py PREFIX VOCAB TOKENS: a Megatron indexed dataset (PREFIX.bin/.idx,
MMIDIDX version 1, uint16 ids, documents of 2048 tokens) of uniformly random ids below
VOCAB. Throughput does not depend on what the tokens say. Standard library only."""
import random
import struct
import sys
from array import array

prefix, vocab, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
assert vocab <= 65535, "uint16 ids"
length = 2048
documents = (tokens + length - 1) // length
rng = random.Random(1234)
with open(prefix + ".bin", "wb") as out:
    for _ in range(documents):
        out.write(array("H", (rng.randrange(vocab) for _ in range(length))).tobytes())
with open(prefix + ".idx", "wb") as out:
    out.write(b"MMIDIDX\x00\x00")
    out.write(struct.pack("<Q", 1))
    out.write(struct.pack("<B", 8))  # uint16
    out.write(struct.pack("<Q", documents))
    out.write(struct.pack("<Q", documents + 1))
    out.write(struct.pack(f"<{documents}i", *([length] * documents)))
    out.write(struct.pack(f"<{documents}q", *(2 * length * d for d in range(documents))))
    out.write(struct.pack(f"<{documents + 1}q", *range(documents + 1)))
