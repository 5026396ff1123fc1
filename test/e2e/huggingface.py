#!/usr/bin/env python3
"""Hugging Face checkpoints in and out, against independent code.

Builds small Hugging Face directories here (config.json and safetensors written by this
script, with random weights in Hugging Face's own layouts: LLaMA's separate q/k/v
projections, GPT-2's Conv1D [in, out] weights and c_attn columns Q|K|V), then:

- `mtc import-config` makes the model file and `mtckpt import-hf` the checkpoint;
  `mtrun --load` (serially, and under tensor + sequence parallelism) computes the loss of
  the first batch. It must equal a NumPy forward pass written as transformers computes
  LlamaForCausalLM (RMSNorm, rotary embeddings by rotate_half with LLaMA 3.1's frequency
  scaling, grouped-query attention by repeat_kv, SwiGLU, an untied output layer) and, for
  GPT-2, test/e2e/reference.py's model fed through this script's own conversion: 1e-5
  relative (mtrun in fp32, the references in f64). MixtralForCausalLM likewise (each
  expert's w1/w2/w3 stacked into one tensor; the forward as MixtralSparseMoeBlock computes
  it), serially, under data parallelism and under a pipeline. Qwen2ForCausalLM (biases on
  the query, key and value projections, fused by group as their weights are; the output
  layer tied) and LlamaForCausalLM with attention_bias (the output projection's bias too),
  serially and under tensor + sequence parallelism; Qwen3ForCausalLM (each query and key
  head RMS-normalised by q_norm and k_norm, heads of 16 in a hidden of 32) likewise; and
  sliding windows, masked as transformers masks them: MistralForCausalLM's (serially,
  under tp 2 · sp, cp 2 of both forms and unfused attention) and Qwen2's where
  use_sliding_window turns it on. Phi3ForCausalLM (its q, k and v projections in one
  qkv_proj and its gate and up projections in one gate_up_proj, which the import splits
  into mtc's tensors and the export joins; the reference cuts them as Phi-3's forward
  does) with its window, serially and under tp 2 · sp.
- `mtckpt export-hf` gives back every tensor bit for bit, in bf16, fp16 and fp32, from a
  single file and from shards; a second export of the re-imported checkpoint gives
  byte-identical files.
- The vocabulary (300) is padded by mtc compile as Megatron pads it (to 384 serially, 512
  under tp 2): mtrun loads the unpadded import into either, and export-hf of a checkpoint
  trained under tp 2 trims its tables back to the 300 rows the consolidated export holds
  first.

usage: huggingface.py --bin BUILD/tools --work DIR
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import Model, batch_at, write_dataset  # noqa: E402

SEED, MICRO, GLOBAL, SEQ = 11, 2, 4, 16
# Not a multiple of 128: mtc pads it to 384 serially and to 512 under tp 2, while the
# Hugging Face files hold 300 rows.
VOCAB = 300


def bf16_bits(x):
    """float32 -> bf16 bits, rounding to nearest even."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def encode(x, dtype):
    if dtype == "BF16":
        return bf16_bits(x).tobytes()
    return np.asarray(x, {"F16": "<f2", "F32": "<f4"}[dtype]).tobytes()


def decode(raw, dtype, shape):
    if dtype == "BF16":
        bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    return np.frombuffer(raw, {"F16": "<f2", "F32": "<f4"}[dtype]).astype(np.float32).reshape(shape)


def write_safetensors(path, tensors, dtype):
    header, body, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, value in tensors.items():
        raw = encode(value, dtype)
        header[name] = {"dtype": dtype, "shape": list(value.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        body.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(body))


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    return {name: (e["dtype"], e["shape"], data[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]])
            for name, e in header.items() if name != "__metadata__"}


def read_directory(directory):
    """Every tensor of a Hugging Face directory: (dtype, shape, bytes) by name."""
    index = os.path.join(directory, "model.safetensors.index.json")
    files = ["model.safetensors"]
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    tensors = {}
    for name in files:
        tensors.update(read_safetensors(os.path.join(directory, name)))
    return tensors


def write_directory(directory, config, tensors, dtype, shards=1):
    os.makedirs(directory)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump({**config, "torch_dtype": {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[dtype]}, f)
    if shards == 1:
        write_safetensors(os.path.join(directory, "model.safetensors"), tensors, dtype)
        return
    names = list(tensors)
    weight_map = {}
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[i::shards]}
        write_safetensors(os.path.join(directory, file), part, dtype)
        weight_map.update({n: file for n in part})
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


