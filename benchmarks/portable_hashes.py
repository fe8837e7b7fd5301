"""The portable hash set (issue 57): outcome and parameter hashes of a fixed set of portable trials, with the CPU
that made them, so that any machine can check it computes the same bits (tests/test_kernels.py replays the set).

``results/portable/study.toml`` names the trials (every suite algorithm and sb3-ppo on five envs, CI-sized,
``kernels = "portable"``); this script runs them with the checkout's own ``suite run`` into a scratch database, hashes
each record as ``suite regress`` does (:mod:`suite.regress.records`: the outcome hash over the curve and evaluations,
the parameter hash over the saved policy) and writes ``results/portable/hashes.json``.

    python benchmarks/portable_hashes.py                  # (re)write results/portable/hashes.json
    python benchmarks/portable_hashes.py --check          # replay here and compare with the committed set
    python benchmarks/portable_hashes.py --kernels native --out /tmp/native.json   # the same trials, native
    qemu-x86_64 -cpu Haswell-v4 python benchmarks/portable_hashes.py --in-process ppo CartPole-v1   # one, emulated
    python benchmarks/portable_hashes.py --study results/portable/study-sb3.toml --out results/portable/hashes-sb3.json

``--in-process`` runs one trial of the set in this very process (no forkserver: under ``qemu-user`` a child that
execs runs natively, not emulated), which must have been started with the portable variables, and prints its row as
JSON; tests/test_kernels.py uses it to replay trials on an emulated AVX2-only CPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

STUDY = REPO / "results" / "portable" / "study.toml"
HASHES = REPO / "results" / "portable" / "hashes.json"
FIELDS = ("algo", "env_label", "key", "status", "steps", "final_return", "result_hash", "param_hash")


def cpu() -> dict[str, Any]:
    """The CPU of this machine as the set records it: model name, family/model, the vector flags that decide kernels,
    torch's native capability."""
    from suite.provenance import _cpu_capability, _cpu_model

    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() in ("cpu family", "model", "flags") and name.strip() not in info:
                info[name.strip()] = value.strip()
    except OSError:
        pass
    flags = set(info.get("flags", "").split())
    wide = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_tile")
    return {
        "model": _cpu_model(),
        "family": info.get("cpu family"),
        "model_number": info.get("model"),
        "flags": [f for f in wide if f in flags],
        "native_capability": _cpu_capability(),
        "hypervisor": "hypervisor" in flags,
    }


def run_set(folder: Path, kernels: str = "portable", workers: int = 1, study: Path = STUDY) -> list[dict[str, Any]]:
    """Run the set into ``folder`` (its database and models) with this checkout's ``suite run``; one row per trial."""
    from suite.regress.records import load_slot

    db = folder / "suite.db"
    argv = [sys.executable, "-m", "suite.cli", "run", str(study), "--kernels", kernels, "--db", str(db),
            "--workers", str(workers), "--no-report", "--quiet"]  # fmt: skip
    subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    frame = load_slot(db, "set", 0).sort_values(["algo", "env_label"])
    rows = []
    for rec in frame.to_dict("records"):
        row = {k: rec[k] for k in FIELDS}
        row["steps"] = int(row["steps"])
        row["final_return"] = float(row["final_return"])
        rows.append(row)
    return rows


def run_in_process(algo: str, env: str, folder: Path, study: Path = STUDY) -> dict[str, Any]:
    """Run the set's trial of ``algo`` on ``env`` in this process (its libraries must be held: see the module doc)
    into ``folder`` and return its row, hashed as :func:`run_set` hashes."""
    from suite.regress.records import load_slot
    from suite.store import ResultsStore
    from suite.study import load_study
    from suite.trial import run_trial

    (spec,) = [s for s in load_study(str(study)).trials(algos=[algo], envs=[env]) if s.seed == 0]
    resolved = spec.resolve()
    record = run_trial(resolved, models_dir=folder / "models")
    with ResultsStore(folder / "suite.db") as store:
        store.save_trial(record)
    row = load_slot(folder / "suite.db", "set", 0).iloc[0].to_dict()
    out = {k: row[k] for k in FIELDS}
    if out["status"] != "ok":  # what stopped it, for the emulated replays' record
        out["error"] = str(record.get("error") or record.get("failure_kind") or "")[-500:]
    out["steps"], out["final_return"] = int(out["steps"]), float(out["final_return"])
    return out


def compare(made: list[dict[str, Any]], replayed: list[dict[str, Any]]) -> list[str]:
    """One line per trial of ``made`` that ``replayed`` lacks or computes otherwise (empty: the same bits)."""
    by_key = {r["key"]: r for r in replayed}
    out = []
    for r in made:
        other = by_key.get(r["key"])
        if other is None:
            out.append(f"{r['algo']} {r['env_label']}: not replayed (key {r['key'][:12]})")
        elif (other["result_hash"], other["param_hash"]) != (r["result_hash"], r["param_hash"]):
            out.append(f"{r['algo']} {r['env_label']}: other bits (final return {r['final_return']} -> "
                       f"{other['final_return']}, outcome {'same' if other['result_hash'] == r['result_hash'] else 'differs'},"
                       f" parameters {'same' if other['param_hash'] == r['param_hash'] else 'differ'})")  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="replay here and compare with the committed set")
    ap.add_argument("--kernels", default="portable", choices=("portable", "native"))
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", type=Path, default=HASHES, help=f"where to write (default {HASHES.relative_to(REPO)})")
    ap.add_argument("--in-process", nargs=2, metavar=("ALGO", "ENV"), help="run one trial of the set here, print its row")
    ap.add_argument("--study", type=Path, default=STUDY, help=f"the set's study (default {STUDY.relative_to(REPO)})")
    args = ap.parse_args()
    if args.in_process:
        with tempfile.TemporaryDirectory(prefix="portable-hashes-") as tmp:
            print(json.dumps(run_in_process(*args.in_process, Path(tmp), args.study)))
        return 0
    with tempfile.TemporaryDirectory(prefix="portable-hashes-") as tmp:
        rows = run_set(Path(tmp), args.kernels, args.workers, args.study)
    if args.check:
        committed = json.loads(HASHES.read_text())
        diffs = compare(committed["trials"], rows)
        print(f"set made on {committed['cpu']['model']}; replayed on {cpu()['model']}")
        print("\n".join(diffs) or f"all {len(rows)} trials: the same bits")
        return 1 if diffs else 0
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    payload = {
        "study": str(args.study.resolve().relative_to(REPO)),
        "kernels": args.kernels,
        "cpu": cpu(),
        "commit": commit,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python benchmarks/portable_hashes.py"
        + (
            ""
            if args.study.resolve() == STUDY
            else f" --study {args.study.resolve().relative_to(REPO)} --out {args.out.resolve().relative_to(REPO)}"
        )
        + ("" if args.kernels == "portable" else " --kernels native"),
        "trials": rows,
    }
    args.out.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"{len(rows)} trials -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
