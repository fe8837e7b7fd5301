"""Load a study from the results database and compute every statistics table a report shows.

Bootstrap replications (a speed/precision trade-off that the report states next to the numbers):

* score and aggregate CIs use ``reps`` (default :data:`DEFAULT_REPS`; rliable's own default is 50,000, pass
  ``--reps 50000`` for paper numbers);
* performance profiles use ``min(reps, 2,000)`` (rliable's default for them);
* probability of improvement costs one Mann-Whitney U per env per replication (~1 ms each through rliable
  and scipy), for every pair of algorithms, so by default its replications are spread over the pairs:
  ``POI_REP_BUDGET // n_pairs`` per pair, between :data:`MIN_POI_REPS` and ``min(reps, 2,000)``. With the
  default study (8 algorithms, 28 pairs, 3 envs) that is 71 replications per pair: the point estimates are
  exact, the CIs coarse. Pass ``poi_reps`` to choose.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from suite.errors import UserError
from suite.report.display import describe_values
from suite.stats import tables as st
from suite.stats.scores import POI_REPS
from suite.store import ResultsStore, default_db_path

DEFAULT_REPS = 2_000
"""Bootstrap replications of score and aggregate CIs in a default report (keeps it under a minute)."""

POI_REP_BUDGET = 2_000
"""Probability-of-improvement replications shared by all algorithm pairs when ``poi_reps`` is not given."""

MIN_POI_REPS = 50
"""Fewest probability-of-improvement replications per pair."""


@dataclass
class ReportData:
    """A study's trials and series, and the statistics computed from them."""

    study: str
    """Study name as recorded."""
    db_path: Path
    """Database the trials came from."""
    trials: pd.DataFrame
    """All trials of the study (every status), as :meth:`ResultsStore.trials` returns them."""
    curves: pd.DataFrame
    """Training episodes of those trials."""
    evals: pd.DataFrame
    """Evaluation episodes of those trials."""
    updates: pd.DataFrame
    """Per-update metrics of those trials."""
    reps: int
    """Replications of score and aggregate CIs."""
    poi_reps: int
    """Replications of probability-of-improvement CIs (per pair)."""
    profile_reps: int
    """Replications of performance-profile bands."""
    seed: int
    """Base seed of every bootstrap."""
    run_tiers: dict[str, str] = field(default_factory=dict)
    """``{trial key: tier}`` the study was run at (recorded by ``suite run``; absent for older records)."""
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    """Statistics frames by display-table name (see :mod:`suite.report.display`)."""
    profile: dict[str, Any] | None = None
    """:func:`suite.stats.tables.performance_profile` output."""
    poi_matrix: pd.DataFrame | None = None
    """algo x algo P(row > column)."""
    notes: dict[str, str] = field(default_factory=dict)
    """Table name -> why it could not be computed (shown in its place; also printed as a warning)."""

    @property
    def algos(self) -> list[str]:
        """Algorithm ids in the study, sorted."""
        return sorted(set(self.trials["algo"].astype(str)))

    @property
    def envs(self) -> list[str]:
        """Env labels in the study, sorted."""
        return sorted(set(self.trials["env_label"].astype(str)))


