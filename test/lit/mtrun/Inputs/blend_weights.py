"""blend_weights.py SEQ SPLIT PART PREFIX...: each dataset's samples in part PART (0
training, 1 validation, 2 test) of Megatron's --split SPLIT ("90,10,0"), as
"COUNT PREFIX COUNT PREFIX ...", counted from the .idx alone: the part's documents cut
as Megatron's _get_split_indices cuts them, and (tokens - 1) // SEQ windows of their
tokens. Standard library only."""
import struct
import sys

seq, sizes, part = int(sys.argv[1]), [float(x) for x in sys.argv[2].split(",")], int(sys.argv[3])
words = []
for prefix in sys.argv[4:]:
    with open(prefix + ".idx", "rb") as f:
        data = f.read()
    sequences, entries = struct.unpack_from("<QQ", data, 18)
    lengths = struct.unpack_from("<%di" % sequences, data, 34)
    document = struct.unpack_from("<%dq" % entries, data, 34 + 12 * sequences)
    documents = entries - 1
    bounds = [0]
    for size in sizes:
        bounds.append(bounds[-1] + int(round(size / sum(sizes) * documents)))
    excess = bounds[-1] - documents
    bounds = [0] + [b - excess for b in bounds[1:]]
    first, end = document[bounds[part]], document[bounds[part + 1]]
    words += [str((sum(lengths[first:end]) - 1) // seq), prefix]
print(" ".join(words))
