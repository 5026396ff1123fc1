#!/usr/bin/env python3
"""Where PyPI's `tokenizers` is installed, encodes TEXT's documents (split on lines that
are exactly SEPARATOR, as mtdata splits them, bytes that are not UTF-8 read as Python's
"replace" reads them) with TOKENIZER.json, appends the id of EOD, and compares with the
ids mtdata wrote to PREFIX; prints whether they are the same. Elsewhere it says the
library is not installed (the tests' fixed ids, made by make.py with it, still hold).

usage: compare.py TOKENIZER.json TEXT PREFIX EOD [SEPARATOR]
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make import documents  # noqa: E402


def main():
    tokenizer_path, text, prefix, eod = sys.argv[1:5]
    separator = sys.argv[5].encode() if len(sys.argv) > 5 else None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        print("tokenizers: not installed")
        return
    tokenizer = Tokenizer.from_file(tokenizer_path)
    end = tokenizer.token_to_id(eod)
    want = [tokenizer.encode(d.decode("utf-8", errors="replace"),
                             add_special_tokens=False).ids + [end]
            for d in documents(open(text, "rb").read(), separator)]
    reader = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                          "read_megatron_index.py")
    lines = subprocess.run([sys.executable, reader, "--ids", prefix], check=True,
                           capture_output=True, text=True).stdout.splitlines()[5:]
    got = [list(map(int, line.split())) for line in lines]
    print(f"tokenizers: {'the same ids' if got == want else 'DIFFERENT ids'}")
    if got != want:
        sys.exit(1)


if __name__ == "__main__":
    main()
