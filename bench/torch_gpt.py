#!/usr/bin/env python3
"""The PyTorch peer of an mtc model. --arch gpt: the same GPT (pre-LayerNorm blocks,
learned positions, tied embeddings, tanh GELU, dropout on embeddings and both residual
branches (--hidden-dropout, 0.1) and on attention probabilities (--attention-dropout,
0.1)). --arch llama: pre-RMSNorm blocks without biases, rotary positions, grouped-query
attention (--kv-heads), a SwiGLU MLP of --ffn, an untied output layer, no dropout.
On the GPU (default): bf16 autocast with f32 master weights, torch.compile,
scaled_dot_product_attention (flash), fused AdamW. --device cpu: f32, eager unless
--compile. Trains on random tokens and prints one JSON line: tokens/s over the timed
steps.

usage: torch_gpt.py --layers L --hidden H --heads A --vocab V --seq S --batch B [--steps N]
                   [--attention-dropout R] [--hidden-dropout R] [--device cuda|cpu]
                   [--compile|--eager] [--arch gpt|llama --kv-heads K --ffn F]
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, heads, dropout, attention_dropout):
        super().__init__()
        self.heads, self.dropout, self.attention_dropout = heads, dropout, attention_dropout
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc, self.out = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, self.heads, 3, h // self.heads).unbind(3)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True,
                                           dropout_p=self.attention_dropout if self.training else 0.0)
        x = x + F.dropout(self.proj(a.transpose(1, 2).reshape(b, s, h)), self.dropout, self.training)
        y = self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return x + F.dropout(y, self.dropout, self.training)


class LlamaBlock(nn.Module):
    def __init__(self, h, heads, kv_heads, ffn, seq):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, h // heads
        self.n1, self.n2 = nn.RMSNorm(h, eps=1e-5), nn.RMSNorm(h, eps=1e-5)
        self.qkv = nn.Linear(h, (heads + 2 * kv_heads) * self.d, bias=False)
        self.o = nn.Linear(h, h, bias=False)
        self.gate, self.up = nn.Linear(h, ffn, bias=False), nn.Linear(h, ffn, bias=False)
        self.down = nn.Linear(ffn, h, bias=False)
        angles = torch.outer(torch.arange(seq, dtype=torch.float32),
                             10000.0 ** (-torch.arange(0, self.d, 2, dtype=torch.float32) / self.d))
        self.register_buffer("cos", torch.cat([angles.cos()] * 2, -1), persistent=False)
        self.register_buffer("sin", torch.cat([angles.sin()] * 2, -1), persistent=False)

    def rotate(self, x):
        half = x.shape[-1] // 2
        turned = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * self.cos[: x.shape[2]] + turned * self.sin[: x.shape[2]]

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.n1(x)).split(
            [self.heads * self.d, self.kv_heads * self.d, self.kv_heads * self.d], -1)
        q = self.rotate(q.view(b, s, self.heads, self.d).transpose(1, 2))
        k = self.rotate(k.view(b, s, self.kv_heads, self.d).transpose(1, 2))
        v = v.view(b, s, self.kv_heads, self.d).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, h))
        n = self.n2(x)
        return x + self.down(F.silu(self.gate(n)) * self.up(n))


class Llama(nn.Module):
    def __init__(self, layers, h, heads, kv_heads, ffn, vocab, seq):
        super().__init__()
        self.embed = nn.Embedding(vocab, h)
        self.blocks = nn.ModuleList(LlamaBlock(h, heads, kv_heads, ffn, seq)
                                    for _ in range(layers))
        self.norm, self.head = nn.RMSNorm(h, eps=1e-5), nn.Linear(h, vocab, bias=False)

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


class Gpt(nn.Module):
    def __init__(self, layers, h, heads, vocab, seq, dropout=0.1, attention_dropout=0.1):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, h), nn.Embedding(seq, h)
        self.blocks = nn.ModuleList(Block(h, heads, dropout, attention_dropout)
                                    for _ in range(layers))
        self.ln = nn.LayerNorm(h)
        self.dropout = dropout

    def forward(self, tokens, targets):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1], device=tokens.device))
        x = F.dropout(x, self.dropout, self.training)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    for name in ("layers", "hidden", "heads", "vocab", "seq", "batch"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--attention-dropout", type=float, default=0.1)
    p.add_argument("--hidden-dropout", type=float, default=0.1)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile (default: on the GPU only)")
    p.add_argument("--arch", choices=("gpt", "llama"), default="gpt")
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--ffn", type=int)
    a = p.parse_args()
    gpu = a.device == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    if a.arch == "gpt":
        model = Gpt(a.layers, a.hidden, a.heads, a.vocab, a.seq, a.hidden_dropout,
                    a.attention_dropout)
    else:
        model = Llama(a.layers, a.hidden, a.heads, a.kv_heads or a.heads, a.ffn or 4 * a.hidden,
                      a.vocab, a.seq)
    for name, w in model.named_parameters():  # as mtc initialises: N(0, 0.02), norms at 1
        if w.dim() > 1:
            nn.init.normal_(w, std=0.02)
        elif "bias" in name:
            nn.init.zeros_(w)
    model = model.to(a.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=gpu)
    step = torch.compile(model) if (gpu if a.compile is None else a.compile) else model
    g = torch.Generator(device=a.device).manual_seed(0)
    sync = torch.cuda.synchronize if gpu else (lambda: None)

    def train_step():
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq), device=a.device, generator=g)
        targets = torch.randint(0, a.vocab, (a.batch, a.seq), device=a.device, generator=g)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=gpu):
            loss = step(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    for _ in range(a.warmup):
        train_step()
    sync()
    started = time.time()
    for _ in range(a.steps):
        loss = train_step()
    sync()
    seconds = time.time() - started
    print(json.dumps({"tokens_per_second": a.steps * a.batch * a.seq / seconds,
                      "loss": float(loss.detach()), "threads": torch.get_num_threads(),
                      "peak_bytes": torch.cuda.max_memory_allocated() if gpu else None}))


if __name__ == "__main__":
    main()
