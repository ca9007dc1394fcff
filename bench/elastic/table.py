#!/usr/bin/python3
"""The markdown table of bench/elastic/compare.sh from its runs' result.json files.

  table.py RUNS_DIR LOAD_START LOAD_END
Per scenario and system the median over the runs (runs where the job died are counted, not
averaged); "vs torchrun" is torchrun's median recovery over ours; the targets are issue 13's.
"""
import datetime
import json
import os
import statistics
import sys
from pathlib import Path

SCENARIOS = [("worker", "kill -9 a worker", 2.0),
             ("node", "kill -9 a node (daemon/agent + its workers)", 5.0),
             ("leader", "kill -9 the store node / last view leader", 5.0)]
NAMES = {"ours": "ringtraind", "torch": "torchrun"}


def fmt(values, unit="s", digits=2):
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    med = statistics.median(values)
    spread = f" ({min(values):.{digits}f}–{max(values):.{digits}f})" if len(values) > 1 else ""
    return f"{med:.{digits}f}{unit}{spread}"


def main():
    runs_dir, load_start, load_end = sys.argv[1:4]
    results = [json.loads(p.read_text()) for p in sorted(Path(runs_dir).glob("*/result.json"))
               if p.stat().st_size > 0]
    reps = max([int(p.parent.name.rsplit("-", 1)[1])
                for p in Path(runs_dir).glob("*/result.json")] or [0])
    print()
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
          f"{os.cpu_count()} cores, load average {load_start} at the start, {load_end} at the "
          f"end; medians (min–max) of {reps} run(s) per cell")
    print()
    print("| scenario | system | kill → first step after recovery | detection | steps lost | "
          "job died | step time | vs torchrun | target |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, title, target in SCENARIOS:
        cell = {s: [r for r in results if r["scenario"] == key and r["system"] == s]
                for s in NAMES}
        if not any(cell.values()):
            continue
        recover = {s: [r["recover_s"] for r in rs if not r["died"]] for s, rs in cell.items()}
        for system, rs in cell.items():
            if not rs:
                continue
            died = sum(r["died"] for r in rs)
            ratio = verdict = ""
            if system == "ours":
                ours = statistics.median(recover["ours"]) if recover["ours"] else None
                theirs = statistics.median(recover["torch"]) if recover["torch"] else None
                if ours and theirs:
                    ratio = f"{theirs / ours:.1f}× faster"
                elif ours and cell["torch"] and not recover["torch"]:
                    ratio = "torchrun's job died"
                lost = [r["steps_lost"] for r in rs if r["steps_lost"] is not None]
                met = (ours is not None and ours <= target and lost and max(lost) <= 1
                       and (not theirs or theirs / ours >= 4))
                verdict = (f"≤ {target:.0f} s, ≤ 1 step, ≥ 4×: "
                           + ("met" if met else "**not met**"))
            print(f"| {title} | {NAMES[system]} | {fmt(recover[system])} | "
                  f"{fmt([r['detect_s'] for r in rs])} | "
                  f"{fmt([r['steps_lost'] for r in rs], unit='', digits=0)} | "
                  f"{died}/{len(rs)} | {fmt([r['step_s'] for r in rs], digits=3)} | "
                  f"{ratio} | {verdict} |")


if __name__ == "__main__":
    main()
