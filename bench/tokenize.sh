#!/usr/bin/env bash
# mtdata's byte-level BPE against the Python libraries it must agree with, on the CPU:
# MB of text per second, the same text and tokenizer on both sides, single-threaded and
# (the libraries' batch calls) on every core. The text: the fortunes corpus, repeated to
# MB megabytes and cut into documents on its % lines. The tokenizer: one PyPI's
# `tokenizers` trains on it (16,000 tokens, GPT-2's pre-tokenizer), and its ranks as a
# tiktoken file (LLaMA 3's pattern) for `tiktoken`; both sides' ids are compared too.
# Needs `pip install tokenizers tiktoken` (the side without them is left out).
# usage: bash bench/tokenize.sh [MB]        (default 16; after scripts/build.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mb=${1:-16}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mtdata=$here/build/tools/mtdata
[ -x "$mtdata" ] || { echo "tokenize.sh: no $mtdata: run scripts/build.sh first" >&2; exit 1; }
python3 - "$here" "$work" "$mb" "$mtdata" <<'PY'
import glob, os, subprocess, sys, time
here, work, mb, mtdata = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, os.path.join(here, "test/lit/mtdata/Inputs/bpe"))
from make import LLAMA3, bytes_to_unicode, documents  # noqa: E402

corpus = b"".join(open(f, "rb").read() for f in sorted(glob.glob("/usr/share/games/fortunes/*"))
                  if os.path.isfile(f) and not f.endswith((".dat", ".u8")))
text = corpus * max(1, -(-mb * 2**20 // len(corpus)))
path = os.path.join(work, "corpus.txt")
open(path, "wb").write(text)
docs = [d.decode("utf-8", errors="replace") for d in documents(text, b"%")]
megabytes = len(text) / 2**20
print(f"text: {megabytes:.1f} MB, {len(docs):,} documents; {os.cpu_count()} cores")
try:
    import tiktoken
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
except ImportError:
    sys.exit("tokenize.sh: needs PyPI's tokenizers and tiktoken (pip install tokenizers tiktoken)")

tokenizer = Tokenizer(models.BPE())
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.train_from_iterator(docs[:20000], trainers.BpeTrainer(
    vocab_size=16000, special_tokens=["<|endoftext|>"], show_progress=False,
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
tokenizer.save(os.path.join(work, "tokenizer.json"))
byte_of = {c: b for b, c in enumerate(bytes_to_unicode())}
ranks = {}
for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1]):
    if token != "<|endoftext|>":
        ranks[bytes(byte_of[c] for c in token)] = len(ranks)
import base64  # noqa: E402
with open(os.path.join(work, "ranks.tiktoken"), "w") as f:
    for token, rank in ranks.items():
        f.write(f"{base64.b64encode(token).decode()} {rank}\n")
encoding = tiktoken.Encoding("bench", pat_str=LLAMA3, mergeable_ranks=ranks,
                             special_tokens={"<|end_of_text|>": len(ranks) + 1})


def timed(run):
    start = time.perf_counter()
    result = run()
    return megabytes / (time.perf_counter() - start), result


def ours(name):
    prefix = os.path.join(work, "out")
    speed, _ = timed(lambda: subprocess.run(
        [mtdata, "--input", path, "--split-on", "%", "--tokenizer", os.path.join(work, name),
         "--output-prefix", prefix], check=True, stdout=subprocess.DEVNULL))
    lines = subprocess.run([sys.executable, os.path.join(here, "test/lit/mtdata/Inputs/read_megatron_index.py"),
                            "--ids", prefix], check=True, capture_output=True, text=True)
    return speed, [list(map(int, line.split()))[:-1] for line in lines.stdout.splitlines()[5:]]


end = tokenizer.token_to_id("<|endoftext|>")
rows = []
mtdata_speed, mtdata_ids = ours("tokenizer.json")
one, ids = timed(lambda: [tokenizer.encode(d, add_special_tokens=False).ids for d in docs])
batch, _ = timed(lambda: tokenizer.encode_batch(docs, add_special_tokens=False))
rows.append(("tokenizer.json", "tokenizers", mtdata_speed, one, batch, mtdata_ids == ids))
mtdata_speed, mtdata_ids = ours("ranks.tiktoken")
one, ids = timed(lambda: [encoding.encode_ordinary(d) for d in docs])
batch, _ = timed(lambda: encoding.encode_ordinary_batch(docs, num_threads=os.cpu_count()))
rows.append(("tiktoken file", "tiktoken", mtdata_speed, one, batch, mtdata_ids == ids))
print(f"{'tokenizer':15s} {'peer':11s} {'mtdata MB/s':>12s} {'peer MB/s':>10s} {'ratio':>6s} "
      f"{'peer batch MB/s':>16s} {'same ids':>9s}")
for name, peer, speed, single, many, same in rows:
    print(f"{name:15s} {peer:11s} {speed:12.2f} {single:10.2f} {speed / single:5.2f}x "
          f"{many:16.2f} {str(same):>9s}")
print("mtdata's figure is the whole tool (reading, encoding, writing the dataset), on one core;")
print("the peers' encode the documents in memory, one at a time, then batched on every core.")
PY
