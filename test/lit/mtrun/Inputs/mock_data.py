"""mock_data.py PREFIX VOCAB: the documents mtrun --mock-data trains on, written as a
Megatron indexed dataset (PREFIX.bin/.idx, uint16 ids), from their definition alone:
lengths uniform in [1, 4096) from SplitMix64 at state 0 (below(4095) + 1, with
rejection), each document 1, 2, ..., n - 1 (mod VOCAB) then VOCAB - 1, until 2^24
tokens. Standard library only."""
import struct
import sys
from array import array

prefix, vocab = sys.argv[1], int(sys.argv[2])
MASK = (1 << 64) - 1
state = 0


def next_value():
    global state
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def below(n):
    threshold = (1 << 64) % n
    r = next_value()
    while r < threshold:
        r = next_value()
    return r % n


lengths, tokens = [], array("H")
while len(tokens) < 1 << 24:
    n = below(4095) + 1
    tokens.extend([(i + 1) % vocab for i in range(n - 1)] + [vocab - 1])
    lengths.append(n)
with open(prefix + ".bin", "wb") as out:
    out.write(tokens.tobytes())
with open(prefix + ".idx", "wb") as out:
    out.write(b"MMIDIDX\x00\x00")
    out.write(struct.pack("<QBQQ", 1, 8, len(lengths), len(lengths) + 1))
    out.write(struct.pack("<%di" % len(lengths), *lengths))
    pointers, at = [], 0
    for n in lengths:
        pointers.append(at)
        at += 2 * n
    out.write(struct.pack("<%dq" % len(lengths), *pointers))
    out.write(struct.pack("<%dq" % (len(lengths) + 1), *range(len(lengths) + 1)))
