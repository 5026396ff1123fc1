#!/usr/bin/env python3
"""mtrun against an independent implementation of the same training step.

Every other numeric test compares mtc with itself (backward with forward, parallel with
serial, resume with a straight run), so a mistake made everywhere at once passes them
all. This one is written from the equations, in NumPy, sharing no code with mtc:
GPT-2's forward and backward (pre-LayerNorm blocks, learned positions, causal
attention with fused QKV laid out [heads, 3, head_dim], tanh GELU, dropout on the
embeddings, the attention probabilities and both residual branches, the output layer
tied to the token embedding, cross-entropy over the real classes of a padded
vocabulary), and one AdamW step (linear warm-up, cosine decay to a minimum,
global-norm clipping, no weight decay on vectors) from its closed form. Dropout masks
are regenerated from the documented counters (Philox4x32-10 of (seed, step,
micro-batch, stream, element index), README and runtime/core/Rng.h), and samples are
read in the documented order (runtime/data/TokenStream.h).

From one checkpoint and one dataset, mtrun's next step — loss, gradient norm, updated
weights and both Adam moments — must equal the reference's: 1e-10 relative in f64,
1e-5 in fp32; serially, under tensor + sequence parallelism and under a pipeline.

usage: reference.py --bin BUILD/tools --models MODELS --work DIR
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

# --------------------------------------------------------------------------------------
# Counter-based randomness: Philox4x32-10 (Salmon et al., SC 2011), as Random123 has it.
# --------------------------------------------------------------------------------------
MASK32 = np.uint64(0xFFFFFFFF)
PHILOX_M = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
PHILOX_W = (0x9E3779B9, 0xBB67AE85)


def philox(counter, key):
    """Ten rounds over four arrays of 32-bit counter words (held in uint64)."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for round_ in range(10):
        if round_:
            k0, k1 = (k0 + PHILOX_W[0]) & 0xFFFFFFFF, (k1 + PHILOX_W[1]) & 0xFFFFFFFF
        p0, p1 = c0 * PHILOX_M[0], c2 * PHILOX_M[1]  # exact: 32 x 32 bits < 2^64
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & MASK32,
                          (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), p0 & MASK32)
    return c0, c1, c2, c3


def keep_mask(seed, step, micro_batch, stream, shape, rate):
    """Whether dropout keeps each element of a tensor of `shape`: element i uses word
    i mod 4 of the Philox block of counter (i / 4, stream, micro-batch, step) under key
    `seed`, as a 24-bit uniform u; it is kept when u >= rate."""
    index = np.arange(math.prod(shape), dtype=np.uint64)
    counter = ((index >> np.uint64(2)) & MASK32,
               (np.uint64(stream) + ((index >> np.uint64(34)) << np.uint64(24))) & MASK32,
               np.full_like(index, micro_batch), np.full_like(index, step))
    words = np.stack(philox(counter, (seed & 0xFFFFFFFF, seed >> 32)))
    word = words[(index & np.uint64(3)).astype(np.int64), np.arange(index.size)]
    return ((word >> np.uint64(8)).astype(np.float64) / 2.0 ** 24 >= rate).reshape(shape)


# --------------------------------------------------------------------------------------
# Data: Megatron's indexed dataset, and the documented order of samples.
# --------------------------------------------------------------------------------------
M64 = (1 << 64) - 1


def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def epoch_order(samples, seed, epoch):
    """SplitMix64 from mix(mix(seed) ^ epoch), Fisher-Yates with rejection sampling."""
    state = mix(mix(seed) ^ epoch)
    order = list(range(samples))
    for i in range(samples - 1, 0, -1):
        n = i + 1
        while True:
            state = (state + 0x9E3779B97F4A7C15) & M64
            r = mix(state)
            if r >= (2 ** 64 - n) % n:
                break
        j = r % n
        order[i], order[j] = order[j], order[i]
    return order


def write_dataset(prefix, tokens, document_length):
    """MMIDIDX version 1, uint16 ids, documents of `document_length` tokens."""
    documents = len(tokens) // document_length
    with open(prefix + ".bin", "wb") as f:
        f.write(np.asarray(tokens, dtype="<u2").tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8))
        f.write(struct.pack("<Q", documents) + struct.pack("<Q", documents + 1))
        f.write(struct.pack(f"<{documents}i", *([document_length] * documents)))
        f.write(struct.pack(f"<{documents}q", *(2 * document_length * d for d in range(documents))))
        f.write(struct.pack(f"<{documents + 1}q", *range(documents + 1)))


