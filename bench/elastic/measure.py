#!/usr/bin/python3
"""One run's figures for bench/elastic/compare.sh, printed as one JSON line.

  measure.py SYSTEM SCENARIO KILL_T STAMPED LOG...

SYSTEM is "ours" or "torch"; KILL_T the Unix time just before the kill -9; STAMPED the step
lines as stamp.py printed them ("UNIX_TIME {json with step and generation}"); LOG the logs of
the survivors: ringtraind's (lines start "YYYY-mm-dd HH:MM:SS.mmm", local time) or
torchrun_logged.py's (lines start with the Unix time).
  - the generation killed: that of the last step line seen before KILL_T;
  - recover_s: from KILL_T to the first step line of any later generation (none: the job died
    or did not come back before compare.sh gave up; "died" is then true);
  - steps_lost: the newest step the killed generation completed minus the step the next one
    resumed from (its first step - 1);
  - detect_s: from KILL_T to the first survivor log line that names the failure (ours: a
    worker's exit or the membership's suspicion; torchrun: a failed worker or worker group);
  - step_s: the median time between the killed generation's step lines (its step time).
"""
import json
import re
import statistics
import sys
import time

DETECT = {
    "ours": re.compile(r"exited: |suspects node"),
    "torch": re.compile(r"failed \(exitcode|Worker group FAILED|RendezvousConnectionError"),
}
OURS_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\.(\d{3}) ")
TORCH_TIME = re.compile(r"^(\d{9,}\.\d+) ")


def read_steps(path):
    steps = []
    with open(path) as f:
        for line in f:
            stamp, _, text = line.partition(" ")
            try:
                j = json.loads(text)
            except json.JSONDecodeError:
                continue
            if "step" in j and "loss" in j:
                steps.append((float(stamp), str(j.get("generation", "")), int(j["step"])))
    return steps


def log_time(line):
    m = OURS_TIME.match(line)
    if m:
        return time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1e3
    m = TORCH_TIME.match(line)
    return float(m.group(1)) if m else None


def detection(system, kill_t, logs):
    # Log clocks have 1 ms resolution: a line of the same millisecond as the kill counts.
    first = None
    for path in logs:
        with open(path, errors="replace") as f:
            for line in f:
                t = log_time(line)
                if t is None or t < kill_t - 0.001 or not DETECT[system].search(line):
                    continue
                first = t if first is None else min(first, t)
    return None if first is None else max(0.0, first - kill_t)


def main():
    system, scenario, kill_t, stamped, *logs = sys.argv[1:]
    kill_t = float(kill_t)
    steps = read_steps(stamped)
    before = [s for s in steps if s[0] <= kill_t]
    if not before:
        sys.exit(f"measure.py: no step line before the kill in {stamped}")
    killed = before[-1][1]
    old = [s for s in steps if s[1] == killed]
    new = [s for s in steps if s[0] > kill_t and s[1] != killed]
    times = [s[0] for s in old if s[0] <= kill_t]
    gaps = [b - a for a, b in zip(times, times[1:])]
    out = {
        "system": system, "scenario": scenario, "kill_t": kill_t,
        "step_before": max(s[2] for s in old),
        "step_s": statistics.median(gaps) if gaps else None,
        "detect_s": detection(system, kill_t, logs),
        "died": not new,
        "recover_s": new[0][0] - kill_t if new else None,
        "steps_lost": max(s[2] for s in old) - (new[0][2] - 1) if new else None,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
