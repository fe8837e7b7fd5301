"""``suite reproduce``: run a claim set's missing trials, measure every cell, judge it, write the tables.

Trials are identified by their key (algorithm id + version, resolved config, env, seed, budget, ...), so a
claim set re-runs exactly the trials whose key changed: a version bump of one algorithm re-runs that
algorithm's cells and nothing else. Cells read their trials by key, never by study membership, so a table
never mixes versions.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from suite.claims.claimset import Arm, Cell, ClaimSet, Expansion
from suite.claims.metrics import RunData, get_metric, observed_until, run_values, statistic_of
from suite.claims.results import ArmResult, CellResult
from suite.claims.tables import read_previous, terminal_summary, verdict_changes, write_tables
from suite.claims.verdict import ArmValues, control_multiplicity, judge
from suite.errors import UserError
from suite.executors import ExecOptions, RunSummary, execute
from suite.report.build import training_curve_label
from suite.report.display import format_number
from suite.store import ResultsStore
from suite.study import TIERS
from suite.throughput import Throughput, throughput_of
from suite.trial import ResolvedTrial

RECORDS_FILE = "records.db"
"""Written beside the tables: the records the verdicts were judged from (a results database of the set's trials)."""

BEST = "best"
"""``--tier best``: judge every cell at every tier from every records database of the folder and its detailed runs,
and keep each cell's best-settled measurement."""

SETTLED = {"equivalent": 0, "outside": 0, "impossible": 0, "reference": 0, "saturated": 1, "multiplicity": 1,
           "wide": 2, "censored": 2, "seeds": 3, "no_value": 4, "budget": 5, "not_run": 6}  # fmt: skip
"""How settled a judgement is (lower is better): the order in which ``--tier best`` prefers one cell's measurements."""


def execute_trials(
    trials: Sequence[ResolvedTrial],
    db_path: Path,
    *,
    study: str,
    tier: str,
    options: ExecOptions | None = None,
) -> RunSummary:
    """Run the trials not yet in the database exactly as ``suite run`` does (:func:`suite.executors.execute`: same
    executors, retries, timeouts, interrupts, records and saved models), as members of ``study`` at ``tier``."""
    from tqdm import tqdm

    def on_finish(rec: dict[str, Any]) -> None:
        score = "-" if rec["final_eval_mean"] is None else f"{rec['final_eval_mean']:.2f}"
        tqdm.write(
            f"  {rec['status']:<8} {rec['algo']}/{rec['env_label']}/seed{rec['seed']}: eval {score}, "
            f"{rec['steps_per_second']:.0f} steps/s, {rec['wall_time_s']:.1f} s"
            + (f"  [{rec['error']}]" if rec["error"] else ""),
            file=sys.stderr,
        )

    options = dataclasses.replace(options or ExecOptions(), print_table=False, on_finish=on_finish)
    return execute(list(trials), db_path=db_path, study=study, tier=tier, options=options)


@dataclass
class _Frames:
    trials: pd.DataFrame
    evals: pd.DataFrame
    curves: pd.DataFrame
    updates: pd.DataFrame
    store: ResultsStore | None = None
    """Where other runs' speeds are looked up when a cell's own runs all ended inside their warm-up."""

    def run_data(self, key: str) -> RunData | None:
        rows = self.trials[self.trials["key"] == key]
        if rows.empty:
            return None
        trial = rows.iloc[0].to_dict()
        ev = self.evals[self.evals["key"] == key]
        means = ev.groupby("step", sort=True)["return"].mean()
        cv = self.curves[self.curves["key"] == key]
        up = self.updates[self.updates["key"] == key] if "key" in self.updates.columns else self.updates.iloc[0:0]
        up = up.sort_values("update") if "update" in up.columns else up
        return RunData(
            trial=trial,
            eval_steps=means.index.to_numpy(dtype=float),
            eval_means=means.to_numpy(dtype=float),
            curve_steps=cv["step"].to_numpy(dtype=float),
            curve_returns=cv["return"].to_numpy(dtype=float),
            update_steps=np.sort(up["step"].to_numpy(dtype=float)) if "step" in up.columns else np.empty(0),
            updates=up.dropna(axis=1, how="all").reset_index(drop=True),
        )


def _load(store: ResultsStore, keys: Sequence[str]) -> _Frames:
    keys = list(dict.fromkeys(keys))
    return _Frames(store.trials(keys=keys), store.evals(keys), store.curves(keys), store.updates(keys), store)


def _arm_result(cell: Cell, arm: Arm, keys: list[str], frames: _Frames, run_budget: int) -> ArmResult:
    metric = get_metric(cell.metric)
    rows = frames.trials[frames.trials["key"].isin(keys)]
    ok_keys = rows.loc[rows["status"] == "ok", "key"].tolist()
    runs = [r for r in (frames.run_data(k) for k in ok_keys) if r is not None]
    values = run_values(metric, runs, cell.params)
    watched = observed_until(metric, runs)
    if arm.sweep_key is not None:
        values, watched = _sweep_ranges(keys, ok_keys, values, len(arm.sweep_values))
    keep = ~np.isnan(values)
    values, watched = values[keep], watched[keep]
    ok = rows[rows["status"] == "ok"]
    throughput = throughput_of(ok, frames.evals)
    if not throughput.known and throughput.warmup and frames.store is not None and not ok.empty:
        throughput = _from_other_runs(frames.store, ok, throughput)
    return ArmResult(
        arm=arm,
        keys=keys,
        values=values,
        observed=watched,
        point=statistic_of(values, cell.statistic),
        n_ok=len(ok_keys),
        n_failed=int((rows["status"] != "ok").sum()),
        n_missing=len(set(keys) - set(rows["key"])),
        run_budget=run_budget,
        steps_trained=sorted({int(s) for s in rows["steps"].dropna()}),
        throughput=throughput,
        versions=sorted({f"{a} {v}" for a, v in zip(rows["algo"], rows["algo_version"], strict=True)}),
        curve=training_curve_label([r.trial.get("metrics") for r in runs]) if metric.training_curve else "",
        ended=str(rows["ended_at"].dropna().max())[:10] if len(rows) else "",
        machines=sorted({str((p or {}).get("cpu_model") or "unknown CPU") for p in rows["provenance"]}),
    )


def _sweep_ranges(keys: list[str], ok_keys: list[str], values: np.ndarray, points: int) -> tuple[np.ndarray, np.ndarray]:
    """Per seed, the range (max - min) of the metric over the points of a sweep (``keys`` seed-major); NaN for a
    seed with a point not ok or without a value."""
    by_key = dict(zip(ok_keys, values, strict=True))
    grid = np.array([by_key.get(k, np.nan) for k in keys], dtype=float).reshape(-1, points)
    ranges = np.where(np.isfinite(grid).all(axis=1), grid.max(axis=1) - grid.min(axis=1), np.nan)
    return ranges, np.full(ranges.size, np.nan)


def _from_other_runs(store: ResultsStore, ok: pd.DataFrame, own: Throughput) -> Throughput:
    """When every run of an arm ended inside its warm-up: the training speed of other recorded ok runs of the same
    algorithm version, env, config and threads at any budget (e.g. one ``suite run --steps`` past the warm-up), with
    the warm-up speed still the arm's own."""
    first = ok.iloc[0]
    same = store.trials(algos=str(first["algo"]), envs=str(first["env_id"]), status="ok")
    for column in ("algo_version", "config_hash", "threads"):
        same = same[same[column].astype(str) == str(first[column])]
    same = same[same["env_kwargs"].map(lambda kw: kw == first["env_kwargs"])]
    same = same[same["steps"].fillna(0).astype(int) > own.warmup]
    if same.empty:
        return own
    other = throughput_of(same, store.evals(same["key"].tolist()))
    if not other.known:
        return own
    n = len(same)
    return Throughput(
        warmup=own.warmup,
        warmup_sps=own.warmup_sps if math.isfinite(own.warmup_sps) else other.warmup_sps,
        train_sps=other.train_sps,
        note=(
            f"training speed from {n} other recorded run{'s' if n > 1 else ''} of the same settings past the warm-up "
            f"({', '.join(f'{s:,}' for s in sorted({int(s) for s in same['steps']}))} steps)"
        ),
        keys=tuple(same["key"]),
    )


def _settle(claims: ClaimSet, cell: Cell, arms: list[ArmResult]) -> tuple[str, float | None, str]:
    """The first tier that runs every arm at the claim's budget, the core-hours it needs (recorded speeds, phase by
    phase), and a note: why they are unknown (None), or where an arm's training speed came from when not its own runs
    ("" when neither)."""
    tier = next(t for t in TIERS if all(claims.run_budget(cell, a.arm, t) >= cell.budget for a in arms))
    hours = 0.0
    notes = [f"{a.arm.name}: {a.throughput.note}" for a in arms if a.throughput.note]
    for a in arms:
        if not a.throughput.known:
            return tier, None, (f"core-hours unknown ({a.arm.name}: {a.throughput.note})" if a.throughput.note else "")
        hours += len(cell.seeds) * a.throughput.seconds(cell.budget) / 3600.0
    return tier, hours, ("; ".join(notes) if notes else "")


def evaluate_cells(expansion: Expansion, store: ResultsStore, *, records: str = RECORDS_FILE) -> list[CellResult]:
    """Measure and judge every cell of an expanded claim set from the trials recorded in ``store`` (before the set's
    multiplicity control, :func:`finish`). ``records`` names where the records are, for the table's links."""
    claims = expansion.claims
    frames = _load(store, [k for per_arm in expansion.cell_keys.values() for ks in per_arm.values() for k in ks])
    out = []
    for i, cell in enumerate(claims.cells):
        per_arm = expansion.cell_keys[i]
        arms = [
            _arm_result(cell, arm, per_arm[arm.name], frames, claims.run_budget(cell, arm, expansion.tier))
            for arm in cell.arms
        ]
        short = [x for x in arms if x.run_budget < cell.budget]
        settle_tier, hours, budget_text = None, None, None
        if short:
            settle_tier, hours, unknown = _settle(claims, cell, arms)
            cost = f", about {format_number(hours)} core-hours from the recorded speeds" if hours is not None else ""
            cost = f"{cost}; {unknown}" if unknown else cost
            budget_text = (
                f"ran {short[0].run_budget:,} steps of the claim's {cell.budget:,}: --tier {settle_tier} settles it{cost}"
            )
        judgement = judge(
            claims, cell, [ArmValues(x.values, x.observed) for x in arms], missing=sum(x.n_missing for x in arms),
            failed=sum(x.n_failed for x in arms), budget_short=budget_text,
        )  # fmt: skip
        if judgement.code in ("impossible", "equivalent", "outside", "saturated", "reference"):
            settle_tier, hours = None, None  # nothing a longer run or more seeds would change
        result = CellResult(
            index=i, cell=cell, tier=expansion.tier, arms=arms, judgement=judgement, settle_tier=settle_tier,
            core_hours=hours, records=records,
        )  # fmt: skip
        need = judgement.seeds_needed
        if need and not short and all(x.throughput.known for x in arms):
            result.core_hours = sum(need * x.throughput.seconds(x.run_budget) / 3600 for x in arms)
        out.append(result)
    return out


def finish(claims: ClaimSet, results: list[CellResult]) -> list[CellResult]:
    """Apply the set's multiplicity control to the judged cells (:func:`suite.claims.verdict.control_multiplicity`)."""
    adjusted = control_multiplicity([r.judgement for r in results], claims.multiplicity)
    for r, j in zip(results, adjusted, strict=True):
        r.judgement = j
    return results


def _rank(result: CellResult) -> tuple[int, int, int]:
    tier = TIERS.index(result.tier) if result.tier in TIERS else -1
    return SETTLED.get(result.judgement.code, 9), -tier, -min(a.n_ok for a in result.arms)


def best_settled(
    claims: ClaimSet, sources: Sequence[tuple[Path, str]], seeds: Sequence[int] | None = None
) -> list[CellResult]:
    """Every cell judged at every tier against every records database in ``sources`` (``(path, label)``, the label
    saying where the table links to), keeping each cell's best-settled measurement (:data:`SETTLED`; then the higher
    tier, then more seeds)."""
    best: dict[int, CellResult] = {}
    for path, label in sources:
        with ResultsStore(path, create=False) as store:
            recorded = store.finished_keys()
            for tier in TIERS:
                expansion = claims.expand(tier, seeds)
                if best and not recorded & set(expansion.trials):
                    continue
                for result in evaluate_cells(expansion, store, records=label):
                    kept = best.get(result.index)
                    if kept is None or _rank(result) < _rank(kept):
                        best[result.index] = result
    for result in best.values():
        if result.judgement.code == "not_run" and all(not a.n_ok for a in result.arms):
            result.records = ""  # recorded nowhere
    return [best[i] for i in sorted(best)]


def _label(path: Path, out_dir: Path) -> str:
    """Where a records database is, relative to the table's folder when inside it."""
    try:
        return str(path.resolve().relative_to(out_dir.resolve()))
    except ValueError:
        return str(path)


SHIPPED_PAGE_SIZE = 1024
"""Page size of a claim folder's records database (:meth:`suite.store.ResultsStore.compact`)."""


def write_records(db_path: Path, out: Path, keys: Iterable[str]) -> int:
    """Copy the recorded trials among ``keys`` from ``db_path`` into a fresh results database at ``out`` (replaced
    whole, atomically): with the tables it makes the folder self-contained, so ``suite reproduce SET --no-run --db
    out`` re-judges without the original database, and ``suite merge out`` brings the trials back into one.
    Nothing is written when ``out`` is the database read. Returns the number of trials written."""
    if out.exists() and out.resolve() == db_path.resolve():
        return 0
    tmp = out.with_name(f".{out.name}.tmp")
    for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
        leftover.unlink(missing_ok=True)
    with ResultsStore(tmp) as store:
        added = store.merge_from(db_path, keys=keys).added
        store.compact(page_size=SHIPPED_PAGE_SIZE)
    os.replace(tmp, out)
    return added


def reproduce(
    claims: ClaimSet,
    *,
    db_path: Path,
    out_dir: Path,
    tier: str | None = None,
    seeds: Sequence[int] | None = None,
    options: ExecOptions | None = None,
    run: bool = True,
    command: str | None = None,
    echo: Callable[[str], None] = print,
) -> tuple[list[CellResult], RunSummary | None]:
    """Run what is missing (unless ``run`` is False), judge every cell, write the tables, print the summary.

    Returns:
        The cell results and the run summary (None when nothing was run).

    Raises:
        UserError: an unknown tier, a trial that does not resolve, a database that is not ours, an unwritable
            output folder (all before any trial runs, except the last).
    """
    if tier == BEST:
        if run:
            raise UserError("--tier best judges what the records already hold: add --no-run")
        if not db_path.exists():
            raise UserError(f"no results database at {db_path}")
        sources = [(db_path, _label(db_path, out_dir))]
        sources += [
            (p, _label(p, out_dir)) for p in sorted(out_dir.glob(f"*/{RECORDS_FILE}")) if p.resolve() != db_path.resolve()
        ]
        results = finish(claims, best_settled(claims, sources, seeds))
        command = command or f"suite reproduce {shlex.quote(claims.path or claims.name)} --tier best --no-run"
        changes = verdict_changes(read_previous(out_dir, claims), claims, results)
        write_tables(claims, results, out_dir, tier=BEST, db_path=db_path, command=command)
        echo(terminal_summary(claims, results, tier=BEST, out_dir=out_dir, changes=changes))
        return results, None

    expansion = claims.expand(tier, seeds)
    summary = None
    if run:
        summary = execute_trials(
            list(expansion.trials.values()), db_path, study=claims.study, tier=expansion.tier, options=options
        )
        if summary.interrupted:
            return [], summary
    with ResultsStore(db_path, create=run) as store:
        results = finish(claims, evaluate_cells(expansion, store))
    command = command or f"suite reproduce {shlex.quote(claims.path or claims.name)}"
    changes = verdict_changes(read_previous(out_dir, claims), claims, results)
    write_tables(claims, results, out_dir, tier=expansion.tier, db_path=db_path, command=command)
    speed_keys = [k for r in results for a in r.arms for k in a.throughput.keys]  # other runs a figure came from
    write_records(db_path, out_dir / RECORDS_FILE, [*expansion.trials, *speed_keys])
    echo(terminal_summary(claims, results, tier=expansion.tier, out_dir=out_dir, changes=changes))
    return results, summary