# --------------------------------------------------------------------------------------
# LlamaForCausalLM's forward, as transformers computes it, in float64.
# --------------------------------------------------------------------------------------
def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def inverse_frequencies(c):
    d = c.get("head_dim", c["hidden_size"] // c["num_attention_heads"])
    theta = c["rope_parameters"]["rope_theta"] if "rope_parameters" in c else c["rope_theta"]
    inv = 1.0 / theta ** (np.arange(0, d, 2) / d)
    r = c.get("rope_scaling")
    if r:  # transformers' _compute_llama3_parameters
        low_wl = r["original_max_position_embeddings"] / r["low_freq_factor"]
        high_wl = r["original_max_position_embeddings"] / r["high_freq_factor"]
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > low_wl, inv / r["factor"], inv)
        smooth = (r["original_max_position_embeddings"] / wavelen - r["low_freq_factor"]) / (
            r["high_freq_factor"] - r["low_freq_factor"])
        smoothed = (1 - smooth) * scaled / r["factor"] + smooth * scaled
        medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
        inv = np.where(medium, smoothed, scaled)
    return inv


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], -1)


def swiglu(gate_w, up_w, down_w, h):
    gate = h @ gate_w.T
    return ((gate / (1 + np.exp(-gate))) * (h @ up_w.T)) @ down_w.T


def moe_names(c):
    """A mixture's router and experts: (prefix, gate, up, down), Mixtral's or Qwen3-MoE's."""
    if c["architectures"] == ["Qwen3MoeForCausalLM"]:
        return "mlp.", "gate_proj", "up_proj", "down_proj"
    return "block_sparse_moe.", "w1", "w3", "w2"


def experts_of(c):
    return c.get("num_local_experts", c.get("num_experts", 0))


def mlp(c, p, h):
    """LLaMA's MLP; or a sparse mixture of experts as MixtralSparseMoeBlock and
    Qwen3MoeSparseMoeBlock compute it: the softmax over the router's logits, its top k
    (renormalised to sum to one: Mixtral's, and Qwen's with norm_topk_prob), each token the
    sum of its k experts' SwiGLU MLPs weighted so."""
    if not experts_of(c):
        return swiglu(p("mlp.gate_proj.weight"), p("mlp.up_proj.weight"),
                      p("mlp.down_proj.weight"), h)
    prefix, gate, up, down = moe_names(c)
    logits = h @ p(prefix + "gate.weight").T
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    chosen = np.argsort(-probs, axis=-1, kind="stable")[..., :c["num_experts_per_tok"]]
    weights = np.take_along_axis(probs, chosen, -1)
    if c.get("norm_topk_prob", "num_local_experts" in c):
        weights /= weights.sum(-1, keepdims=True)
    out = np.zeros_like(h)
    for e in range(experts_of(c)):
        w = lambda n: p(f"{prefix}experts.{e}.{n}.weight")
        out += (weights * (chosen == e)).sum(-1, keepdims=True) * swiglu(w(gate), w(up), w(down), h)
    return out


def window_of(c, layer):
    """The sliding window of a layer's attention as transformers gives it (None: none):
    Mistral's and Mixtral's sliding_window; Qwen's where use_sliding_window says so, in
    Qwen3-MoE's every layer, else in those layer_types names (transformers 5) or from
    max_window_layers on."""
    arch = c["architectures"][0]
    # Left out, as each config class has it: Mixtral and Phi-3 none, the others 4096.
    w = c.get("sliding_window", None if arch in ("MixtralForCausalLM", "Phi3ForCausalLM") else 4096)
    if arch in ("MistralForCausalLM", "MixtralForCausalLM", "Phi3ForCausalLM"):
        return w
    if not arch.startswith("Qwen") or not c.get("use_sliding_window"):
        return None
    if arch == "Qwen3MoeForCausalLM":
        return w
    if "layer_types" in c:
        return w if c["layer_types"][layer] == "sliding_attention" else None
    return w if layer >= c.get("max_window_layers", 28) else None