def batch_at(tokens, seq, seed, position, count):
    """Inputs and targets of the `count` samples from `position` on: sample i is the
    window of seq + 1 tokens from token i·seq."""
    samples = (len(tokens) - 1) // seq
    rows = []
    for p in range(position, position + count):
        i = epoch_order(samples, seed, p // samples)[p % samples]
        rows.append(tokens[i * seq:i * seq + seq + 1])
    rows = np.asarray(rows, dtype=np.int64)
    return rows[:, :-1], rows[:, 1:]


# --------------------------------------------------------------------------------------
# The model: GPT-2, forward and backward, in float64.
# --------------------------------------------------------------------------------------
GELU_C = math.sqrt(2.0 / math.pi)


def layer_norm(x, g, b, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    return xhat * g + b, (xhat, rstd)


def layer_norm_backward(dy, g, cache):
    xhat, rstd = cache
    dxhat = dy * g
    dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    return dx, (dy * xhat).sum((0, 1)), dy.sum((0, 1))


erf = np.vectorize(math.erf)


def gelu(x, exact=False):
    if exact:  # x·Φ(x)
        return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + 0.044715 * x ** 3)))


def gelu_backward(dy, x, exact=False):
    if exact:  # Φ(x) + x·φ(x)
        return dy * (0.5 * (1.0 + erf(x / math.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))
    t = np.tanh(GELU_C * (x + 0.044715 * x ** 3))
    return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_C * (1.0 + 3 * 0.044715 * x * x))


