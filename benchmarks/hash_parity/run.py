"""Hashed trials of every suite algorithm on its default and non-default code paths, for a refactor that claims to
move no result (issue 54: specifications apart from their accelerators).

``run`` trains the studies beside this file (``hash-*.toml``) into one results database with the checkout's own
``suite run`` and writes one row per trial with its key, config hash, outcome hash and parameter hash
(:mod:`suite.regress.records`); ``compare`` says which rows of two such tables differ. ``suite regress BASE HEAD
--study benchmarks/hash_parity/hash-defaults.toml ...`` makes the same comparison and also gates speed and memory.

    python benchmarks/hash_parity/run.py run --out /tmp/hashes-main
    python benchmarks/hash_parity/run.py compare /tmp/hashes-main/hashes.csv /tmp/hashes-head/hashes.csv
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from suite.regress.records import load_slot  # noqa: E402

COLUMNS = ["algo", "algo_version", "env_label", "config_hash", "key", "status", "steps", "final_return", "result_hash",
           "param_hash"]  # fmt: skip


def run(out: Path, studies: list[Path], workers: int) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    db = out / "suite.db"
    for study in studies:
        argv = [sys.executable, "-m", "suite.cli", "run", str(study), "--db", str(db), "--workers", str(workers),
                "--no-report", "--quiet"]  # fmt: skip
        print("+", " ".join(argv[2:]), flush=True)
        subprocess.run(argv, cwd=REPO, check=True)
    frame = load_slot(db, "run", 0)[COLUMNS].sort_values(["algo", "env_label", "key"])
    path = out / "hashes.csv"
    frame.to_csv(path, index=False)
    print(f"{len(frame)} trials -> {path}")
    return path


def compare(a: Path, b: Path) -> int:
    left, right = pd.read_csv(a, dtype=str), pd.read_csv(b, dtype=str)
    both = left.merge(right, on="key", how="outer", suffixes=("_a", "_b"), indicator=True)
    missing = both[both["_merge"] != "both"]
    same = both[both["_merge"] == "both"]
    differ = same[(same["result_hash_a"] != same["result_hash_b"]) | (same["param_hash_a"] != same["param_hash_b"])]
    failed = same[(same["status_a"] != "ok") | (same["status_b"] != "ok")]
    for r in differ.itertuples():
        print(f"DIFFERENT {r.algo_a} {r.env_label_a} {r.key}: returns {r.final_return_a} -> {r.final_return_b}")
    for r in missing.itertuples():
        print(f"ONLY IN ONE {r.key} ({r._asdict()['_merge']})")
    for r in failed.itertuples():
        print(f"NOT OK {r.algo_a} {r.env_label_a} {r.key}: {r.status_a} / {r.status_b}")
    print(f"{len(same)} trials in both, {len(same) - len(differ)} identical (outcome and parameters), "
          f"{len(differ)} different, {len(missing)} in one table only, {len(failed)} not ok")  # fmt: skip
    return 1 if len(differ) or len(missing) or len(failed) else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--study", type=Path, action="append", help="default: every hash-*.toml beside this file")
    r.add_argument("--workers", type=int, default=1)
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.cmd == "run":
        run(args.out, args.study or sorted(HERE.glob("hash-*.toml")), args.workers)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    raise SystemExit(main())