def llama_loss(c, w, tokens, targets):
    """LlamaForCausalLM's loss, or MixtralForCausalLM's (without its router's loss)."""
    b, s = tokens.shape
    nh, ng = c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim", c["hidden_size"] // nh)
    angles = np.arange(s)[:, None] * inverse_frequencies(c)[None, :]
    emb = np.concatenate([angles, angles], -1)
    cos, sin = np.cos(emb), np.sin(emb)
    x = w["model.embed_tokens.weight"][tokens]
    for layer in range(c["num_hidden_layers"]):
        # Masked: the keys after each query, and with a sliding window w those w or more
        # before it, as transformers' sliding_window_overlay masks them.
        masked = np.triu(np.ones((s, s), dtype=bool), 1)
        if window_of(c, layer):
            masked |= np.tril(np.ones((s, s), dtype=bool), -window_of(c, layer))
        p = lambda name: w[f"model.layers.{layer}.{name}"]
        bias = lambda name: w.get(f"model.layers.{layer}.{name}", 0.0)  # none: no bias
        h = rms_norm(x, p("input_layernorm.weight"), c["rms_norm_eps"])
        proj = lambda n, heads: (h @ p(f"self_attn.{n}_proj.weight").T + bias(f"self_attn.{n}_proj.bias")
                                 ).reshape(b, s, heads, d)
        q, k, v = proj("q", nh), proj("k", ng), proj("v", ng)
        if c["architectures"] in (["Qwen3ForCausalLM"], ["Qwen3MoeForCausalLM"]):  # over d
            q = rms_norm(q, p("self_attn.q_norm.weight"), c["rms_norm_eps"])
            k = rms_norm(k, p("self_attn.k_norm.weight"), c["rms_norm_eps"])
        q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = np.repeat(k, nh // ng, axis=1), np.repeat(v, nh // ng, axis=1)  # repeat_kv
        scores = np.where(masked, -np.inf, q @ k.transpose(0, 1, 3, 2) / math.sqrt(d))
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, nh * d)
        x = x + context @ p("self_attn.o_proj.weight").T + bias("self_attn.o_proj.bias")
        h = rms_norm(x, p("post_attention_layernorm.weight"), c["rms_norm_eps"])
        x = x + mlp(c, p, h)
    head = w["model.embed_tokens.weight" if c["tie_word_embeddings"] else "lm_head.weight"]
    logits = rms_norm(x, w["model.norm.weight"], c["rms_norm_eps"]) @ head.T
    top = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - top).sum(-1)) + top[..., 0]
    return float((lse - np.take_along_axis(logits, targets[..., None], -1)[..., 0]).mean())


LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 8, "num_key_value_heads": 2, "max_position_embeddings": SEQ,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "attention_bias": False, "mlp_bias": False, "vocab_size": VOCAB,
    # LLaMA 3.1's scaling over 16 original positions: d = 8 gives one frequency kept,
    # one blended and two stretched.
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
}
# Qwen2.5's keys as transformers 5 writes them (rope_parameters, layer_types, no window).
QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 8, "num_key_value_heads": 2, "max_position_embeddings": SEQ,
    "rms_norm_eps": 1e-6, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    "tie_word_embeddings": True, "vocab_size": VOCAB, "use_sliding_window": False,
    "sliding_window": None, "max_window_layers": 2, "attention_dropout": 0.0,
    "layer_types": ["full_attention", "full_attention"],
}
LLAMA_BIAS = dict(LLAMA, attention_bias=True, rope_scaling=None)
# Qwen2 with its window turned on in every layer (transformers 5's layer_types).
QWEN2_WINDOW = dict(QWEN2, use_sliding_window=True, sliding_window=5,
                    layer_types=["sliding_attention"] * 2)
# Mistral v0.1's form: each query sees its own position and the 4 before it, of 16.
MISTRAL = {
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_act": "silu",
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 8, "num_key_value_heads": 2, "max_position_embeddings": SEQ,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
    "vocab_size": VOCAB, "sliding_window": 5, "attention_dropout": 0.0,
}
# Mixtral's: Mistral's decoder without a window, 4 experts of 48, each token's top 2.
MIXTRAL = dict(MISTRAL, architectures=["MixtralForCausalLM"], model_type="mixtral",
               intermediate_size=48, rope_theta=1000000.0, sliding_window=None,
               num_local_experts=4, num_experts_per_tok=2, router_aux_loss_coef=0.02,
               output_router_logits=False, router_jitter_noise=0.0)
# Phi-3-mini-4k's keys, scaled down: LLaMA's decoder with its projections in one matrix
# each (qkv_proj, gate_up_proj), each query seeing its own position and the 4 before it.
PHI3 = dict(MISTRAL, architectures=["Phi3ForCausalLM"], model_type="phi3",
            original_max_position_embeddings=SEQ, rope_scaling=None, resid_pdrop=0.0,
            embd_pdrop=0.0, attention_bias=False)
# Qwen3's keys (transformers 4.51): heads of 16 in a hidden of 32, q_norm and k_norm.
QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_act": "silu",
    "hidden_size": 32, "intermediate_size": 96, "num_hidden_layers": 2, "head_dim": 16,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": SEQ,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None,
    "tie_word_embeddings": True, "vocab_size": VOCAB, "use_sliding_window": False,
    "sliding_window": None, "max_window_layers": 2, "attention_dropout": 0.0,
    "attention_bias": False,
}
# Qwen3-MoE's keys (transformers 4.51): Qwen3's attention, 4 experts of 24, top 2.
QWEN3_MOE = dict(QWEN3, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                 num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                 norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                 router_aux_loss_coef=0.001, output_router_logits=False,
                 tie_word_embeddings=False)
GPT2 = {
    "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
    "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": SEQ, "n_ctx": SEQ,
    "vocab_size": VOCAB, "layer_norm_epsilon": 1e-5, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
    "resid_pdrop": 0.0,
}