class Model:
    """gpt-tiny's shape: `layers` blocks of hidden `h` with `heads` heads; dropout `rate`
    everywhere (0: off); streams number the dropouts in program order (mt-expand): the
    embeddings' 0, then per layer the attention probabilities', the attention output's
    and the MLP output's."""

    def __init__(self, layers, h, heads, vocab, rate, exact_gelu=False):
        self.layers, self.h, self.heads, self.vocab, self.rate = layers, h, heads, vocab, rate
        self.exact_gelu = exact_gelu  # x·Φ(x), not the tanh approximation

    def dropout_mask(self, ctx, stream, shape):
        if self.rate == 0:
            return np.ones(shape)
        seed, step, micro_batch = ctx
        return keep_mask(seed, step, micro_batch, stream, shape, self.rate) / (1.0 - self.rate)

    def loss_and_gradients(self, w, tokens, targets, ctx):
        """Mean cross-entropy of one micro-batch, and its gradient for every weight."""
        b, s = tokens.shape
        h, heads = self.h, self.heads
        d = h // heads
        scale = 1.0 / math.sqrt(d)
        causal = np.triu(np.ones((s, s), dtype=bool), 1)
        saved = []
        mask0 = self.dropout_mask(ctx, 0, (b, s, h))
        x = (w["wte"][tokens] + w["wpe"][:s]) * mask0
        for layer in range(self.layers):
            p = lambda name: w[f"h.{layer}.{name}"]
            streams = (1 + 3 * layer, 2 + 3 * layer, 3 + 3 * layer)
            a_in, ln1 = layer_norm(x, p("ln_1.weight"), p("ln_1.bias"))
            qkv = (a_in @ p("attn.qkv.weight").T + p("attn.qkv.bias")).reshape(b, s, heads, 3, d)
            q, k, v = (qkv[:, :, :, i].transpose(0, 2, 1, 3) for i in range(3))
            scores = np.where(causal, -np.inf, q @ k.transpose(0, 1, 3, 2) * scale)
            probs = np.exp(scores - scores.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            keep_probs = self.dropout_mask(ctx, streams[0], (b, heads, s, s))
            attended = (probs * keep_probs) @ v
            context = attended.transpose(0, 2, 1, 3).reshape(b, s, h)
            keep_attn = self.dropout_mask(ctx, streams[1], (b, s, h))
            x1 = x + (context @ p("attn.proj.weight").T + p("attn.proj.bias")) * keep_attn
            m_in, ln2 = layer_norm(x1, p("ln_2.weight"), p("ln_2.bias"))
            fc = m_in @ p("mlp.fc.weight").T + p("mlp.fc.bias")
            act = gelu(fc, self.exact_gelu)
            keep_mlp = self.dropout_mask(ctx, streams[2], (b, s, h))
            x2 = x1 + (act @ p("mlp.proj.weight").T + p("mlp.proj.bias")) * keep_mlp
            saved.append((a_in, ln1, q, k, v, probs, keep_probs, context, keep_attn, m_in, ln2,
                          fc, act, keep_mlp))
            x = x2
        y, lnf = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"])
        logits = y @ w["wte"].T  # [b, s, padded vocabulary]
        real = logits[..., :self.vocab]  # padding classes take no part in the loss
        top = real.max(-1, keepdims=True)
        log_sum = np.log(np.exp(real - top).sum(-1, keepdims=True)) + top
        picked = np.take_along_axis(real, targets[..., None], -1)
        loss = float((log_sum - picked).mean())

        g = {name: np.zeros_like(value) for name, value in w.items()}
        dlogits = np.zeros_like(logits)
        dlogits[..., :self.vocab] = np.exp(real - log_sum)
        np.put_along_axis(dlogits, targets[..., None],
                          np.take_along_axis(dlogits, targets[..., None], -1) - 1.0, -1)
        dlogits /= b * s
        g["wte"] += dlogits.reshape(-1, dlogits.shape[-1]).T @ y.reshape(-1, h)
        dx, g["ln_f.weight"], g["ln_f.bias"] = layer_norm_backward(dlogits @ w["wte"],
                                                                    w["ln_f.weight"], lnf)
        for layer in reversed(range(self.layers)):
            p = lambda name: w[f"h.{layer}.{name}"]
            name = lambda n: f"h.{layer}.{n}"
            (a_in, ln1, q, k, v, probs, keep_probs, context, keep_attn, m_in, ln2, fc, act,
             keep_mlp) = saved[layer]
            dout = dx * keep_mlp
            g[name("mlp.proj.weight")] = dout.reshape(-1, h).T @ act.reshape(-1, act.shape[-1])
            g[name("mlp.proj.bias")] = dout.sum((0, 1))
            dfc = gelu_backward(dout @ p("mlp.proj.weight"), fc, self.exact_gelu)
            g[name("mlp.fc.weight")] = dfc.reshape(-1, dfc.shape[-1]).T @ m_in.reshape(-1, h)
            g[name("mlp.fc.bias")] = dfc.sum((0, 1))
            dm, g[name("ln_2.weight")], g[name("ln_2.bias")] = layer_norm_backward(
                dfc @ p("mlp.fc.weight"), p("ln_2.weight"), ln2)
            dx1 = dx + dm
            dproj = dx1 * keep_attn
            g[name("attn.proj.weight")] = dproj.reshape(-1, h).T @ context.reshape(-1, h)
            g[name("attn.proj.bias")] = dproj.sum((0, 1))
            dattended = (dproj @ p("attn.proj.weight")).reshape(b, s, heads, d).transpose(0, 2, 1, 3)
            dprobs = (dattended @ v.transpose(0, 1, 3, 2)) * keep_probs
            dv = (probs * keep_probs).transpose(0, 1, 3, 2) @ dattended
            dscores = probs * (dprobs - (dprobs * probs).sum(-1, keepdims=True)) * scale
            dq, dk = dscores @ k, dscores.transpose(0, 1, 3, 2) @ q
            dqkv = np.stack([t.transpose(0, 2, 1, 3) for t in (dq, dk, dv)], 3).reshape(b, s, 3 * h)
            g[name("attn.qkv.weight")] = dqkv.reshape(-1, 3 * h).T @ a_in.reshape(-1, h)
            g[name("attn.qkv.bias")] = dqkv.sum((0, 1))
            da, g[name("ln_1.weight")], g[name("ln_1.bias")] = layer_norm_backward(
                dqkv @ p("attn.qkv.weight"), p("ln_1.weight"), ln1)
            dx = dx1 + da
        demb = dx * mask0
        np.add.at(g["wte"], tokens.reshape(-1), demb.reshape(-1, h))
        g["wpe"][:s] += demb.sum(0)
        return loss, g


# --------------------------------------------------------------------------------------
# AdamW (Loshchilov & Hutter 2019) with Megatron's schedule and clipping.
# --------------------------------------------------------------------------------------
def learning_rate(o, step):
    """The rate of update `step` (1-based), as mtc documents its schedule (README):
    linear warm-up, step·peak/warmup for step <= warmup; then cosine decay from the
    peak at step warmup + 1 to `min_lr` at step decay + 1, and `min_lr` after. (Megatron's
    first warm-up update uses its init_lr, 0 by default: its ramp is one step behind.)"""
    if step <= o["warmup"]:
        return o["lr"] * step / o["warmup"]
    progress = min(1.0, (step - 1 - o["warmup"]) / (o["decay"] - o["warmup"]))
    return o["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * progress)) * (o["lr"] - o["min_lr"])


def adamw_step(w, m, v, g, step, o):
    """One update: the gradient clipped to a global norm of o['clip'], both moments,
    bias correction by step, and decoupled weight decay of matrices only."""
    norm = math.sqrt(sum(float((x * x).sum()) for x in g.values()))
    clip = o["clip"] / norm if norm > o["clip"] else 1.0
    lr = learning_rate(o, step)
    c1, c2 = 1 - o["beta1"] ** step, 1 - o["beta2"] ** step
    out_w, out_m, out_v = {}, {}, {}
    for name in w:
        grad = g[name] * clip
        out_m[name] = o["beta1"] * m[name] + (1 - o["beta1"]) * grad
        out_v[name] = o["beta2"] * v[name] + (1 - o["beta2"]) * grad * grad
        decay = o["weight_decay"] if w[name].ndim >= 2 else 0.0
        update = (out_m[name] / c1) / (np.sqrt(out_v[name] / c2) + o["eps"]) + decay * w[name]
        out_w[name] = w[name] - lr * update
    return norm, out_w, out_m, out_v


# --------------------------------------------------------------------------------------
# Checkpoints: safetensors, weights and optimizer.exp_avg(_sq).<name>.
# --------------------------------------------------------------------------------------
DTYPES = {"F64": "<f8", "F32": "<f4"}


def read_checkpoint(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    tensors = {}
    for name, entry in header.items():
        if name != "__metadata__":
            begin, end = entry["data_offsets"]
            tensors[name] = np.frombuffer(data[8 + n + begin:8 + n + end],
                                          DTYPES[entry["dtype"]]).reshape(entry["shape"])
    return header, tensors


def export_checkpoint(mtckpt, directory):
    """A checkpoint directory as one safetensors file (mtckpt export), read."""
    consolidated = directory.rstrip("/") + ".safetensors"
    subprocess.run([mtckpt, "export", directory, "-o", consolidated, "--optimizer"], check=True,
                   stdout=subprocess.DEVNULL)
    return read_checkpoint(consolidated)


def write_checkpoint(mtckpt, directory, header, tensors, metadata):
    """Our tensors as one safetensors file with the template's metadata, imported
    (mtckpt import) as `directory`'s checkpoint."""
    header = {"__metadata__": {**header["__metadata__"], **metadata}}
    body, offset = [], 0
    for name, value in tensors.items():
        raw = np.ascontiguousarray(value).tobytes()
        header[name] = {"dtype": "F64" if value.dtype == np.float64 else "F32",
                        "shape": list(value.shape), "data_offsets": [offset, offset + len(raw)]}
        body.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    consolidated = directory.rstrip("/") + ".safetensors"
    with open(consolidated, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(body))
    shutil.rmtree(directory, ignore_errors=True)  # import refuses to overwrite a checkpoint
    subprocess.run([mtckpt, "import", consolidated, "-o", directory], check=True,
                   stdout=subprocess.DEVNULL)


def relative(a, b):
    """Norm-wise relative difference over every tensor of two dicts, as one vector (NaN,
    which fails every bound, if anything is not finite)."""
    assert a.keys() == b.keys() and b, "other tensors"
    for n in b:
        assert a[n].shape == b[n].shape, f"{n}: shape {a[n].shape}, not {b[n].shape}"
    diff = sum(float(((a[n].astype(np.float64) - b[n]) ** 2).sum()) for n in b)
    norm = sum(float((b[n] ** 2).sum()) for n in b)
    return math.sqrt(diff / norm)


# --------------------------------------------------------------------------------------
# The comparison.
# --------------------------------------------------------------------------------------
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    work = lambda *p: os.path.join(args.work, *p)
    mtc, mtrun = os.path.join(args.bin, "mtc"), os.path.join(args.bin, "mtrun")
    mtckpt = os.path.join(args.bin, "mtckpt")

    def run(cmd):
        result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            sys.exit(f"FAILED: {' '.join(cmd)}\n{result.stdout}")

    # A seed above 2^32: both words of Philox's key matter.
    seed, micro, global_batch = 0x1000004D2, 2, 4
    rng = np.random.default_rng(1234)
    tokens = rng.integers(0, 512, size=40 * 32).tolist()  # 39 samples of 32: epochs turn
    write_dataset(work("data"), tokens, 32)

    # gpt-tiny as it is (dropout 0.1), and without dropout.
    with open(os.path.join(args.models, "gpt-tiny.mlir")) as f:
        source = f.read()
    plain = source.replace("dropout = 1.000000e-01 : f64, ", "").replace("rate = 0.1 : f64", "rate = 0.0 : f64")
    assert plain != source and "1.000000e-01" not in plain
    with open(work("gpt-tiny-no-dropout.mlir"), "w") as f:
        f.write(plain)
    tiny, tiny_plain = os.path.join(args.models, "gpt-tiny.mlir"), work("gpt-tiny-no-dropout.mlir")

    # Every tensor gpt-tiny has, and its global shape: Megatron's padding takes the 512
    # classes to a multiple of 96 (and of 96·tp): 576.
    expected = {"wte": (576, 64), "wpe": (32, 64), "ln_f.weight": (64,), "ln_f.bias": (64,)}
    for layer in range(2):
        for name, shape in (("ln_1.weight", (64,)), ("ln_1.bias", (64,)),
                            ("attn.qkv.weight", (192, 64)), ("attn.qkv.bias", (192,)),
                            ("attn.proj.weight", (64, 64)), ("attn.proj.bias", (64,)),
                            ("ln_2.weight", (64,)), ("ln_2.bias", (64,)),
                            ("mlp.fc.weight", (256, 64)), ("mlp.fc.bias", (256,)),
                            ("mlp.proj.weight", (64, 256)), ("mlp.proj.bias", (64,))):
            expected[f"h.{layer}.{name}"] = shape

    # name, model, dropout, precision, layout flags, ranks, the step it resumes at,
    # clipping threshold (the gradient norm is about 1.7), sequence, bound
    cases = [
        ("f64_no_dropout_warmup", tiny_plain, 0.0, "fp64", [], 1, 0, 1.0, 32, 1e-10),
        ("f64_no_dropout_first_decay_step_unclipped", tiny_plain, 0.0, "fp64", [], 1, 4, 5.0, 32, 1e-10),
        ("f64_no_dropout_decay", tiny_plain, 0.0, "fp64", [], 1, 10, 1.0, 32, 1e-10),
        ("f64_no_dropout_past_decay_clip_half", tiny_plain, 0.0, "fp64", [], 1, 25, 0.5, 32, 1e-10),
        ("f64_dropout", tiny, 0.1, "fp64", [], 1, 10, 1.0, 32, 1e-10),
        ("f64_dropout_seq16", tiny, 0.1, "fp64", ["--seq-length", "16"], 1, 10, 1.0, 16, 1e-10),
        ("f64_tp2_sp_dropout", tiny, 0.1, "fp64", ["--tp", "2", "--sp"], 2, 10, 1.0, 32, 1e-10),
        ("f64_pp2_dropout", tiny, 0.1, "fp64", ["--pp", "2"], 2, 10, 1.0, 32, 1e-10),
        ("fp32_dropout", tiny, 0.1, "fp32", [], 1, 10, 1.0, 32, 1e-5),
    ]
    failures = []
    for name, model, rate, precision, layout, ranks, start, clip, seq, bound in cases:
        optimizer = {"lr": 1e-3, "min_lr": 1e-4, "warmup": 4, "decay": 20, "beta1": 0.9,
                     "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "clip": clip}
        train_flags = ["--lr", "1e-3", "--min-lr", "1e-4", "--warmup-steps", "4",
                       "--lr-decay-steps", "20", "--lr-decay", "cosine", "--adam-beta1", "0.9",
                       "--adam-beta2", "0.95", "--adam-eps", "1e-8", "--weight-decay", "0.1",
                       "--clip-grad", str(clip), "--seed", str(seed), "--backend", "cpu"]
        plan = work(name + ".mtp")
        os.makedirs(work(name), exist_ok=True)
        run([mtc, "compile", model, "--micro-batch-size", str(micro), "--global-batch-size",
             str(global_batch), "--precision", precision, "--make-vocab-size-divisible-by", "96",
             *layout, "-o", plan])
        # A checkpoint of this model's tensors (names, shapes, types, metadata) to fill
        # with our own state: random weights and moments at step `start`.
        launcher = [mtrun, "-n", str(ranks), plan]
        run([*launcher, "--data", work("data"), "--steps", "1", "--save", work(name, "template"),
             *train_flags])
        header, template = export_checkpoint(mtckpt, work(name, "template"))
        weights = {t: x.shape for t, x in template.items() if not t.startswith("optimizer.")}
        assert weights == expected, f"the checkpoint holds {weights}"
        dtype = template["wte"].dtype
        state = np.random.default_rng(7)
        w, m, v = {}, {}, {}
        for tensor, value in template.items():
            if tensor.startswith("optimizer."):
                continue
            is_scale = tensor.endswith("ln_1.weight") or tensor.endswith("ln_2.weight") or tensor == "ln_f.weight"
            w[tensor] = ((1.0 if is_scale else 0.0) + state.normal(0, 0.05, value.shape)).astype(dtype)
            m[tensor] = (state.normal(0, 1e-3, value.shape) if start else np.zeros(value.shape)).astype(dtype)
            v[tensor] = (state.normal(0, 1e-3, value.shape) ** 2 if start else np.zeros(value.shape)).astype(dtype)
        tensors = {**w, **{"optimizer.exp_avg." + t: x for t, x in m.items()},
                   **{"optimizer.exp_avg_sq." + t: x for t, x in v.items()}}
        assert tensors.keys() == template.keys()
        write_checkpoint(mtckpt, work(name, "start"), header, tensors,
                         {"step": str(start), "data_position": str(start * global_batch),
                          "seed": str(seed)})
        metrics = work(name, "metrics.txt")
        if os.path.exists(metrics):
            os.remove(metrics)
        run([*launcher, "--data", work("data"), "--steps", str(start + 1),
             "--load", work(name, "start"), "--save", work(name, "after"), "--metrics", metrics,
             *train_flags])
        with open(metrics) as f:
            lines = f.read().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"step {start + 1} "), lines
        fields = lines[0].split()
        got_loss, got_lr, got_norm = float(fields[3]), float(fields[5]), float(fields[7])
        _, after = export_checkpoint(mtckpt, work(name, "after"))

        # The reference, in float64 from the same (possibly fp32-rounded) state.
        model_ = Model(layers=2, h=64, heads=4, vocab=512, rate=rate)
        w64 = {t: x.astype(np.float64) for t, x in w.items()}
        micro_batches = global_batch // micro
        loss, grads = 0.0, {t: np.zeros_like(x) for t, x in w64.items()}
        for mb in range(micro_batches):
            inputs, targets = batch_at(tokens, seq, seed, start * global_batch + mb * micro, micro)
            l, g = model_.loss_and_gradients(w64, inputs, targets, (seed, start, mb))
            loss += l / micro_batches
            for t in grads:
                grads[t] += g[t] / micro_batches
        norm, w1, m1, v1 = adamw_step(w64, {t: x.astype(np.float64) for t, x in m.items()},
                                      {t: x.astype(np.float64) for t, x in v.items()}, grads,
                                      start + 1, optimizer)
        lr = learning_rate(optimizer, start + 1)
        errors = {
            "lr": abs(got_lr - lr) / lr,
            "loss": abs(got_loss - loss) / abs(loss),
            "grad norm": abs(got_norm - norm) / norm,
            "update": relative({t: after[t].astype(np.float64) - w64[t] for t in w1},
                               {t: w1[t] - w64[t] for t in w1}),
            "weights": relative({t: after[t] for t in w1}, w1),
            "exp_avg": relative({t: after["optimizer.exp_avg." + t] for t in m1}, m1),
            "exp_avg_sq": relative({t: after["optimizer.exp_avg_sq." + t] for t in v1}, v1),
        }
        # fp32 rounds the update itself (about 1e-5 of it): ten times the bound there.
        ok = all(e <= (10 * bound if precision == "fp32" and k == "update" else bound)
                 for k, e in errors.items())
        print(f"{name:42s} step {start + 1:2d} loss {loss:.6f} norm {norm:.4f}  " +
              "  ".join(f"{k} {e:.1e}" for k, e in errors.items()) +
              f"  (bound {bound:g})  {'ok' if ok else 'MISMATCH'}")
        if not ok:
            failures.append(name)
    if failures:
        sys.exit("mtrun differs from the reference: " + ", ".join(failures))
    print(f"{len(cases)} passed, 0 failed")


if __name__ == "__main__":
    main()
