#!/usr/bin/env python3
"""The PyTorch peer of an mtc model: the same GPT (pre-LayerNorm blocks, learned
positions, tied embeddings, tanh GELU, dropout on embeddings and both residual
branches (--hidden-dropout, 0.1) and on attention probabilities (--attention-dropout,
0.1)), bf16 autocast with f32 master weights,
torch.compile, scaled_dot_product_attention (flash), fused AdamW. Trains on random
tokens and prints one JSON line: tokens/s over the timed steps.

usage: torch_gpt.py --layers L --hidden H --heads A --vocab V --seq S --batch B [--steps N]
                   [--attention-dropout R] [--hidden-dropout R]
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
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    model = Gpt(a.layers, a.hidden, a.heads, a.vocab, a.seq, a.hidden_dropout,
                a.attention_dropout).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    step = torch.compile(model)
    g = torch.Generator(device="cuda").manual_seed(0)

    def train_step():
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda", generator=g)
        targets = torch.randint(0, a.vocab, (a.batch, a.seq), device="cuda", generator=g)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    for _ in range(a.warmup):
        train_step()
    torch.cuda.synchronize()
    started = time.time()
    for _ in range(a.steps):
        loss = train_step()
    torch.cuda.synchronize()
    seconds = time.time() - started
    print(json.dumps({"tokens_per_second": a.steps * a.batch * a.seq / seconds,
                      "loss": float(loss), "peak_bytes": torch.cuda.max_memory_allocated()}))


if __name__ == "__main__":
    main()