PHI3_FUSED = (("self_attn.qkv_proj.weight", ("self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                             "self_attn.v_proj.weight")),
              ("mlp.gate_up_proj.weight", ("mlp.gate_proj.weight", "mlp.up_proj.weight")))


def phi3_fused(w):
    """LLaMA's tensors as Phi3ForCausalLM holds them: the q, k and v rows in one qkv_proj,
    the gate's and the up projection's in one gate_up_proj."""
    out = dict(w)
    for name in [n for n in w if n.endswith("self_attn.q_proj.weight")]:
        layer = name[:-len("self_attn.q_proj.weight")]
        for fused, parts in PHI3_FUSED:
            out[layer + fused] = np.concatenate([out.pop(layer + p) for p in parts])
    return out


def phi3_split(c, w):
    """Phi-3's tensors under LLaMA's names, each fused one cut as Phi-3's forward cuts it."""
    nh, ng, f = c["num_attention_heads"], c["num_key_value_heads"], c["intermediate_size"]
    d = c.get("head_dim", c["hidden_size"] // nh)
    out = dict(w)
    for name in [n for n in w if n.endswith("self_attn.qkv_proj.weight")]:
        layer = name[:-len("self_attn.qkv_proj.weight")]
        for fused, parts in PHI3_FUSED:
            rows = [nh * d, ng * d, ng * d] if len(parts) == 3 else [f, f]
            pieces = np.split(out.pop(layer + fused), np.cumsum(rows)[:-1])
            out.update({layer + p: x for p, x in zip(parts, pieces)})
    return out


def llama_weights(c, rng):
    """LlamaForCausalLM's tensors, or MixtralForCausalLM's (a router and each expert's), or
    Phi3ForCausalLM's (fused)."""
    h, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    nh, ng = c["num_attention_heads"], c["num_key_value_heads"]
    d = c.get("head_dim", h // nh)
    experts = experts_of(c)
    if experts:
        prefix, gate, up, down = moe_names(c)
        f = c.get("moe_intermediate_size", f)
        mlp_shapes = [(prefix + "gate.weight", (experts, h))] + [
            (f"{prefix}experts.{e}.{n}.weight", shape) for e in range(experts)
            for n, shape in ((gate, (f, h)), (down, (h, f)), (up, (f, h)))]
    else:
        mlp_shapes = [("mlp.gate_proj.weight", (f, h)), ("mlp.up_proj.weight", (f, h)),
                      ("mlp.down_proj.weight", (h, f))]
    w = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    if not c["tie_word_embeddings"]:
        w["lm_head.weight"] = (v, h)
    qwen2 = c["architectures"] == ["Qwen2ForCausalLM"]
    biases = [("self_attn.q_proj.bias", (nh * d,)), ("self_attn.k_proj.bias", (ng * d,)),
              ("self_attn.v_proj.bias", (ng * d,))] if qwen2 or c.get("attention_bias") else []
    if c.get("attention_bias"):
        biases.append(("self_attn.o_proj.bias", (h,)))
    if c["architectures"] in (["Qwen3ForCausalLM"], ["Qwen3MoeForCausalLM"]):
        biases += [("self_attn.q_norm.weight", (d,)), ("self_attn.k_norm.weight", (d,))]
    for l in range(c["num_hidden_layers"]):
        for name, shape in [("input_layernorm.weight", (h,)), ("self_attn.q_proj.weight", (nh * d, h)),
                            ("self_attn.k_proj.weight", (ng * d, h)), ("self_attn.v_proj.weight", (ng * d, h)),
                            ("self_attn.o_proj.weight", (h, nh * d)),
                            ("post_attention_layernorm.weight", (h,))] + mlp_shapes + biases:
            w[f"model.layers.{l}.{name}"] = shape
    # Norm weights about 1; biases large enough to move the loss well past the bound.
    drawn = {n: (rng.normal(0, 1.0, s) if n.endswith(".bias")
                 else (1.0 if len(s) == 1 else 0.0) + rng.normal(0, 0.1, s)).astype(np.float32)
             for n, s in w.items()}
    return phi3_fused(drawn) if c["architectures"] == ["Phi3ForCausalLM"] else drawn


def gpt2_weights(c, rng):
    h, v, f = c["n_embd"], c["vocab_size"], 4 * c["n_embd"]
    w = {"transformer.wte.weight": (v, h), "transformer.wpe.weight": (c["n_positions"], h),
         "transformer.ln_f.weight": (h,), "transformer.ln_f.bias": (h,)}
    for l in range(c["n_layer"]):
        for name, shape in (("ln_1.weight", (h,)), ("ln_1.bias", (h,)), ("attn.c_attn.weight", (h, 3 * h)),
                            ("attn.c_attn.bias", (3 * h,)), ("attn.c_proj.weight", (h, h)),
                            ("attn.c_proj.bias", (h,)), ("ln_2.weight", (h,)), ("ln_2.bias", (h,)),
                            ("mlp.c_fc.weight", (h, f)), ("mlp.c_fc.bias", (f,)),
                            ("mlp.c_proj.weight", (f, h)), ("mlp.c_proj.bias", (h,))):
            w[f"transformer.h.{l}.{name}"] = shape
    w = {n: ((1.0 if n.endswith("ln_1.weight") or n.endswith("ln_2.weight") or n.endswith("ln_f.weight") else 0.0)
             + rng.normal(0, 0.1, s)).astype(np.float32) for n, s in w.items()}
    # GPT2LMHeadModel's causal-mask buffer, which the model recomputes.
    w["transformer.h.0.attn.bias"] = np.tril(np.ones((1, 1, SEQ, SEQ), np.float32))
    return w


def gpt2_in_mtc_layout(c, w):
    """This script's own conversion: Conv1D transposed, c_attn's Q|K|V columns
    interleaved per head as [heads, 3, head_dim] rows."""
    h, heads = c["n_embd"], c["n_head"]
    d = h // heads
    out = {"wte": w["transformer.wte.weight"], "wpe": w["transformer.wpe.weight"],
           "ln_f.weight": w["transformer.ln_f.weight"], "ln_f.bias": w["transformer.ln_f.bias"]}
    for l in range(c["n_layer"]):
        p = lambda name: w[f"transformer.h.{l}.{name}"]
        for norm in ("ln_1", "ln_2"):
            for part in ("weight", "bias"):
                out[f"h.{l}.{norm}.{part}"] = p(f"{norm}.{part}")
        qkv = p("attn.c_attn.weight").T.reshape(3, heads, d, h)
        out[f"h.{l}.attn.qkv.weight"] = qkv.transpose(1, 0, 2, 3).reshape(3 * h, h)
        out[f"h.{l}.attn.qkv.bias"] = p("attn.c_attn.bias").reshape(3, heads, d).transpose(1, 0, 2).reshape(-1)
        out[f"h.{l}.attn.proj.weight"] = p("attn.c_proj.weight").T
        out[f"h.{l}.attn.proj.bias"] = p("attn.c_proj.bias")
        out[f"h.{l}.mlp.fc.weight"] = p("mlp.c_fc.weight").T
        out[f"h.{l}.mlp.fc.bias"] = p("mlp.c_fc.bias")
        out[f"h.{l}.mlp.proj.weight"] = p("mlp.c_proj.weight").T
        out[f"h.{l}.mlp.proj.bias"] = p("mlp.c_proj.bias")
    return {n: x.astype(np.float64) for n, x in out.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    work = lambda *p: os.path.join(args.work, *p)
    mtc, mtrun, mtckpt = (os.path.join(args.bin, t) for t in ("mtc", "mtrun", "mtckpt"))

    def run(cmd):
        result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            sys.exit(f"FAILED: {' '.join(cmd)}\n{result.stdout}")
        return result.stdout

    rng = np.random.default_rng(5)
    tokens = rng.integers(0, 256, size=41 * SEQ).tolist()
    write_dataset(work("data"), tokens, SEQ)
    failures = []

    def first_loss(name, model, ckpt, layout, ranks, save=()):
        plan = work(f"{name}.mtp")
        run([mtc, "compile", model, "--micro-batch-size", str(MICRO), "--global-batch-size",
             str(GLOBAL), *layout, "-o", plan])
        metrics = work(f"{name}.txt")
        run([mtrun, "--backend", "cpu", "-n", str(ranks), plan, "--data", work("data"),
             "--steps", "1", "--seed", str(SEED), "--load", ckpt, "--metrics", metrics,
             *save])
        with open(metrics) as f:
            fields = f.read().split()
        return float(fields[3]), float(fields[7])

    def check(label, got, want, bound=1e-5):
        error = abs(got - want) / abs(want)
        ok = error <= bound
        print(f"{label:44s} mtrun {got:.8f}  reference {want:.8f}  rel err {error:.1e}  "
              f"{'ok' if ok else 'MISMATCH'}")
        if not ok:
            failures.append(label)

    def round_trip(arch, config, weights):
        """Imports the weights in each dtype (one file, or shards), exports them and
        imports and exports again: every tensor back bit for bit, the same files twice."""
        for dtype, shards in (("F32", 1), ("BF16", 3), ("F16", 1)):
            source = work(f"{arch}_{dtype}_hf")
            write_directory(source, config, weights, dtype, shards)
            run([mtc, "import-config", os.path.join(source, "config.json"), "-o", work(f"{arch}.mlir")])
            ckpt = work(f"{arch}_{dtype}_ckpt")
            run([mtckpt, "import-hf", source, "-o", ckpt])
            # Out and in and out again: every tensor as it came, and the same files twice.
            first, second = work(f"{arch}_{dtype}_out1"), work(f"{arch}_{dtype}_out2")
            size = ["--max-shard-size", "40000"] if shards > 1 else []
            run([mtckpt, "export-hf", ckpt, "--config", os.path.join(source, "config.json"), "-o", first, *size])
            run([mtckpt, "import-hf", first, "-o", work(f"{arch}_{dtype}_ckpt2")])
            run([mtckpt, "export-hf", work(f"{arch}_{dtype}_ckpt2"), "--config",
                 os.path.join(first, "config.json"), "-o", second, *size])
            given, back = read_directory(source), read_directory(first)
            kept = {n: t for n, t in given.items() if not n.endswith(".attn.bias")}
            same_tensors = back == kept
            same_files = sorted(os.listdir(first)) == sorted(os.listdir(second)) and all(
                open(os.path.join(first, f), "rb").read() == open(os.path.join(second, f), "rb").read()
                for f in os.listdir(first))
            print(f"{arch} {dtype} in {shards} file(s): {len(back)} tensors back bit for bit: "
                  f"{same_tensors}; second export identical: {same_files}; "
                  f"{len(os.listdir(first)) - 1} file(s) out")
            if not (same_tensors and same_files):
                failures.append(f"{arch} {dtype} round trip")

    for arch, config, make in (("llama", LLAMA, llama_weights), ("gpt2", GPT2, gpt2_weights)):
        round_trip(arch, config, make(config, rng))
        source = work(f"{arch}_F16_hf")

        # The loss of the first batch from the bf16 weights, against the references.
        w = {n: decode(raw, dtype, shape).astype(np.float64)
             for n, (dtype, shape, raw) in read_directory(work(f"{arch}_BF16_hf")).items()}
        ckpt = work(f"{arch}_BF16_ckpt")
        loss, norm = 0.0, 0.0
        if arch == "llama":
            for mb in range(GLOBAL // MICRO):
                inputs, targets = batch_at(tokens, SEQ, SEED, mb * MICRO, MICRO)
                loss += llama_loss(config, w, inputs, targets) / (GLOBAL // MICRO)
        else:
            model = Model(layers=2, h=64, heads=4, vocab=VOCAB, rate=0.0)
            mw = gpt2_in_mtc_layout(config, w)
            grads = {n: np.zeros_like(x) for n, x in mw.items()}
            for mb in range(GLOBAL // MICRO):
                inputs, targets = batch_at(tokens, SEQ, SEED, mb * MICRO, MICRO)
                l, g = model.loss_and_gradients(mw, inputs, targets, (SEED, 0, mb))
                loss += l / (GLOBAL // MICRO)
                for n in grads:
                    grads[n] += g[n] / (GLOBAL // MICRO)
            norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
        trained = work(f"{arch}_trained")
        for layout, ranks in (([], 1), (["--tp", "2", "--sp"], 2)):
            save = ["--save", trained] if ranks == 2 else []
            got_loss, got_norm = first_loss(f"{arch}_{ranks}", work(f"{arch}.mlir"), ckpt, layout,
                                            ranks, save)
            check(f"{arch} first loss, {ranks} rank(s)", got_loss, loss)
            if norm:
                check(f"{arch} first gradient norm, {ranks} rank(s)", got_norm, norm)

        # A checkpoint trained under tp 2 holds 512 rows of each vocabulary table; the
        # export trims them to the vocabulary, as the consolidated export has them.
        run([mtckpt, "export", trained, "-o", work(f"{arch}_trained.safetensors")])
        run([mtckpt, "export-hf", trained, "--config", os.path.join(source, "config.json"),
             "--dtype", "fp32", "-o", work(f"{arch}_trained_hf")])
        whole = read_safetensors(work(f"{arch}_trained.safetensors"))
        out = read_directory(work(f"{arch}_trained_hf"))
        tables = ({"embed_tokens.weight": "model.embed_tokens.weight", "lm_head.weight": "lm_head.weight"}
                  if arch == "llama" else {"wte": "transformer.wte.weight"})
        for mine, theirs in tables.items():
            dtype, shape, raw = whole[mine]
            padded = decode(raw, dtype, shape)
            trimmed = decode(out[theirs][2], out[theirs][0], out[theirs][1])
            ok = shape == [512, 64] and out[theirs][1] == [VOCAB, 64] and np.array_equal(
                padded[:VOCAB], trimmed)
            print(f"{arch} {mine}: trained {shape}, exported {out[theirs][1]}, the same rows: {ok}")
            if not ok:
                failures.append(f"{arch} {mine} trimmed on export")

        # A checkpoint of another vocabulary is refused, naming it.
        bigger = dict(config, vocab_size=VOCAB + 20)
        os.makedirs(work(f"{arch}_bigger"), exist_ok=True)
        with open(work(f"{arch}_bigger", "config.json"), "w") as f:
            json.dump(bigger, f)
        run([mtc, "import-config", work(f"{arch}_bigger", "config.json"), "-o", work(f"{arch}_bigger.mlir")])
        run([mtc, "compile", work(f"{arch}_bigger.mlir"), "--micro-batch-size", str(MICRO),
             "--global-batch-size", str(GLOBAL), "-o", work(f"{arch}_bigger.mtp")])
        refused = subprocess.run([mtrun, "--backend", "cpu", work(f"{arch}_bigger.mtp"), "--data",
                                  work("data"), "--steps", "1", "--load", ckpt],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        table = "embed_tokens.weight" if arch == "llama" else "wte"
        said = (f"tensor '{table}' has shape [{VOCAB}, 64] for a vocabulary of {VOCAB}, the plan "
                f"expects [384, 64] (any rows from {VOCAB + 20}, the vocabulary, on)")
        ok = refused.returncode != 0 and said in refused.stdout
        print(f"{arch}: a table of {VOCAB} rows for a vocabulary of {VOCAB + 20} refused: {ok}")
        if not ok:
            failures.append(f"{arch} short table accepted or misnamed: {refused.stdout.strip()}")

    # Mixtral: each expert's tensors stacked into one and back, bit for bit; the first
    # loss against the NumPy forward serially, under data parallelism and a pipeline.
    round_trip("mixtral", MIXTRAL, llama_weights(MIXTRAL, rng))
    w = {n: decode(raw, dtype, shape).astype(np.float64)
         for n, (dtype, shape, raw) in read_directory(work("mixtral_BF16_hf")).items()}
    loss = sum(llama_loss(MIXTRAL, w, *batch_at(tokens, SEQ, SEED, mb * MICRO, MICRO))
               for mb in range(GLOBAL // MICRO)) / (GLOBAL // MICRO)
    for i, (layout, ranks) in enumerate((([], 1), (["--dp", "2"], 2), (["--pp", "2"], 2))):
        got_loss, _ = first_loss(f"mixtral_{i}", work("mixtral.mlir"), work("mixtral_BF16_ckpt"),
                                 layout, ranks)
        check(f"mixtral first loss, {' '.join(layout) or 'serial'}", got_loss, loss)

    # GPT-2 with GELU's exact form (activation_function "gelu", as BERT and PyTorch's
    # default compute it), imported as mt.gelu {approximate = "none"}. The MLP's input
    # weights are scaled so that its pre-activations spread over |x| of 1 to 3, where the
    # two forms differ most.
    exact = dict(GPT2, activation_function="gelu")
    weights = gpt2_weights(exact, rng)
    for name in weights:
        if name.endswith("mlp.c_fc.weight"):
            weights[name] *= 2.5
    write_directory(work("gpt2_erf_hf"), exact, weights, "F32")
    run([mtc, "import-config", work("gpt2_erf_hf", "config.json"), "-o", work("gpt2_erf.mlir")])
    run([mtckpt, "import-hf", work("gpt2_erf_hf"), "-o", work("gpt2_erf_ckpt")])
    mw = gpt2_in_mtc_layout(exact, {n: x.astype(np.float64) for n, x in weights.items()})
    losses, norms = {}, {}
    for form in (False, True):
        model = Model(layers=2, h=64, heads=4, vocab=VOCAB, rate=0.0, exact_gelu=form)
        grads = {n: np.zeros_like(x) for n, x in mw.items()}
        losses[form] = 0.0
        for mb in range(GLOBAL // MICRO):
            l, g = model.loss_and_gradients(mw, *batch_at(tokens, SEQ, SEED, mb * MICRO, MICRO),
                                            (SEED, 0, mb))
            losses[form] += l / (GLOBAL // MICRO)
            for n in grads:
                grads[n] += g[n] / (GLOBAL // MICRO)
        norms[form] = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
    for layout, ranks in (([], 1), (["--tp", "2", "--sp"], 2)):
        got_loss, got_norm = first_loss(f"gpt2_erf_{ranks}", work("gpt2_erf.mlir"),
                                        work("gpt2_erf_ckpt"), layout, ranks)
        check(f"gpt2 exact GELU first loss, {ranks} rank(s)", got_loss, losses[True], 1e-6)
        check(f"gpt2 exact GELU first gradient norm, {ranks} rank(s)", got_norm, norms[True], 1e-6)
    # The forms must differ by far more than the bound, or the checks above prove nothing.
    gap = abs(norms[True] - norms[False]) / norms[False]
    print(f"gpt2 reference gradient norms, exact and tanh GELU, differ by {gap:.1e}; losses by "
          f"{abs(losses[True] - losses[False]) / losses[False]:.1e}")
    if gap <= 1e-5:
        failures.append("exact and tanh GELU give nearly the same reference gradient norm")
    # Biases on the attention's projections: Qwen2's on q, k and v (fused by group, as their
    # weights are; split across ranks with them), LLaMA's attention_bias on o_proj too; and
    # Qwen3's normalised query and key heads (their weights about 1, drawn, so that a norm
    # missing or misplaced changes the loss); Mistral's sliding window, under context
    # parallelism too (its chunks of 4 under cp 2 · p2p: a window reaching into the chunk
    # before, and the other rank's); Phi-3's fused projections (split into mtc's tensors
    # and joined again on export) and its window.
    for arch, config in (("qwen2", QWEN2), ("llama_bias", LLAMA_BIAS), ("qwen3", QWEN3),
                         ("mistral", MISTRAL), ("qwen2_window", QWEN2_WINDOW), ("phi3", PHI3)):
        # The windows' weights from a generator of their own, leaving the draws of the
        # models after them as they were.
        windowed = arch in ("mistral", "qwen2_window", "phi3")
        round_trip(arch, config, llama_weights(config, np.random.default_rng(17) if windowed else rng))
        w = {n: decode(raw, dtype, shape).astype(np.float64)
             for n, (dtype, shape, raw) in read_directory(work(f"{arch}_BF16_hf")).items()}
        if arch == "phi3":
            w = phi3_split(config, w)
        mean_loss = lambda w, c=config: sum(
            llama_loss(c, w, *batch_at(tokens, SEQ, SEED, mb * MICRO, MICRO))
            for mb in range(GLOBAL // MICRO)) / (GLOBAL // MICRO)
        loss = mean_loss(w)
        # Without its biases the loss must differ by far more than the bound, or the checks
        # below prove nothing about them.
        if arch == "qwen3":  # the same weights, the heads not normalised
            what, plain = "the heads' norms", mean_loss(w, dict(config, architectures=["LlamaForCausalLM"]))
        elif arch in ("mistral", "qwen2_window", "phi3"):
            what, plain = "the window", mean_loss(w, dict(config, sliding_window=None))
        else:
            what, plain = "the biases", mean_loss({n: x for n, x in w.items() if not n.endswith(".bias")})
        print(f"{arch} reference losses with and without {what} differ by "
              f"{abs(loss - plain) / loss:.1e}")
        if abs(loss - plain) / loss <= 1e-4:
            failures.append(f"{arch}: {what} barely change the reference loss")
        layouts = [[], ["--tp", "2", "--sp"]]
        if arch == "mistral":
            layouts += [["--cp", "2"], ["--cp", "2", "--cp-comm-type", "p2p"],
                        ["--attention", "unfused"]]
        for i, layout in enumerate(layouts):
            ranks = 2 if "2" in layout else 1
            got_loss, _ = first_loss(f"{arch}_{i}", work(f"{arch}.mlir"),
                                     work(f"{arch}_BF16_ckpt"), layout, ranks)
            check(f"{arch} first loss, {' '.join(layout) or 'serial'}", got_loss, loss)

    # Qwen3-MoE: Qwen3's attention and a mixture in every layer (mlp.gate and each expert's
    # gate_proj, up_proj, down_proj stacked into one tensor and split again), its gates
    # renormalised over a token's top 2 (norm_topk_prob) and, the same weights, not
    # (mt.moe_router's pre_softmax); serially, under tp 2 · sp and under ep 2.
    round_trip("qwen3_moe", QWEN3_MOE, llama_weights(QWEN3_MOE, rng))
    w = {n: decode(raw, dtype, shape).astype(np.float64)
         for n, (dtype, shape, raw) in read_directory(work("qwen3_moe_BF16_hf")).items()}
    losses = {}
    for norm in (True, False):
        config = dict(QWEN3_MOE, norm_topk_prob=norm)
        losses[norm] = sum(llama_loss(config, w, *batch_at(tokens, SEQ, SEED, mb * MICRO, MICRO))
                           for mb in range(GLOBAL // MICRO)) / (GLOBAL // MICRO)
        model = work(f"qwen3_moe_{norm}.mlir")
        with open(work(f"qwen3_moe_{norm}.json"), "w") as f:
            json.dump(config, f)
        run([mtc, "import-config", work(f"qwen3_moe_{norm}.json"), "-o", model])
        for layout, ranks in (([], 1), (["--tp", "2", "--sp"], 2), (["--dp", "2", "--ep", "2"], 2)):
            got_loss, _ = first_loss(f"qwen3_moe_{norm}_{ranks}{len(layout)}", model,
                                     work("qwen3_moe_BF16_ckpt"), layout, ranks)
            check(f"qwen3_moe norm_topk_prob {norm} first loss, {' '.join(layout) or 'serial'}",
                  got_loss, losses[norm])
    gap = abs(losses[True] - losses[False]) / losses[True]
    print(f"qwen3_moe reference losses with and without norm_topk_prob differ by {gap:.1e}")
    if gap <= 1e-4:
        failures.append("qwen3_moe: norm_topk_prob barely changes the reference loss")

    if failures:
        sys.exit("Hugging Face interop differs: " + ", ".join(failures))
    print("all passed")


if __name__ == "__main__":
    main()
