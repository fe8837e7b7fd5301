"""Benchmark: every memory optimisation of the shared core, on and off, on CartPole, LunarLander and Pong.

Runs ``suite profile memory`` once per env (each toggle alone, then all together, ``--repeats`` fresh processes
each, memray's tracked allocations included) and prints the README's table: per env and variant, the peak RSS of
the process, the peak above the trial's start, the update phase's own peak and the peak of tracked allocations,
each with its ratio to the baseline (median [min, max] over repeats).

Toggles (the documents' optimisations as config fields of the shared core): for each of ``rollout_storage``,
``gae_chunk``, ``grad_accumulation`` and ``obs_storage_dtype`` the variant is the *other* value than the
algorithm's default for the env (:func:`other_value`), so the table shows what switching each one does. A field
the algorithm does not have is reported and skipped; ``--toggle NAME=VALUE`` replaces the defaults.

    python benchmarks/bench_memory_toggles.py                        # ppo, 3 envs, 3 repeats
    python benchmarks/bench_memory_toggles.py --envs ALE/Pong-v5 --repeats 2 --dry-run

Every profile starts afresh (``--fresh``: runs saved by an earlier call, perhaps of older code, are discarded)
unless ``--resume`` is given, which keeps the runs an interrupted call of the same code saved (e.g. the first
repeat of a profile stopped for time, summarised with ``--repeats 1 --resume``).
Each variant's peak RSS (of the process, median over the repeats) and its ratio to the baseline's (median [min,
max] of the ratios paired by repeat) are appended as rows to ``--csv``
(``results/evidence/memory-toggles.csv``; :mod:`benchmarks.evidence_rows`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import evidence_rows  # noqa: E402
from suite.config import config_to_dict  # noqa: E402
from suite.plugins import load_plugins  # noqa: E402
from suite.profile.memory import BASELINE, PROFILES_DIR, default_output_dir  # noqa: E402
from suite.registry import get_algorithm  # noqa: E402

ENVS = ("CartPole-v1", "LunarLander-v3", "ALE/Pong-v5")
STEPS = {"CartPole-v1": None, "LunarLander-v3": None, "ALE/Pong-v5": 3072}
"""Slice per env (None: the profile's default, two rollouts)."""
FIELDS = ("rollout_storage", "gae_chunk", "grad_accumulation", "obs_storage_dtype")
SHOWN = (
    ("trial", "rss_peak_mb", "peak RSS"),
    ("trial", "rss_above_start_mb", "above start"),
    ("update", "rss_peak_over_entry_mb", "update's own peak"),
    ("trial", "alloc_peak_mb", "tracked alloc peak"),
)


def other_value(name: str, default: Any, env_id: str) -> Any:
    """The value a toggle switches ``name`` to: the other storage, chunked vs whole GAE, k = 4 vs 1 micro-batches,
    float32 vs the lean observation dtype."""
    if name == "rollout_storage":
        return "torch" if default == "numpy" else "numpy"
    if name == "gae_chunk":
        return 32 if not default else 0
    if name == "grad_accumulation":
        return 4 if default == 1 else 1
    if name == "obs_storage_dtype":
        return "float32" if default in ("auto", "uint8", "float16") else ("uint8" if env_id.startswith("ALE/") else "float16")
    raise ValueError(f"no rule for {name}")


def toggles_for(algo: str, env_id: str, explicit: list[str]) -> tuple[list[str], list[str]]:
    """``--toggle`` arguments for one env, and the fields the algorithm lacks."""
    if explicit:
        return explicit, []
    load_plugins(())  # the built-in algorithms and the installed plugins, as every command loads them
    config = config_to_dict(get_algorithm(algo).make_config(env_id))
    toggles, missing = [], []
    for name in FIELDS:
        if name not in config:
            missing.append(name)
            continue
        value = other_value(name, config[name], env_id)
        toggles.append(f"{name}={str(value).lower() if isinstance(value, bool) else value}")
    return toggles, missing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algo", default="ppo")
    ap.add_argument("--envs", nargs="+", default=list(ENVS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--toggle", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--output", default=str(PROFILES_DIR / "toggles"), help="one profile folder per env under it")
    ap.add_argument("--dry-run", action="store_true", help="print the commands only")
    ap.add_argument("--resume", action="store_true", help="keep the runs an earlier call saved in --output")
    ap.add_argument("--csv", type=Path, default=evidence_rows.EVIDENCE_DIR / "memory-toggles.csv",
                    help="evidence CSV the peak RSS ratios are appended to")  # fmt: skip
    args = ap.parse_args()
    rows = []
    for env_id in args.envs:
        toggles, missing = toggles_for(args.algo, env_id, args.toggle)
        if missing:
            print(f"{args.algo} on {env_id} has no config field {', '.join(missing)}: not measured", file=sys.stderr)
        if not toggles:
            continue
        out = Path(args.output) / default_output_dir(args.algo, env_id).name
        cmd = [sys.executable, "-m", "suite.cli", "profile", "memory", "--algo", args.algo, "--env", env_id,
               "--repeats", str(args.repeats), "-o", str(out), "--quiet"] + ([] if args.resume else ["--fresh"])  # fmt: skip
        if STEPS.get(env_id):
            cmd += ["--steps", str(STEPS[env_id])]
        for t in toggles:
            cmd += ["--toggle", t]
        print(" ".join(cmd[1:]), flush=True)
        if args.dry_run:
            continue
        load_before = evidence_rows.load()
        subprocess.run(cmd, check=True)
        load = f"{load_before} -> {evidence_rows.load()}"
        summary = pd.read_csv(out / "tables" / "profile_summary.csv").set_index(["variant", "row", "measure"])
        steps = STEPS.get(env_id) or "the profile's default (two rollouts)"
        evidence_rows.append_rows(args.csv, evidence(args.algo, env_id, summary, steps, args.repeats, load))
        for variant in dict.fromkeys(v for v, _, _ in summary.index):
            row: dict[str, Any] = {"env": env_id, "variant": variant}
            for phase, measure, title in SHOWN:
                if (variant, phase, measure) not in summary.index:
                    continue
                e = summary.loc[(variant, phase, measure)]
                ratio = "" if variant == BASELINE or pd.isna(e["ratio_median"]) else (
                    f" ({e['ratio_median']:.2f} [{e['ratio_min']:.2f}, {e['ratio_max']:.2f}])")  # fmt: skip
                row[f"{title} MB (ratio)"] = f"{e['median']:,.1f}{ratio}"
            rows.append(row)
    if rows:
        table = pd.DataFrame(rows).fillna("n/a")
        print("| " + " | ".join(table.columns) + " |")
        print("|" + "|".join(":---" if i < 2 else "---:" for i in range(len(table.columns))) + "|")
        for values in table.itertuples(index=False):
            print("| " + " | ".join(str(v) for v in values) + " |")


def evidence(algo: str, env_id: str, summary: pd.DataFrame, steps: Any, repeats: int, load: str) -> list[dict]:
    """Per variant, the process's peak RSS as evidence rows: the baseline in MB, every toggle as its ratio."""
    out = []
    for variant in dict.fromkeys(v for v, _, _ in summary.index):
        if (variant, "trial", "rss_peak_mb") not in summary.index:
            continue
        e = summary.loc[(variant, "trial", "rss_peak_mb")]
        label = variant.replace(" ", "-")
        what = f"{algo} on {env_id}, {steps} steps, {int(e['n'])} of {repeats} fresh processes"
        if variant == BASELINE:
            out.append(evidence_rows.row(f"memory-{algo}-{env_id}-baseline-peak-rss", round(float(e["median"]), 1),
                                         "MB (median over repeats)", load=load,
                                         notes=f"{what}; [{e['min']:.1f}, {e['max']:.1f}] MB"))  # fmt: skip
            continue
        if pd.isna(e["ratio_median"]):
            continue
        notes = (f"{what}; peak RSS {e['median']:.1f} MB; ratio to the baseline's paired by repeat, median "
                 f"[{e['ratio_min']:.2f}, {e['ratio_max']:.2f}]")  # fmt: skip
        if (variant, "trial", "rss_above_start_mb") in summary.index:
            a = summary.loc[(variant, "trial", "rss_above_start_mb")]
            notes += f"; above the trial's start {a['median']:.1f} MB, ratio {a['ratio_median']:.2f}"
        out.append(evidence_rows.row(f"memory-{algo}-{env_id}-{label}-peak-rss-ratio", round(float(e["ratio_median"]), 3),
                                     "x baseline peak RSS", load=load, notes=notes))  # fmt: skip
    return out


if __name__ == "__main__":
    main()
