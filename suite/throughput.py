"""How fast trials train, phase by phase, and what a run at another budget would take.

The off-policy baselines (SB3's SAC, TD3, DQN) only collect for their first ``learning_starts`` steps, many times
faster than once they train: a speed averaged over a run says little about a run of another length. The model here
times the two phases apart (the evaluations' training-clock stamps split a run that crossed its warm-up) and adds a
trial's fixed cost (start-up, and the evaluations, about ten whatever the budget). It serves the claim tables' core-hours
(:mod:`suite.claims.reproduce`) and a run's plan (:func:`suite.plan.make_run_plan`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pandas where a frame is read: the executors import this module, trial processes with them
    import pandas as pd

    from suite.store.database import ResultsStore


def warmup_of(config: Any) -> int:
    """``learning_starts`` of a trial's config (the off-policy baselines' collection-only start), 0 without one."""
    try:
        cfg = json.loads(config) if isinstance(config, str) else dict(config or {})
        return int(cfg.get("learning_starts") or 0)
    except (TypeError, ValueError):
        return 0


@dataclass
class Throughput:
    """Training speed of an arm's runs in its two phases: the warm-up (``learning_starts`` of SB3's SAC/TD3/DQN: they
    only collect until then, far faster than once they train) and training. A run's
    time at another budget is extrapolated phase by phase, so neither a smoke run inside the warm-up (a 1M-step SAC
    cell at an hour instead of days) nor a short run just past it (the fast warm-up averaged in) misleads."""

    warmup: int = 0
    """Steps of collection before the first gradient step (0: training from the start)."""
    warmup_sps: float = float("nan")
    """Env steps per training-clock second during the warm-up (NaN: not measured)."""
    train_sps: float = float("nan")
    """Env steps per training-clock second once training (NaN: no run went past the warm-up)."""
    note: str = ""
    """Where the figures came from when not the cell's own runs, or why they are unknown."""
    keys: tuple[str, ...] = ()
    """Other recorded trials the figures came from (written with the table's records)."""

    @property
    def known(self) -> bool:
        return math.isfinite(self.train_sps) and self.train_sps > 0

    def seconds(self, budget: int) -> float:
        """Training seconds of one run at ``budget`` steps (NaN when a phase it needs was never timed)."""
        warm = min(budget, self.warmup)
        warm_sps = self.warmup_sps if math.isfinite(self.warmup_sps) and self.warmup_sps > 0 else self.train_sps
        if budget <= warm:
            return budget / warm_sps if math.isfinite(warm_sps) and warm_sps > 0 else float("nan")
        if not self.known:
            return float("nan")
        return warm / warm_sps + (budget - warm) / self.train_sps


def _run_phases(steps: int, train_s: float, warmup: int, points: pd.DataFrame) -> tuple[float, float]:
    """(warm-up steps/s, training steps/s) of one run from its end (``steps`` in ``train_s`` training seconds) and its
    evaluations' training-clock stamps ``points`` (columns ``step``, ``wall_time_s``); NaN where not measured."""
    nan = float("nan")
    if not (steps > 0 and train_s > 0):
        return nan, nan
    if not warmup:
        return nan, steps / train_s
    if steps <= warmup:
        return steps / train_s, nan
    pts = points.dropna(subset=["wall_time_s"])
    pts = pts[(pts["step"] > 0) & (pts["wall_time_s"] > 0)]
    before = pts[pts["step"] <= warmup]
    warm_sps = float(before["step"].iloc[-1] / before["wall_time_s"].iloc[-1]) if len(before) else nan
    after = pts[(pts["step"] >= warmup) & (pts["step"] < steps) & (pts["wall_time_s"] < train_s)]
    if len(after):  # the first stamp at or past the warm-up to the end: training only
        s0, t0 = float(after["step"].iloc[0]), float(after["wall_time_s"].iloc[0])
        return warm_sps, (steps - s0) / (train_s - t0)
    if math.isfinite(warm_sps) and train_s > warmup / warm_sps:
        return warm_sps, (steps - warmup) / (train_s - warmup / warm_sps)
    return warm_sps, steps / train_s  # no stamp to split the phases by: the whole run's (too fast by the warm-up)


def throughput_of(ok: pd.DataFrame, evals: pd.DataFrame | None = None) -> Throughput:
    """The phase speeds of ok trials (columns ``key``, ``steps``, ``steps_per_second``: steps over the training
    clock, evaluations excluded; ``warmup`` or the ``config`` it is read from), averaged over the runs that measured
    each phase. ``evals`` (``key``, ``step``, ``wall_time_s``: the training clock at each evaluation) splits a run
    that crossed its warm-up."""
    import pandas as pd

    if ok.empty:
        return Throughput()
    warmups, warm, train = [], [], []
    stamps = evals.drop_duplicates(["key", "step"]) if evals is not None and not evals.empty else None
    for row in ok.itertuples(index=False):
        steps = 0 if pd.isna(row.steps) else int(row.steps)
        sps = float(row.steps_per_second)
        wall = steps / sps if sps > 0 and math.isfinite(sps) else float("nan")  # the training clock
        warmup = int(row.warmup) if hasattr(row, "warmup") else warmup_of(row.config)
        warmups.append(warmup)
        key = getattr(row, "key", None)
        points = (
            stamps[stamps["key"] == key]
            if stamps is not None and key is not None
            else pd.DataFrame({"step": [], "wall_time_s": []})
        )
        w, t = _run_phases(steps, float(wall), warmup, points)
        warm.append(w)
        train.append(t)
    warm_a, train_a = np.asarray(warm, dtype=float), np.asarray(train, dtype=float)
    out = Throughput(
        warmup=max(warmups),
        warmup_sps=float(np.nanmean(warm_a)) if np.isfinite(warm_a).any() else float("nan"),
        train_sps=float(np.nanmean(train_a)) if np.isfinite(train_a).any() else float("nan"),
    )
    if not out.known and out.warmup:
        out.note = (
            f"every run ended inside the warm-up (learning_starts {out.warmup:,}), so no training speed is recorded; "
            "a run past it gives one"
        )
    return out


@dataclass
class TrialTime:
    """A recorded (algorithm, env)'s whole-trial wall time model: fixed cost plus the phases' training time."""

    throughput: Throughput
    """Training speed, phase by phase."""
    overhead_s: float
    """Per trial, beyond the training clock: start-up and evaluations (mean over the recorded trials)."""

    def seconds(self, budget: int) -> float:
        """Wall seconds of one trial at ``budget`` steps (NaN: its training speed past the warm-up is unknown)."""
        return self.overhead_s + self.throughput.seconds(budget)


def trial_times(store: ResultsStore) -> dict[tuple[str, str], TrialTime]:
    """``{(algo, env_id): TrialTime}`` from the ok trials a :class:`suite.store.ResultsStore` holds."""
    rows = store.speed_rows()
    out: dict[tuple[str, str], TrialTime] = {}
    if rows.empty:
        return out
    crossed = rows[(rows["warmup"] > 0) & (rows["steps"] > rows["warmup"])]
    evals = store.evals(crossed["key"].tolist()) if len(crossed) else None
    for (algo, env), group in rows.groupby(["algo", "env_id"], sort=False):
        train = group["steps"] / group["steps_per_second"]
        overhead = float(np.clip((group["wall_time_s"] - train).to_numpy(dtype=float), 0.0, None).mean())
        stamps = evals[evals["key"].isin(group["key"])] if evals is not None else None
        out[(str(algo), str(env))] = TrialTime(throughput_of(group, stamps), overhead)
    return out
