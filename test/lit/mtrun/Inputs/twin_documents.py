"""twin_documents.py PREFIX VOCAB TOKENS [COPIES]: a Megatron indexed dataset
(PREFIX.bin/.idx, uint16 ids) of COPIES (default two) identical documents of TOKENS random
ids below VOCAB (the same ids for every COPIES), so that --split 1,1,0 of two holds out a
validation split that is the training split, and one is either. Standard library only."""
import random
import struct
import sys
from array import array

prefix, vocab, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(7)
document = array("H", (rng.randrange(vocab) for _ in range(tokens)))
copies = int(sys.argv[4]) if len(sys.argv) > 4 else 2
with open(prefix + ".bin", "wb") as out:
    out.write(document.tobytes() * copies)
with open(prefix + ".idx", "wb") as out:
    out.write(b"MMIDIDX\x00\x00")
    out.write(struct.pack("<Q", 1))           # version
    out.write(struct.pack("<B", 8))           # uint16
    out.write(struct.pack("<Q", copies))      # sequences
    out.write(struct.pack("<Q", copies + 1))  # document indices
    out.write(struct.pack("<%di" % copies, *[tokens] * copies))
    out.write(struct.pack("<%dq" % copies, *[2 * tokens * i for i in range(copies)]))
    out.write(struct.pack("<%dq" % (copies + 1), *range(copies + 1)))