def default_poi_reps(n_algos: int, reps: int) -> int:
    """Per-pair probability-of-improvement replications when the caller does not choose (see module doc)."""
    cap = min(reps, POI_REPS)
    pairs = n_algos * (n_algos - 1) // 2
    if pairs == 0:
        return cap
    return max(min(MIN_POI_REPS, cap), min(cap, POI_REP_BUDGET // pairs))


def load_study(study: str, db: str | os.PathLike[str] | None) -> ReportData:
    """Read one study's trials and series from the database.

    Args:
        study: Study name as recorded in the trials table.
        db: Database path (None: ``$SUITE_DB`` or ``results/suite.db``).

    Returns:
        A :class:`ReportData` with no tables yet (reps set to the defaults).

    Raises:
        UserError: no database at that path, not a results database, or the study is not in it (the message
            lists the studies it has).
    """
    path = default_db_path(db)
    with ResultsStore(path, create=False) as store:
        trials = store.trials(study=study)
        if trials.empty:
            summary = store.summary()
            studies = sorted({"(no study)" if s is None else str(s) for s in summary["study"]})
            has = ", ".join(studies) if studies else "no trials at all"
            raise UserError(f"study {study!r} is not in {path}; it has: {has}")
        keys = trials["key"].tolist()
        curves, evals, updates = store.curves(keys), store.evals(keys), store.updates(keys)
        run_tiers = store.study_tiers(study)
    return ReportData(
        study=study, db_path=path, trials=trials, curves=curves, evals=evals, updates=updates, run_tiers=run_tiers,
        reps=DEFAULT_REPS, poi_reps=default_poi_reps(trials["algo"].nunique(), DEFAULT_REPS),
        profile_reps=min(DEFAULT_REPS, POI_REPS), seed=0,
    )  # fmt: skip


def failures_frame(trials: pd.DataFrame) -> pd.DataFrame:
    """Failed and diverged trials: ``algo, env_label, seed, status, error, traceback, key``."""
    bad = trials[trials["status"] != "ok"]
    return bad[["algo", "env_label", "seed", "status", "error", "traceback", "key"]].reset_index(drop=True)


def references_frame(trials: pd.DataFrame) -> pd.DataFrame:
    """Per-env reference numbers: ``env_label, env_id, threshold, random_score, reference_score, source``."""
    refs = st.env_references(trials)
    return pd.DataFrame(
        [
            {
                "env_label": label,
                "env_id": ref.env_id,
                "threshold": ref.threshold,
                "random_score": ref.random_score,
                "reference_score": ref.reference_score,
                "source": ref.source,
            }
            for label, ref in refs.items()
        ],
        columns=["env_label", "env_id", "threshold", "random_score", "reference_score", "source"],
    )


def compute_tables(data: ReportData, *, warn: Callable[[str], None] | None = None) -> ReportData:
    """Fill ``data.tables``, ``data.profile`` and ``data.poi_matrix`` from its frames.

    A table whose statistics raise :class:`UserError` (e.g. an env without reference numbers) is left out and
    the reason recorded in ``data.notes`` (and passed to ``warn``), so one missing reference does not hide
    the rest of the report.

    Args:
        data: Loaded study; its ``reps``, ``poi_reps``, ``profile_reps`` and ``seed`` are used.
        warn: Called with ``"<table>: <reason>"`` for each table left out; default prints to stderr.

    Returns:
        ``data``, filled in.
    """
    warn = warn or (lambda message: print(f"suite: warning: {message}", file=sys.stderr))
    trials, evals = data.trials, data.evals

    def attempt(name: str, compute: Callable[[], Any]) -> Any:
        try:
            # Short or flat curves make some reliability metrics NaN (shown as n/a): not worth a warning each.
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore", RuntimeWarning)
                return compute()
        except UserError as exc:
            data.notes[name] = str(exc)
            warn(f"{name}: {exc}")
            return None

    def put(name: str, compute: Callable[[], pd.DataFrame]) -> None:
        frame = attempt(name, compute)
        if frame is not None:
            data.tables[name] = frame

    put("status", lambda: st.count_statuses(trials))
    put("final_scores", lambda: st.final_score_table(trials, reps=data.reps, seed=data.seed))
    if "final_scores" in data.tables:
        data.tables["final_scores_normalised"] = data.tables["final_scores"]
    put("aggregate", lambda: st.aggregate_table(trials, reps=data.reps, seed=data.seed))
    put("probability_of_improvement", lambda: st.probability_of_improvement_table(trials, reps=data.poi_reps, seed=data.seed))
    poi = data.tables.get("probability_of_improvement")
    if poi is not None:
        # The same pivot as st.probability_of_improvement_matrix, without bootstrapping every pair a second time.
        algos = data.algos
        matrix = poi.pivot(index="algo_x", columns="algo_y", values="prob").reindex(index=algos, columns=algos)
        matrix.index.name, matrix.columns.name = "algo", None
        data.poi_matrix = matrix.astype(float)
    data.profile = attempt(
        "performance_profile", lambda: st.performance_profile(trials, reps=data.profile_reps, seed=data.seed)
    )
    put("significance", lambda: st.significance_table(trials))
    put("sample_efficiency", lambda: st.sample_efficiency_table(trials, evals))
    put("stability", lambda: st.stability_table(trials, data.curves, evals, data.updates))
    if "stability" in data.tables:
        # Like with like: say which training episodes each row's curve holds (grpo on Pong leaves capped games out).
        labels = {key: training_curve_label(g["metrics"].tolist()) for key, g in trials.groupby(["algo", "env_label"])}
        frame = data.tables["stability"]
        frame["train_curve"] = [
            labels.get((a, e), "whole episodes") for a, e in zip(frame["algo"], frame["env_label"], strict=True)
        ]
    put("speed_memory", lambda: st.speed_memory_table(trials, evals))
    put("env_references", lambda: references_frame(trials))
    data.tables["failures"] = failures_frame(trials)
    return data


def training_curve_label(metrics: Sequence[Any]) -> str:
    """Which training episodes the curves of these trials hold: ``whole episodes``, or ``capped at N steps (K partial
    episodes left out)`` when their algorithm cut its episodes at its own step cap and kept the cut ones out of the
    curve (``record["metrics"]["episode_cap"]`` and ``["capped_episodes"]``: grpo and grpo-pairwise on Pong).

    Args:
        metrics: The ``metrics`` dict of each trial (None or non-dicts are read as empty).
    """
    caps: set[int] = set()
    capped = 0
    for m in metrics:
        if isinstance(m, dict) and m.get("episode_cap") is not None:
            caps.add(int(m["episode_cap"]))
            capped += int(m.get("capped_episodes") or 0)
    if not caps:
        return "whole episodes"
    return f"capped at {'/'.join(str(c) for c in sorted(caps))} steps ({capped:,} partial episodes left out)"


def profile_frame(profile: dict[str, Any]) -> pd.DataFrame:
    """Performance profiles in long format: ``algo, tau, fraction, lo, hi``."""
    taus = np.asarray(profile["taus"], dtype=float)
    frames = [
        pd.DataFrame({"algo": algo, "tau": taus, "fraction": values, "lo": profile["lo"][algo], "hi": profile["hi"][algo]})
        for algo, values in profile["profiles"].items()
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["algo", "tau", "fraction", "lo", "hi"])


# ------------------------------------------------------------------------------------------ what the runs were


def tier_of(budget: int, env_id: str, algo: str, tiers: dict[str, Any]) -> list[str]:
    """Tiers whose budget for (env, algo) equals ``budget`` (empty: a custom ``--steps`` budget)."""
    out = []
    for tier, table in tiers.items():
        entry = table.get(env_id) if isinstance(table, dict) else None
        if entry is None:
            continue
        steps = entry.get(algo, entry.get("default")) if isinstance(entry, dict) else entry
        if steps is not None and int(steps) == int(budget):
            out.append(tier)
    return out


def _study_tiers(study: str) -> dict[str, Any]:
    """Budget tiers of the shipped study of this name, else the suite's default tiers ({} if unreadable)."""
    from suite.study import default_tiers, list_studies, shipped_study_budgets

    try:
        if study in list_studies():
            return shipped_study_budgets(study)
        return default_tiers()
    except (UserError, OSError):
        return {}


def budgets_frame(data: ReportData) -> pd.DataFrame:
    """Budget and seeds per (algo, env_label): ``algo, env_label, budget, steps, tier, seeds, n_seeds,
    n_eval_episodes, train_curve``. ``steps`` is what the trials trained (record ``steps``: the budget, or less for a
    failed trial or an algorithm's own early stop); ``train_curve`` which training episodes their curves hold
    (:func:`training_curve_label`).

    ``tier`` is the tier the study was run at, as ``suite run`` recorded it for each trial (``custom`` for a
    ``--steps`` budget); for trials without a recorded tier it is inferred: the tier(s) whose step budget
    matches (``custom`` when none does).
    """
    tiers = _study_tiers(data.study)
    rows = []
    for (algo, label), group in data.trials.groupby(["algo", "env_label"], sort=True):
        budgets = sorted({int(b) for b in group["budget"].dropna()})
        env_id = str(group["env_id"].iloc[0])
        recorded = {data.run_tiers.get(k) for k in group["key"]}
        if None not in recorded:
            matched = sorted(str(t) for t in recorded)
        else:
            matched = sorted({t for b in budgets for t in tier_of(b, env_id, str(algo), tiers)})
        seeds = sorted({int(s) for s in group["seed"]})
        trained = sorted({int(s) for s in group["steps"].dropna()}) if "steps" in group else []
        rows.append(
            {
                "algo": algo,
                "env_label": label,
                "budget": ", ".join(f"{b:,}" for b in budgets) or "n/a",
                "steps": (f"{trained[0]:,}" if len(trained) == 1 else f"{trained[0]:,}-{trained[-1]:,}") if trained else "n/a",
                "train_curve": training_curve_label(group["metrics"].tolist()) if "metrics" in group else "whole episodes",
                "tier": ", ".join(matched) or "custom",
                "seeds": compact_ranges(seeds),
                "n_seeds": len(seeds),
                "n_eval_episodes": describe_values(group["n_eval_episodes"].tolist()),
            }
        )
    return pd.DataFrame(
        rows, columns=["algo", "env_label", "budget", "steps", "tier", "seeds", "n_seeds", "n_eval_episodes", "train_curve"]
    )


def compact_ranges(values: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    parts: list[str] = []
    for v in sorted(values):
        if parts and "-" in parts[-1] and int(parts[-1].split("-")[1]) == v - 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{v}"
        elif parts and "-" not in parts[-1] and int(parts[-1]) == v - 1:
            parts[-1] = f"{parts[-1]}-{v}"
        else:
            parts.append(str(v))
    return ", ".join(parts)


PROVENANCE_FIELDS: tuple[tuple[str, str], ...] = (
    ("suite_version", "Suite version"),
    ("git", "Git commit (dirty = uncommitted changes)"),
    ("python", "Python"),
    ("platform", "Platform"),
    ("cpu_model", "CPU"),
    ("cpu_capability", "CPU instruction set (torch kernels)"),
    ("cpu_count", "CPUs (machine / usable)"),
    ("torch_threads", "torch threads per trial"),
    ("hostname", "Host"),
)


def plugins_description(algos: Iterable[str], env_ids: Iterable[str], prov: Sequence[dict[str, Any]]) -> str:
    """Which plugin (name, version) provided which algorithm or env, from each trial's provenance (see
    :func:`suite.provenance.collect_provenance`); ``"none"`` when every algorithm and env is the suite's own."""

    def label(plugin: dict[str, Any]) -> str:
        version = plugin.get("version") or (f"sha256 {plugin['sha256'][:12]}" if plugin.get("sha256") else "unversioned")
        return f"{plugin.get('name')} {version} ({plugin.get('kind')})"

    found = set()
    for algo, env_id, p in zip(algos, env_ids, prov, strict=True):
        if p.get("algo_plugin"):
            found.add(f"algorithm {algo} from {label(p['algo_plugin'])}")
        if p.get("env_plugin"):
            found.add(f"env {env_id} from {label(p['env_plugin'])}")
    return ", ".join(sorted(found)) or "none (the suite's own algorithms and envs)"


def provenance_frame(trials: pd.DataFrame) -> pd.DataFrame:
    """Where the runs came from: one row per field, distinct values with trial counts.

    Returns:
        Columns ``field, values``: suite version, git commit + dirty flag, Python, platform, CPU, CPU counts,
        torch threads, host, algorithm versions, each package version, and the time span of the runs.
    """
    prov = [p if isinstance(p, dict) else {} for p in trials["provenance"]]

    def git(p: dict[str, Any]) -> str:
        commit = p.get("git_commit")
        if not commit:
            return "unknown (not a git checkout)"
        dirty = p.get("git_dirty")
        return f"{commit[:12]}{' (dirty)' if dirty else '' if dirty is False else ' (dirty: unknown)'}"

    extract: dict[str, Callable[[dict[str, Any]], Any]] = {
        "suite_version": lambda p: p.get("suite_version"),
        "git": git,
        "python": lambda p: f"{p.get('python_implementation', '')} {p.get('python_version', '')}".strip() or None,
        "platform": lambda p: p.get("platform"),
        "cpu_model": lambda p: p.get("cpu_model"),
        "cpu_capability": lambda p: p.get("cpu_capability"),
        "cpu_count": lambda p: f"{p.get('cpu_count')} / {p.get('cpu_count_usable')}",
        "torch_threads": lambda p: p.get("torch_threads"),
        "hostname": lambda p: p.get("hostname"),
    }
    rows = [{"field": title, "values": describe_values([extract[name](p) for p in prov])} for name, title in PROVENANCE_FIELDS]
    versions = [f"{a} {v}" for a, v in zip(trials["algo"], trials["algo_version"], strict=True)]
    rows.append({"field": "Algorithm versions", "values": ", ".join(sorted(set(versions)))})
    rows.append({"field": "Plugins", "values": plugins_description(trials["algo"], trials["env_id"], prov)})
    packages = sorted({name for p in prov for name in (p.get("packages") or {})})
    for name in packages:
        rows.append(
            {"field": f"package {name}", "values": describe_values([(p.get("packages") or {}).get(name) for p in prov])}
        )
    started = trials["started_at"].dropna().astype(str)
    ended = trials["ended_at"].dropna().astype(str)
    if len(started):
        rows.append({"field": "Runs between (UTC)", "values": f"{started.min()} and {ended.max() if len(ended) else '?'}"})
    return pd.DataFrame(rows, columns=["field", "values"])
