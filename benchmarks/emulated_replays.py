"""Replay every trial of the portable hash set on an emulated CPU (issue 57), one trial at a time, resumable.

``tests/test_kernels.py`` replays only a cheap subset under ``qemu-user`` (emulating one trial takes minutes). This
script replays all of ``results/portable/hashes.json`` (and ``hashes-sb3.json``) under ``qemu-x86_64 -cpu CPU``, each
trial in its own emulated process (``benchmarks/portable_hashes.py --in-process``, started with the portable
variables), and appends one JSON line per trial to ``results/portable/emulated-replays.jsonl``: the key, the hashes
made and replayed, whether they are equal, the seconds it took, the load at its end and the command. A trial already
in the file (same key, same emulated CPU) is skipped, so an interrupted run resumes where it stopped.

    nohup nice -n 10 python benchmarks/emulated_replays.py > /tmp/replays.log 2>&1 &
    python benchmarks/emulated_replays.py --cpu Haswell-v4 --summary        # what the file holds

QEMU computes ``rcpps``/``rsqrtps`` exactly where a real CPU approximates (Intel's and AMD's differently), and
the x87 transcendentals (``fsin``, ``fpatan``...) by its own software: an equal replay proves a real AVX2 CPU's bits
only for a trial that runs none of them. ``--scan`` shows which trials those are: it has QEMU log every block of
guest code it translates (``-d in_asm``, through a pipe) and counts these instructions in it (:data:`CPU_DEPENDENT`);
the line records the counts (``cpu_dependent_insns``, empty when the trial ran none). A block is translated before it
first runs, so the log holds every instruction the trial ran: none in it means none ran.

    nohup nice -n 19 python benchmarks/emulated_replays.py --scan > /tmp/scan.log 2>&1 &
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

OUT = REPO / "results" / "portable" / "emulated-replays.jsonl"
SETS = (REPO / "results" / "portable" / "hashes.json", REPO / "results" / "portable" / "hashes-sb3.json")
ENV_COST = {"CartPole-v1": 0, "TextMatch-v0": 1, "LunarLander-v3": 2, "Hopper-v5": 3, "ALE/Pong-v5": 4}
"""Order of the replays: the cheapest envs under emulation first, so an interrupted run has covered the most trials."""


CPU_DEPENDENT = ("rcpps", "rcpss", "rsqrtps", "rsqrtss", "vrcpps", "vrcpss", "vrsqrtps", "vrsqrtss",
                 "fsin", "fcos", "fsincos", "fptan", "fpatan", "f2xm1", "fyl2x", "fyl2xp1")  # fmt: skip
"""The x86-64 instructions of an AVX2 + FMA CPU whose results are not fixed by IEEE 754, so differ between real CPUs
and QEMU: the approximate reciprocals and square-root reciprocals (their v-forms are AVX's; the AVX-512 ``rcp14`` ones
are not in the baseline) and the x87 transcendentals. Every other floating-point instruction of the baseline rounds
as IEEE 754 says (FMA included), on any CPU and under QEMU."""


def run_scanned(
    argv: list[str], env: dict[str, str], cwd: Path = REPO
) -> tuple[subprocess.CompletedProcess[str], dict[str, int]]:
    """Run ``argv`` (a ``qemu-x86_64 -cpu CPU program ...`` command line) with QEMU logging the guest code it
    translates to a pipe, and count the :data:`CPU_DEPENDENT` instructions in that log (a mnemonic that never
    appears is left out: ``{}`` means the run translated none). ``grep`` reads the pipe, so the log is never
    stored."""
    pattern = r"\b(" + "|".join(CPU_DEPENDENT) + r")\b"
    with tempfile.TemporaryDirectory(prefix="qemu-asm-") as tmp:
        fifo, found = Path(tmp) / "in_asm", Path(tmp) / "found"
        os.mkfifo(fifo)
        # This process holds the pipe open for writing while QEMU runs, so grep reads to the end of QEMU's log
        # however early QEMU stops, and sees the end of the pipe when this process lets go after it.
        r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        w = os.open(fifo, os.O_WRONLY)
        os.set_blocking(r, True)
        with found.open("w") as sink:
            grep = subprocess.Popen(["grep", "-E", "-o", pattern], stdin=r, stdout=sink)
        os.close(r)
        try:
            out = subprocess.run([argv[0], "-d", "in_asm", "-D", str(fifo), *argv[1:]], env=env, capture_output=True,
                                 text=True, cwd=cwd)  # fmt: skip
        finally:
            os.close(w)
            grep.wait()
        counts = Counter(found.read_text().split())
    return out, dict(sorted(counts.items()))


def trials(sets: tuple[Path, ...] = SETS) -> list[tuple[Path, dict[str, Any]]]:
    """Every trial of the committed hash sets, cheapest env first, with the set file it comes from."""
    out = []
    for path in sets:
        if path.exists():
            data = json.loads(path.read_text())
            out += [(path, t) for t in data["trials"]]
    return sorted(out, key=lambda pt: (ENV_COST.get(pt[1]["env_label"], 9), pt[1]["algo"]))


def latest(cpu: str) -> dict[str, dict[str, Any]]:
    """The last line of each trial replayed under ``cpu`` (a replay that stopped with an error is run again, and its
    line stays in the file)."""
    if not OUT.exists():
        return {}
    return {r["key"]: r for r in map(json.loads, OUT.read_text().splitlines()) if r.get("emulated_cpu") == cpu}


def done(cpu: str, scan: bool = False) -> set[str]:
    """Trials whose replay under ``cpu`` ran to the end (equal or not); with ``scan``, only those whose last replay was
    scanned for the CPU-dependent instructions."""
    return {
        key
        for key, r in latest(cpu).items()
        if r.get("replayed_status", "ok") == "ok"
        and r.get("replayed_param_hash")
        and not r.get("error")
        and (not scan or "cpu_dependent_insns" in r)
    }


def replay(path: Path, trial: dict[str, Any], cpu: str, scan: bool = False) -> dict[str, Any]:
    from suite import kernels

    data = json.loads(path.read_text())
    study = REPO / data["study"]
    argv = ["qemu-x86_64", "-cpu", cpu, sys.executable, str(HERE / "portable_hashes.py"), "--study", str(study),
            "--in-process", trial["algo"], trial["env_label"]]  # fmt: skip
    started = time.monotonic()
    env = {**os.environ, **kernels.environ("portable")}
    if scan:
        out, insns = run_scanned(argv, env)
    else:
        out = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=REPO)
    seconds = round(time.monotonic() - started, 1)
    row: dict[str, Any] = {
        "algo": trial["algo"],
        "env_label": trial["env_label"],
        "key": trial["key"],
        "emulated_cpu": cpu,
        "made_result_hash": trial["result_hash"],
        "made_param_hash": trial["param_hash"],
    }
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        row.update(replayed_result_hash=None, replayed_param_hash=None, equal=False, error=tail)
    else:
        got = json.loads(out.stdout.strip().splitlines()[-1])
        row.update(
            replayed_status=got["status"],
            replayed_result_hash=got["result_hash"],
            replayed_param_hash=got["param_hash"],
            final_return=got["final_return"],
            equal=(got["result_hash"], got["param_hash"]) == (trial["result_hash"], trial["param_hash"]),
        )
        if got.get("error"):
            row["error"] = got["error"]
        if scan:
            row["cpu_dependent_insns"] = insns
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True)
    row.update(
        seconds=seconds,
        load=round(os.getloadavg()[0], 1),
        set=str(path.relative_to(REPO)),
        commit=commit.stdout.strip(),
        date=datetime.now(UTC).isoformat(timespec="seconds"),
        command=" ".join(
            [
                "qemu-x86_64",
                "-cpu",
                cpu,
                "python",
                "benchmarks/portable_hashes.py",
                "--study",
                str(study.relative_to(REPO)),
                "--in-process",
                trial["algo"],
                trial["env_label"],
            ]
        ),  # fmt: skip
    )
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", default="Haswell-v4", help="the CPU qemu emulates (default Haswell-v4: Intel, AVX2, FMA)")
    ap.add_argument("--summary", action="store_true", help="print what the results file holds for --cpu and stop")
    ap.add_argument("--only", type=Path, action="append", help="replay only this set file (repeatable)")
    ap.add_argument("--trial", nargs=2, metavar=("ALGO", "ENV"), help="replay only this trial of the sets")
    ap.add_argument("--scan", action="store_true", help="count the CPU-dependent instructions each replay translates "
                    "(a trial replayed before without it is replayed again)")  # fmt: skip
    args = ap.parse_args()
    if args.summary:
        rows = list(latest(args.cpu).values())
        total = len(trials())
        equal = sum(r["equal"] for r in rows)
        print(f"{len(rows)} of {total} trials replayed under qemu -cpu {args.cpu}: {equal} equal")
        for r in rows:
            if not r["equal"]:
                print(f"  differs: {r['algo']} {r['env_label']} {r.get('error', '')}")
        scanned = [r for r in rows if "cpu_dependent_insns" in r]
        ran = [r for r in scanned if r["cpu_dependent_insns"]]
        print(f"{len(scanned)} scanned for CPU-dependent instructions: {len(ran)} translated some")
        for r in ran:
            print(f"  {r['algo']} {r['env_label']}: {r['cpu_dependent_insns']}")
        return 0
    for path, trial in trials(tuple(p.resolve() for p in args.only) if args.only else SETS):
        if trial["key"] in done(args.cpu, args.scan) or (args.trial and [trial["algo"], trial["env_label"]] != args.trial):
            continue
        row = replay(path, trial, args.cpu, args.scan)
        with OUT.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        insns = f", CPU-dependent instructions: {row['cpu_dependent_insns'] or 'none'}" if args.scan else ""
        print(f"{row['algo']} {row['env_label']}: {'equal' if row['equal'] else 'DIFFERS'} ({row['seconds']} s{insns})",
              flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
