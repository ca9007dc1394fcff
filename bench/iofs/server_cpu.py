#!/usr/bin/env python3
"""Server CPU seconds per GiB written by `ringfs bench` (user + system time of the ringfsd
processes from /proc/PID/stat, taken just before the write starts and when it reports), for RF=1
(one embedded ringfsd) and RF=2 (two ringfsd on loopback, as compare.sh runs them): the cost of
the write path independent of how busy the machine is.

    bench/iofs/server_cpu.py BUILD_DIR WORK_DIR [SIZE_MIB (2048)] [rf1|rf2|both]
"""
import os
import shutil
import socket
import subprocess
import sys
import time

build, work = sys.argv[1], sys.argv[2]
size = int(sys.argv[3]) if len(sys.argv) > 3 else 2048
which = sys.argv[4] if len(sys.argv) > 4 else "both"
ticks = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / ticks


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def measure(servers, port):
    time.sleep(1.0)  # the servers start
    before = [cpu_seconds(s.pid) for s in servers]
    bench = subprocess.Popen([f"{build}/tools/ringfs/ringfs", "--server", f"127.0.0.1:{port}", "--parallel", "16",
                              "bench", "--size-mib", str(size), "--random-reads", "0"],
                             stdout=subprocess.PIPE, text=True)
    after, line = None, ""
    for line in bench.stdout:
        if line.startswith("write"):
            after = [cpu_seconds(s.pid) for s in servers]
            break
    bench.kill()
    bench.wait()
    for s in servers:
        s.kill()
        s.wait()
    if after is None:
        sys.exit(f"ringfs bench did not report a write (logs in {work})")
    return line.strip(), [(a - b) / (size / 1024) for a, b in zip(after, before)]


shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
ringfsd = f"{build}/tools/ringfsd/ringfsd"
if which in ("rf1", "both"):
    (p,) = free_ports(1)
    s = subprocess.Popen([ringfsd, "--state", f"{work}/rf1", "--port", str(p), "--log-level", "warn"],
                         stderr=open(f"{work}/rf1.log", "w"))
    line, per = measure([s], p)
    print(f"RF=1 {line} | server CPU-s/GiB {sum(per):.3f}", flush=True)
    shutil.rmtree(f"{work}/rf1", ignore_errors=True)
if which in ("rf2", "both"):
    p1, p2 = free_ports(2)
    servers = []
    for n in (1, 2):
        with open(f"{work}/node{n}.toml", "w") as f:
            f.write(f'[node]\nid = {n}\nstate = "{work}/rf2-node{n}"\n[cluster]\n'
                    f'nodes = "1@127.0.0.1:{p1},2@127.0.0.1:{p2}"\nreplication = 2\nchains = 8\n')
        servers.append(subprocess.Popen([ringfsd, "--config", f"{work}/node{n}.toml", "--log-level", "warn"],
                                        stderr=open(f"{work}/rf2-node{n}.log", "w")))
    line, per = measure(servers, p1)
    print(f"RF=2 {line} | server CPU-s/GiB {sum(per):.3f} (node 1 {per[0]:.3f}, node 2 {per[1]:.3f})", flush=True)
shutil.rmtree(work, ignore_errors=True)
