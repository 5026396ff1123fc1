#!/usr/bin/env python3
"""Reads PREFIX.idx and PREFIX.bin the way Megatron-LM's _IndexReader and
_MMapBinReader do (megatron/core/datasets/indexed_dataset.py), with the standard
library only, and prints what a test can check:

    dtype uint16
    sequences 14
    documents 14
    tokens 1,538
    documents ending in EOD 2: 14 of 14
    token ids below 400: all

usage: read_megatron_index.py [--ids] PREFIX [EOD [VOCABULARY_SIZE]]   (EOD defaults to 2)
--ids: then each document's token ids, a line each.
"""
import struct
import sys

# DType in indexed_dataset.py: code -> (numpy name, struct format).
DTYPES = {
    1: ("uint8", "B"),
    2: ("int8", "b"),
    3: ("int16", "h"),
    4: ("int32", "i"),
    5: ("int64", "q"),
    6: ("float64", "d"),
    7: ("float32", "f"),
    8: ("uint16", "H"),
}


def main():
    args = sys.argv[1:]
    ids = args[:1] == ["--ids"]
    args = args[ids:]
    prefix = args[0]
    eod = int(args[1]) if len(args) > 1 else 2
    vocabulary_size = int(args[2]) if len(args) > 2 else None

    # _IndexReader.__init__: the header field by field, then the three arrays.
    with open(prefix + ".idx", "rb") as stream:
        header = stream.read(9)
        assert header == b"MMIDIDX\x00\x00", f"bad header, cannot read: {prefix}.idx"
        version = struct.unpack("<Q", stream.read(8))[0]
        assert version == 1, f"bad version, cannot read: {prefix}.idx"
        code = struct.unpack("<B", stream.read(1))[0]
        sequence_count = struct.unpack("<Q", stream.read(8))[0]
        document_count = struct.unpack("<Q", stream.read(8))[0]
        offset = stream.tell()
        stream.seek(0)
        index = stream.read()
    name, item = DTYPES[code]
    item_size = struct.calcsize("<" + item)

    sequence_lengths = struct.unpack_from(f"<{sequence_count}i", index, offset)
    offset += 4 * sequence_count
    sequence_pointers = struct.unpack_from(f"<{sequence_count}q", index, offset)
    offset += 8 * sequence_count
    document_indices = struct.unpack_from(f"<{document_count}q", index, offset)
    offset += 8 * document_count
    assert offset == len(index), f"{len(index) - offset} bytes after the document indices"

    # _MMapBinReader.read(dtype, count=length, offset=pointer) for each sequence.
    with open(prefix + ".bin", "rb") as stream:
        data = stream.read()
    sequences = [
        struct.unpack_from(f"<{length}{item}", data, pointer)
        for length, pointer in zip(sequence_lengths, sequence_pointers)
    ]
    tokens = sum(sequence_lengths)
    assert tokens * item_size == len(data), "the .bin holds more than the index describes"

    # A document spans sequences document_indices[d] up to document_indices[d + 1].
    documents = document_count - 1
    ending_in_eod = sum(
        1
        for d in range(documents)
        if document_indices[d + 1] > document_indices[d]
        and sequences[document_indices[d + 1] - 1][-1:] == (eod,)
    )
    print(f"dtype {name}")
    print(f"sequences {sequence_count:,}")
    print(f"documents {documents:,}")
    print(f"tokens {tokens:,}")
    print(f"documents ending in EOD {eod}: {ending_in_eod:,} of {documents:,}")
    if vocabulary_size is not None:
        outside = sum(1 for s in sequences for t in s if not 0 <= t < vocabulary_size)
        verdict = "all" if outside == 0 else f"{outside:,} are not"
        print(f"token ids below {vocabulary_size}: {verdict}")
    if ids:
        for d in range(documents):
            document = [t for s in sequences[document_indices[d]:document_indices[d + 1]] for t in s]
            print(" ".join(map(str, document)))


if __name__ == "__main__":
    main()
