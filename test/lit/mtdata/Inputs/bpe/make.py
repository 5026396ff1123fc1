#!/usr/bin/env python3
"""Makes this folder's fixtures with PyPI's `tokenizers` (run by hand; the tests only
read what it wrote): byte-level BPE tokenizers trained on ../lighthouse.txt, as GPT-2
builds its (ByteLevel with its own pattern), with add_prefix_space (RoBERTa's), as LLaMA 3
builds its (Split by LLaMA 3's pattern, then ByteLevel, ignore_merges), as Qwen2 builds
its (an NFC normalizer, then Split by Qwen2's pattern and ByteLevel) and GPT-2's with an
NFKC normalizer; hostile.txt, text that byte-level tokenizers get wrong, and normal.txt,
text that normalizers change; and for each tokenizer and each text the ids the library
gives (TOKENIZER.TEXT.ids, a line per document, each ending in the end-of-document id),
as mtdata must write them. Then the LLaMA 3 one's ranks as a
tiktoken file, llama3.tiktoken, and the ids PyPI's `tiktoken` gives (tiktoken.TEXT.ids).

usage: python3 make.py        (in this folder; needs `pip install tokenizers tiktoken`)
"""
import os

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen2's: LLaMA 3's with one digit a piece.
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")

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
    "nbsp\u00a0here\u3000ideographic\u2003em\u200bzero-width\u0085nel\u180e mongolian.\n"
    "digits 1234567890 3.14159 1,000,000 and 007.\n"
    "I'M sure you'RE right; don't, can't, it's, we'll, they'd, I've.\n"
    "mid<|endoftext|>word and <|end_of_text|>too <|begin_of_text|>\n"
    "    indented code:\n\tif x == 1:\n\t\treturn {'a': [1, 2]}\n"
).encode()


def bytes_to_unicode():
    """GPT-2's printable stand-ins for the 256 bytes, in byte order."""
    printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174]
    stand_ins, extra = [], 256
    for b in range(256):
        if b in printable:
            stand_ins.append(chr(b))
        else:
            stand_ins.append(chr(extra))
            extra += 1
    return stand_ins


# Text normalizers change: an accent composed and decomposed (and a normalized added
# token, "Cafe" and U+0301, that matches both), Hangul written as jamo, a letter with two
# marks in either order, compatibility forms (a ligature, which one tokenizer also has as an
# added token matched before normalizing, full-width letters and digits, a superscript,
# a unit, a roman numeral, a non-breaking space), and an Angstrom sign.
NORMAL = (
    "Cafe\u0301 and Caf\u00e9 are one word; so are \u1112\u1161\u11ab and \ud55c.\n"
    "q\u0307\u0323 and q\u0323\u0307; \u1e0b\u0323 and d\u0323\u0307.\n"
    "\ufb01ne \uff21\uff22\uff23\uff11\uff12\uff13 x\u00b2 5\u338f \u216b\u00a0end \u212b.\n"
).encode()


# Documents that end where a UTF-8 sequence is cut, or are one added token alone, and
# added tokens that overlap, or are matched before others as tokenizers does (those it
# matches in the text as written first, then in what is left those it normalizes).
ENDS = (b"a cut at the end \xe6\x97\n%\n<|endoftext|>\n%\nthe keeper kept <|end and <|endoftext|>"
        b" keepers\n%\n\xf0\x9f\n%\nonly<|end")


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


