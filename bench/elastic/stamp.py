#!/usr/bin/python3
"""Follows a file of step lines (a metrics JSONL file that another process appends to, from its
start, also before it exists) and prints each complete line prefixed by the Unix time at which
it was seen: "1764214826.123 {...}". Polls every 2 ms; runs until killed.

  stamp.py FILE > STAMPED
"""
import sys
import time

POLL_S = 0.002


def main():
    path = sys.argv[1]
    while True:
        try:
            f = open(path)
            break
        except FileNotFoundError:
            time.sleep(POLL_S)
    pending = ""
    while True:
        chunk = f.readline()
        if not chunk:
            time.sleep(POLL_S)
            continue
        pending += chunk
        if pending.endswith("\n"):
            sys.stdout.write(f"{time.time():.3f} {pending}")
            sys.stdout.flush()
            pending = ""


if __name__ == "__main__":
    main()
