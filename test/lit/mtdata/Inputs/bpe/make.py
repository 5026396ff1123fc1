#!/usr/bin/env python3
"""Makes this folder's fixtures with PyPI's `tokenizers` (run by hand; the tests only
read what it wrote): three byte-level BPE tokenizers trained on ../lighthouse.txt, as
GPT-2 builds its (ByteLevel with its own pattern), with add_prefix_space (RoBERTa's),
and as LLaMA 3 builds its (Split by LLaMA 3's pattern, then ByteLevel, ignore_merges);
hostile.txt, text that byte-level tokenizers get wrong; and for each tokenizer and each
text the ids the library gives (TOKENIZER.TEXT.ids, a line per document, each ending in
the end-of-document id), as mtdata must write them.

usage: python3 make.py        (in this folder; needs `pip install tokenizers`)
"""
import os

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Text byte-level tokenizers get wrong: emoji with modifiers and joiners, CJK, combining
# marks, right-to-left script, bytes that are not UTF-8 (a stray continuation, a cut
# sequence, an overlong form, a surrogate, a code point past U+10FFFF), long runs of
# spaces, tabs and line ends, Unicode spaces, digits, contractions in both cases, and the
# added tokens inside words.
HOSTILE = (
    "Hello 👋🏽 world! 👨‍👩‍👧 family; flags 🇯🇵🇫🇷.\n"
    "日本語の文章です。中文也可以：你好，世界！한국어 텍스트.\n"
    "Cafe\u0301 vs Café; Z\u0351\u0364\u036b\u0300a\u0337\u0316l\u0336g\u0358o\u0489.\n"
    "مرحبا بالعالم — עברית.\n"
).encode() + b"bad \xff byte, cut \xc3, overlong \xc0\xaf, surrogate \xed\xa0\x80, big \xf4\x90\x80\x80, end \xf0\x9f\x98\n" + (
    "spaces:" + " " * 1000 + "end\ttabs\t\t\t\there\r\n\r\n\n\n"
    "nbsp\u00a0here\u3000ideographic\u2003em\u200bzero-width\u0085nel.\n"
    "digits 1234567890 3.14159 1,000,000 and 007.\n"
    "I'M sure you'RE right; don't, can't, it's, we'll, they'd, I've.\n"
    "mid<|endoftext|>word and <|end_of_text|>too <|begin_of_text|>\n"
    "    indented code:\n\tif x == 1:\n\t\treturn {'a': [1, 2]}\n"
).encode()


def documents(data, separator=None):
    """The documents mtdata reads from a file's bytes: its lines (getline's), joined by
    newlines up to a line that is exactly `separator` (a carriage return before the
    newline aside); blank ones skipped."""
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    found, current = [], []
    for line in lines:
        if separator is not None and line.rstrip(b"\r") == separator:
            found.append(b"\n".join(current))
            current = []
        else:
            current.append(line)
    found.append(b"\n".join(current))
    return [d for d in found if d.strip(b" \t\r\n\f\v")]


def train(pre, specials, ignore_merges=False, name=""):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tokenizer = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tokenizer.pre_tokenizer = pre
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train(["../lighthouse.txt"], trainer)
    tokenizer.save(name + ".json")
    return tokenizer


def main():
    from tokenizers import Regex, pre_tokenizers
    os.chdir(os.path.dirname(os.path.abspath(__file__)))
    with open("hostile.txt", "wb") as f:
        f.write(HOSTILE)
    made = {
        "gpt2": (train(pre_tokenizers.ByteLevel(add_prefix_space=False), ["<|endoftext|>"],
                       name="gpt2"), "<|endoftext|>"),
        "prefix": (train(pre_tokenizers.ByteLevel(add_prefix_space=True), ["<|endoftext|>"],
                         name="prefix"), "<|endoftext|>"),
        "llama3": (train(pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
            ["<|begin_of_text|>", "<|end_of_text|>"], ignore_merges=True, name="llama3"),
            "<|end_of_text|>"),
    }
    for name, (tokenizer, eod) in made.items():
        end = tokenizer.token_to_id(eod)
        for text, found in (("hostile", documents(HOSTILE)),
                            ("lighthouse", documents(open("../lighthouse.txt", "rb").read(), b"%"))):
            with open(f"{name}.{text}.ids", "w") as f:
                for document in found:
                    decoded = document.decode("utf-8", errors="replace")
                    ids = tokenizer.encode(decoded, add_special_tokens=False).ids
                    f.write(" ".join(map(str, ids + [end])) + "\n")


if __name__ == "__main__":
    main()