def train(pre, specials, ignore_merges=False, name="", normalizer=None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tokenizer = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train(["../lighthouse.txt"], trainer)
    tokenizer.save(name + ".json")
    return tokenizer


def main():
    from tokenizers import AddedToken, Regex, Tokenizer, normalizers, pre_tokenizers
    os.chdir(os.path.dirname(os.path.abspath(__file__)))
    with open("hostile.txt", "wb") as f:
        f.write(HOSTILE)
    with open("normal.txt", "wb") as f:
        f.write(NORMAL)
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
    # The LLaMA 3 tokenizer's ranks as a tiktoken file (its tokens' bytes, renumbered from
    # 0 without the two special tokens, which follow the ranks), and the ids tiktoken's
    # encode_ordinary gives with LLaMA 3's pattern.
    import base64
    import tiktoken
    byte_of = {c: b for b, c in enumerate(bytes_to_unicode())}
    vocab = made["llama3"][0].get_vocab()
    ranks = {}
    for token, _ in sorted(vocab.items(), key=lambda item: item[1]):
        if token not in ("<|begin_of_text|>", "<|end_of_text|>"):
            ranks[bytes(byte_of[c] for c in token)] = len(ranks)
    with open("llama3.tiktoken", "w") as f:
        for token, rank in ranks.items():
            f.write(f"{base64.b64encode(token).decode()} {rank}\n")
    encoding = tiktoken.Encoding("llama3-tiny", pat_str=LLAMA3, mergeable_ranks=ranks,
                                 special_tokens={"<|begin_of_text|>": len(ranks),
                                                 "<|end_of_text|>": len(ranks) + 1})
    for text, found in (("hostile", documents(HOSTILE)),
                        ("lighthouse", documents(open("../lighthouse.txt", "rb").read(), b"%"))):
        with open(f"tiktoken.{text}.ids", "w") as f:
            for document in found:
                ids = encoding.encode_ordinary(document.decode("utf-8", errors="replace"))
                f.write(" ".join(map(str, ids + [len(ranks) + 1])) + "\n")

    # Qwen2's form, with a normalized added token written decomposed; GPT-2's with NFKC (in
    # a Sequence) and the ligature U+FB01 as an added token, matched as written.
    qwen2 = train(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], name="qwen2", normalizer=normalizers.NFC())
    qwen2.add_tokens([AddedToken("Cafe\u0301", normalized=True)])
    qwen2.save("qwen2.json")
    made["qwen2"] = (qwen2, "<|endoftext|>")
    nfkc = train(pre_tokenizers.ByteLevel(add_prefix_space=False), ["<|endoftext|>"],
                 name="nfkc", normalizer=normalizers.Sequence([normalizers.NFKC()]))
    nfkc.add_tokens([AddedToken("\ufb01", normalized=False)])
    nfkc.save("nfkc.json")
    made["nfkc"] = (nfkc, "<|endoftext|>")

    # Qwen2's with its normalizer replaced: NFD, and NFKD then NFC in a Sequence (the test
    # replaces it alike in qwen2.json); the ids of normal.txt only.
    for variant, normalizer in (("nfd", normalizers.NFD()),
                                ("nfkd_nfc", normalizers.Sequence([normalizers.NFKD(),
                                                                   normalizers.NFC()]))):
        other = Tokenizer.from_file("qwen2.json")
        other.normalizer = normalizer
        end = other.token_to_id("<|endoftext|>")
        with open(f"qwen2_{variant}.normal.ids", "w") as f:
            for document in documents(NORMAL):
                ids = other.encode(document.decode("utf-8", errors="replace"),
                                   add_special_tokens=False).ids
                f.write(" ".join(map(str, ids + [end])) + "\n")

    # The GPT-2 one with added tokens that overlap ("<|end" within "<|endoftext|>"), and one
    # the text as written matches ("eper") before a normalized one ("keep") in "keeper".
    with open("ends.txt", "wb") as f:
        f.write(ENDS)
    added = Tokenizer.from_file("gpt2.json")
    added.add_special_tokens([AddedToken("<|end", normalized=False)])
    added.add_tokens([AddedToken("keep", normalized=True), AddedToken("eper", normalized=False)])
    added.save("added.json")
    made["added"] = (added, "<|endoftext|>")

    for name, (tokenizer, eod) in made.items():
        end = tokenizer.token_to_id(eod)
        for text, found in (("hostile", documents(HOSTILE)),
                            ("lighthouse", documents(open("../lighthouse.txt", "rb").read(), b"%")),
                            ("ends", documents(ENDS, b"%")),
                            ("normal", documents(NORMAL))):
            if (name == "added") != (text == "ends"):
                continue
            if text == "normal" and name not in ("qwen2", "nfkc", "gpt2"):
                continue
            with open(f"{name}.{text}.ids", "w") as f:
                for document in found:
                    decoded = document.decode("utf-8", errors="replace")
                    ids = tokenizer.encode(decoded, add_special_tokens=False).ids
                    f.write(" ".join(map(str, ids + [end])) + "\n")


if __name__ == "__main__":
    main()
