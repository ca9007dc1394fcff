#!/usr/bin/python3
"""PyTorch anchor for `ringtrain bench ckpt`: what a torchrun user does to checkpoint.

RANKS gloo processes (data parallel, the same GPT-2 as bench/step/train_step_torch.py) each take
one AdamW step so the optimizer holds its moments, then each rank writes its model and optimizer
state with torch.save to its own file in DIR, blocking, and makes it durable (fsync of the file
and of DIR: our checkpoints are durable when a save returns, so the anchor pays the same); then
each rank reads its file back with torch.load and loads it into the model and the optimizer.
A round's time is the slowest rank's, between barriers. Prints one JSON line: medians over the
rounds of save_s and load_s, and the bytes written per round. Debian's torch 1.13 has no usable
Distributed Checkpoint on Python 3.11 (its prototype fails to import), so this is the anchor.
  usage: ckpt_torch.py --config m --ranks 2 --dir /tmp/x [--rounds 5] [--threads 1]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "step"))
from train_step_torch import Gpt  # noqa: E402  (the same model as the step benchmark)


def durable_save(obj, path):
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def timed(fn):
    dist.barrier()
    start = time.perf_counter()
    fn()
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return elapsed.item()


def worker(rank, args, store_file):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank,
                            world_size=args.ranks)
    cfg = tomllib.loads(args.config_path.read_text())
    m, tr = cfg["model"], cfg["train"]
    L, C, H, T = m["n_layer"], m["n_embd"], m["n_head"], m["seq_len"]
    V, B = m.get("vocab_size", 256), tr.get("batch_size", 8)
    torch.manual_seed(1337)
    model = Gpt(L, C, H, T, V)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    data = torch.randint(0, V, (B, T + 1))
    model(data[:, :-1], data[:, 1:]).backward()
    for p in model.parameters():  # data parallel: the gradients are averaged over the ranks
        dist.all_reduce(p.grad)
        p.grad /= args.ranks
    optimizer.step()

    path = os.path.join(args.dir, f"rank{rank}.pt")
    saves, loads = [], []
    for _ in range(args.rounds):
        saves.append(timed(lambda: durable_save(
            {"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)))

        def load():
            state = torch.load(path, map_location="cpu")
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])

        loads.append(timed(load))
    size = torch.tensor([os.path.getsize(path)], dtype=torch.int64)
    dist.all_reduce(size)
    if rank == 0:
        print(json.dumps({"ranks": args.ranks, "save_s": statistics.median(saves),
                          "load_s": statistics.median(loads), "bytes": size.item(),
                          "rounds": args.rounds}), flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="m", help="s, m, tiny or a TOML file")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--dir", required=True, help="folder for the checkpoint files")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    path = Path(args.config)
    if not path.exists():
        path = ROOT / "configs" / f"{args.config}.toml"
    args.config_path = path
    os.makedirs(args.dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(args, os.path.join(tmp, "store")), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
