#!/usr/bin/python3
"""The tables of bench/ckpt/compare.sh from its per-round JSON files.

  compare_table.py WORK ROUNDS LOAD_START LOAD_END EVERY CASE...   (CASE: config:layout)
Per column the median over the rounds; ratios are the median of the ratios within each round.
"""
import datetime
import json
import os
import statistics
import sys

work, rounds, load_start, load_end, every = sys.argv[1], int(sys.argv[2]), *sys.argv[3:6]
cases = [c.split(":", 1) for c in sys.argv[6:]]
MIB = 1024 * 1024


def read(r, name):
    with open(f"{work}/round{r}/{name}.json") as f:
        return json.load(f)


def ours_name(config, layout):
    return f"ours-{config}-" + layout.replace("=", "_").replace(",", "_")


def per_round(name, fn):
    return [fn(read(r, name), r) for r in range(1, rounds + 1)]


med = statistics.median
fio = per_round("fio", lambda j, r: j["write_mib_s"])
ringfs = per_round("ringfs", lambda j, r: j["write_mib_s"])

print()
print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} "
      f"cores, load average {load_start} at the start, {load_end} at the end; medians of "
      f"{rounds} rounds (each `ringtrain bench ckpt` figure itself a median of 3); fio "
      f"sequential write with end_fsync {med(fio):.0f} MiB/s, ringfs bench RF=1 write "
      f"{med(ringfs):.0f} MiB/s")
print()
print("| config, layout | state MiB (ours stored / torch files) | stall, save every "
      f"{every} steps | save POSIX s (MiB/s, of fio) | save ringfs s (MiB/s, of ringfs bench) | "
      "torch.save s | save vs torch.save | load s | torch.load s | load vs torch.load | "
      "into the other layout: re-shard load s / its own checkpoint's load s (ratio) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for config, layout in cases:
    ours = [read(r, ours_name(config, layout)) for r in range(1, rounds + 1)]
    torch = [read(r, f"torch-{config}") for r in range(1, rounds + 1)]
    posix = [o["targets"]["posix"] for o in ours]
    rfs = [o["targets"].get("ringfs") for o in ours]
    mib = posix[0]["bytes"] / MIB
    save_mibs = [p["bytes"] / MIB / p["save_s"] for p in posix]
    rfs_mibs = [p["bytes"] / MIB / p["save_s"] for p in rfs]
    stall = med([o["stall_pct"] for o in ours])
    step_ms = med([1e3 * o["step_s_without"] for o in ours])
    save_x = med([t["save_s"] / p["save_s"] for t, p in zip(torch, posix)])
    load_x = med([t["load_s"] / p["load_s"] for t, p in zip(torch, posix)])
    reshard_x = med([p["reshard_load_s"] / p["target_same_layout_load_s"] for p in posix])
    print(f"| {config.upper()}, {layout} → {ours[0]['reshard_to']} | {mib:.1f} / "
          f"{torch[0]['bytes'] / MIB:.1f} | {stall:+.1f}% of {step_ms:.0f} ms | "
          f"{med([p['save_s'] for p in posix]):.3f} ({med(save_mibs):.0f}, "
          f"{100 * med([a / b for a, b in zip(save_mibs, fio)]):.0f}%) | "
          f"{med([p['save_s'] for p in rfs]):.3f} ({med(rfs_mibs):.0f}, "
          f"{100 * med([a / b for a, b in zip(rfs_mibs, ringfs)]):.0f}%) | "
          f"{med([t['save_s'] for t in torch]):.3f} | {save_x:.2f}× | "
          f"{med([p['load_s'] for p in posix]):.3f} | {med([t['load_s'] for t in torch]):.3f} | "
          f"{load_x:.2f}× | {med([p['reshard_load_s'] for p in posix]):.3f} / "
          f"{med([p['target_same_layout_load_s'] for p in posix]):.3f} ({reshard_x:.2f}×) |")
print()
print("| config | codec | weights: raw MiB → ratio | Adam m, v: raw MiB → ratio | "
      "save MiB/s (raw) | load MiB/s (raw) |")
print("|---|---|---|---|---|---|")
for config, layout in cases:
    ours = [read(r, ours_name(config, layout)) for r in range(1, rounds + 1)]
    for i, c in enumerate(ours[0]["codecs"]):
        rows = [o["codecs"][i] for o in ours]
        print(f"| {config.upper()}, {layout} | {c['codec']} | {c['weights_raw'] / MIB:.1f} → "
              f"{c['weights_ratio']:.3f} | {c['adam_raw'] / MIB:.1f} → {c['adam_ratio']:.3f} | "
              f"{med([x['save_mib_s'] for x in rows]):.0f} | "
              f"{med([x['load_mib_s'] for x in rows]):.0f} |")
print()
print("Per round: fio MiB/s", "/".join(f"{x:.0f}" for x in fio), "· ringfs bench MiB/s",
      "/".join(f"{x:.0f}" for x in ringfs))
for config, layout in cases:
    ours = [read(r, ours_name(config, layout)) for r in range(1, rounds + 1)]
    print(f"Per round {config.upper()} {layout}: stall %",
          "/".join(f"{o['stall_pct']:.1f}" for o in ours),
          "· load average at the start of ours",
          "/".join(f"{o['load_avg_start']:.1f}" for o in ours))
