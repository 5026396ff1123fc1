"""twin_documents.py PREFIX VOCAB TOKENS: a Megatron indexed dataset (PREFIX.bin/.idx,
uint16 ids) of two identical documents of TOKENS random ids below VOCAB, so that
--split 1,1,0 holds out a validation split that is the training split. Standard library
only."""
import random
import struct
import sys
from array import array

prefix, vocab, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(7)
document = array("H", (rng.randrange(vocab) for _ in range(tokens)))
with open(prefix + ".bin", "wb") as out:
    out.write(document.tobytes() * 2)
with open(prefix + ".idx", "wb") as out:
    out.write(b"MMIDIDX\x00\x00")
    out.write(struct.pack("<Q", 1))      # version
    out.write(struct.pack("<B", 8))      # uint16
    out.write(struct.pack("<Q", 2))      # sequences
    out.write(struct.pack("<Q", 3))      # document indices
    out.write(struct.pack("<2i", tokens, tokens))
    out.write(struct.pack("<2q", 0, 2 * tokens))
    out.write(struct.pack("<3q", 0, 1, 2))
