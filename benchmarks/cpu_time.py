"""Run a command and report its wall time and the CPU time of its whole process tree.

On a shared machine the wall time of a study says more about the other jobs than about the study; the CPU time
(user + system) of every process it starts does not. ``resource.getrusage(RUSAGE_CHILDREN)`` misses the trial
processes (they are children of the executor's forkserver, which is never waited for), so this samples the tree
with psutil every 0.1 s and keeps each process's last reading (a process's final < 0.1 s can be missed).

Usage: ``python benchmarks/cpu_time.py suite run examples/reinforce/study.toml``
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

SAMPLE_S = 0.1


def main(argv: list[str]) -> int:
    t0 = time.monotonic()
    proc = subprocess.Popen(argv)
    root = psutil.Process(proc.pid)
    cpu: dict[tuple[int, float], float] = {}
    loads: list[float] = []
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            tree = []
        for p in tree:
            try:
                times = p.cpu_times()
                cpu[(p.pid, p.create_time())] = times.user + times.system
            except psutil.Error:
                pass
        loads.append(os.getloadavg()[0])
        time.sleep(SAMPLE_S)
    wall = time.monotonic() - t0
    load = sum(loads) / len(loads) if loads else float("nan")
    print(
        f"exit {proc.returncode}; wall {wall:.1f} s; CPU (user+sys, all processes) {sum(cpu.values()):.1f} s; "
        f"processes {len(cpu)}; 1-min load average, mean over the run {load:.2f} on {os.cpu_count()} CPUs",
        file=sys.stderr,
    )
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
