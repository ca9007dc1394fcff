#!/usr/bin/python3
"""PyTorch anchor for `ringtrain bench step`: the same GPT-2 (DESIGN.md), trained the same way.

Pre-LN blocks with a fused qkv Linear, causal attention scaled by 1/sqrt(C/H), GELU (tanh), MLP
C->4C->C, final LayerNorm, logits through the tied wte; LayerNorm eps 1e-5; init normal(0, 0.02),
output projections normal(0, 0.02/sqrt(2L)); AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1
on 2-D weights only), global-norm clipping at 1.0, fp32 (no TF32 on CUDA), random tokens.
Prints one JSON line. Run with Debian's python3-torch: /usr/bin/python3 train_step_torch.py
--config s --threads 1; on a GPU (a CUDA build of torch) add --device cuda.
"""
import argparse
import json
import math
import resource
import statistics
import time
import tomllib
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H, T):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.H))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, L, C, H, T, V):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H, T) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L))
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln_" in name:
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="s", help="s, m, tiny or a TOML file")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = ap.parse_args()
    path = Path(args.config)
    if not path.exists():
        path = Path(__file__).resolve().parents[2] / "configs" / f"{args.config}.toml"
    cfg = tomllib.loads(path.read_text())
    m, tr, opt = cfg["model"], cfg["train"], cfg.get("optim", {})
    L, C, H, T = m["n_layer"], m["n_embd"], m["n_head"], m["seq_len"]
    V, B = m.get("vocab_size", 256), tr.get("batch_size", 8)

    torch.set_num_threads(args.threads)
    torch.manual_seed(1337)
    # fp32 means fp32 on the GPU too, as in ringtrain's cuBLASLt calls (CUBLAS_COMPUTE_32F).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device(args.device)
    model = Gpt(L, C, H, T, V).to(device)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": opt.get("weight_decay", 0.1)},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=opt.get("lr", 1e-3), betas=(0.9, 0.95), eps=1e-8)
    data = torch.randint(0, V, (args.warmup + args.steps, B, T + 1)).to(device)

    def wait():  # the step's optimizer kernels are only enqueued on a GPU
        if device.type == "cuda":
            torch.cuda.synchronize()

    def step(i):
        x, y = data[i, :, :-1], data[i, :, 1:]
        loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss.item()

    for i in range(args.warmup):
        step(i)
    wait()
    times = []
    for i in range(args.warmup, args.warmup + args.steps):
        start = time.perf_counter()
        loss = step(i)
        wait()
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)  # as ringtrain: a busy machine's spikes stay out
    n_params = sum(p.numel() for p in model.parameters()) - T * C
    flops_per_token = 6 * n_params + 12 * L * C * T
    tokens_per_s = B * T / seconds
    print(json.dumps({
        "impl": "pytorch", "torch": torch.__version__, "config": args.config,
        "device": args.device,
        "threads": args.threads, "tokens_per_s": tokens_per_s,
        "gflops": tokens_per_s * flops_per_token / 1e9, "last_loss": loss,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))


if __name__ == "__main__":
    main()
