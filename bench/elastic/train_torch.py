#!/usr/bin/python3
"""torchrun's side of bench/elastic/compare.sh: one worker of an elastic DDP job (gloo, CPU).

The model of bench/step/train_step_torch.py (DESIGN.md's GPT-2) at config tiny, trained on the
byte tokens of `ringtrain data prepare` (docs/formats/tokens.md). The global batch stays
--batch rows at every world size (each rank takes batch / world). Fault tolerance the way
torchrun's documentation asks for it: rank 0 saves model, optimizer and step after every step
(torch.save to a temporary file, then an atomic rename: at most one step is lost, like
ringtrain's memory tier with ckpt.memory_every = 1), and every worker loads that file when
(re)started. Rank 0 appends one JSON line per step to --metrics: step, loss, world size and
the pid of rank 0 as the generation (one per start of the worker group: an agent that restarts its group for a new node keeps its restart count). --min-step-s pads each step
to a given duration (sleeping the rest) so both systems run at the same step time.

  torchrun ... bench/elastic/train_torch.py --data DIR --ckpt FILE --metrics FILE
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional  # noqa: F401 (Gpt uses it)
from torch.nn.parallel import DistributedDataParallel

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "step"))
from train_step_torch import Gpt  # noqa: E402

HEADER_BYTES = 32  # docs/formats/tokens.md


def load_tokens(path):
    raw = Path(path).read_bytes()
    if raw[:8] != b"RTTOKENS":
        sys.exit(f"{path}: not a token shard (docs/formats/tokens.md)")
    return torch.from_numpy(np.frombuffer(raw, dtype="<u2", offset=HEADER_BYTES).astype(np.int64))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="folder with train_000.bin")
    ap.add_argument("--ckpt", required=True, help="the checkpoint file rank 0 rewrites per step")
    ap.add_argument("--metrics", required=True, help="rank 0 appends one JSON line per step")
    ap.add_argument("--batch", type=int, default=32, help="global batch (rows)")
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--min-step-s", type=float, default=0.0)
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(1337)
    L, C, H, T, V = 2, 64, 4, 32, 256  # configs/tiny.toml
    model = Gpt(L, C, H, T, V)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    step = 0
    if os.path.exists(args.ckpt):
        state = torch.load(args.ckpt)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    # gloo cannot broadcast the bool attention masks; they are constant anyway.
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
        model, [f"h.{i}.mask" for i in range(L)])
    ddp = DistributedDataParallel(model)
    tokens = load_tokens(Path(args.data) / "train_000.bin")
    rows = args.batch // world
    gen = torch.Generator().manual_seed(1337)
    metrics = open(args.metrics, "a") if rank == 0 else None
    while step < args.steps:
        start = time.monotonic()
        gen.manual_seed(1337 + step)  # the batch depends on the step only, not on the world
        offsets = torch.randint(0, len(tokens) - T - 1, (args.batch,), generator=gen)
        mine = offsets[rank * rows:(rank + 1) * rows]
        window = torch.stack([tokens[o:o + T + 1] for o in mine.tolist()])
        loss = ddp(window[:, :-1], window[:, 1:])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        if rank == 0:
            tmp = args.ckpt + ".tmp"
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "step": step}, tmp)
            os.replace(tmp, args.ckpt)
            metrics.write(json.dumps({"step": step, "loss": loss.item(), "world": world,
                                      "generation": str(os.getpid())}) + "\n")
            metrics.flush()
        rest = args.min_step_s - (time.monotonic() - start)
        if rest > 0:
            time.sleep(rest)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
