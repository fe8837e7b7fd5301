"""The gate's decisions: one comparison per (algorithm, env), each with its own test (the rule: :func:`rule_text`).

Input is a *runs* frame (:mod:`suite.regress.records`): one row per trial, per side (``base``, ``head``) and
repeat. Decisions, per (algorithm, env) group:

**Returns.** Trials are deterministic, so results are compared exactly first: a seed whose outcome hash and
trained-parameter hash are equal on both sides is *identical*; a group whose seeds are all identical has not
changed. Otherwise the per-seed final evaluation return and the AUC of the evaluation curve, both normalised
(random policy 0, reference score 1; ``suite/data/envs.toml``), are compared with a one-sided Welch t-test
(Colas et al. 2018 recommend Welch for a handful of RL seeds; a permutation test cannot reach p < 0.05 with
3 seeds a side) and the change must also exceed a practical margin: ``worse`` when, for either measure, HEAD is
lower with p < alpha *and* by more than the margin (asv's rule: significant and beyond a threshold); ``better``
symmetrically; otherwise ``same``. More failed or diverged trials in HEAD than in BASE is ``worse``. A side that
gives different outcomes for the same seed in different repeats is ``nondeterministic`` (it breaks the suite's
first rule; HEAD being so where BASE is not fails the gate). With fewer than 2 ok seeds a side, changed results
cannot be tested: ``differs``.

**Speed and memory** are HEAD/BASE ratios of training steps/s, peak RSS and every per-phase peak memory field the
records carry. Speed is measured on three clocks: the wall clock; the CPU time of the trial process; and the
*unstarved wall clock*, wall time minus the trial thread's run-queue wait (:mod:`suite.schedstat`: the time it was
runnable while other processes had the CPU). Where both revisions record the run-queue wait, the speed verdict comes
from the CPU clock and the unstarved wall clock (``slower`` if either is) and the raw wall clock is shown only: on a
shared machine whose load swings between a trial and its twin the raw wall clock false-alarms on identical
revisions (docs/regression-gate.md), while the unstarved wall clock drops that load and keeps what the CPU clock
cannot see, a change that waits (sleeps, I/O, locks). Where either revision lacks it (records of older builds),
the older rule stands: wall clock and CPU clock, ``slower`` if either is. Each revision runs the whole study once
per repeat, so the trials of one run share that run's machine load: the independent unit is the repeat, not the
seed. Per comparison and repeat, the log ratio is averaged over seeds (``d_r``); the
estimate is ``exp(mean_r d_r)`` and its interval a Student-t interval whose standard deviation is pooled over the
run's comparisons of the same measure (degrees of freedom ``sum(R - 1)``: 2 repeats already give an interval),
and never below the comparison's own. A change counts only when the *whole* interval is beyond the threshold
factor (asv's "significant and beyond a factor", made strict because many comparisons are made at once):
``slower`` when the interval's upper end is below 1/threshold, ``hungrier`` when its lower end is above the
threshold and the increase is at least :attr:`Thresholds.memory_floor_mb`; ``faster``/``leaner`` symmetrically.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import scipy.stats

from suite.errors import UserError
from suite.regress.records import CPU_SPEED, MEM_PREFIX, TIME_PREFIX, UNSTARVED_SPEED, finite, phase_columns

FAILING = ("worse", "slower", "hungrier", "nondeterministic")
"""Verdicts that fail the gate (exit code 1)."""

WALL_SPEED = "steps_per_second"
"""The record's training steps/s: env steps over wall-clock rollout + update time."""

SPEEDS: dict[str, str] = {WALL_SPEED: "wall", CPU_SPEED: "cpu", UNSTARVED_SPEED: "unstarved wall"}
"""The speed measures of a comparison, in the order they are listed, with the clock each is on."""


@dataclass(frozen=True)
class Thresholds:
    """When a difference counts (defaults: the CLI's)."""

    speed: float = 1.1
    """Factor: ``slower`` needs the whole interval of HEAD/BASE steps/s below 1/speed (asv's default factor)."""
    memory: float = 1.1
    """Factor: ``hungrier`` needs the whole interval of HEAD/BASE peak memory above this."""
    return_margin: float = 0.1
    """Normalised score units (a tenth of the random-to-reference range): a smaller change of returns never counts."""
    alpha: float = 0.05
    """Significance level: one-sided Welch tests for returns, (1 - alpha) two-sided intervals for ratios."""
    memory_floor_mb: float = 8.0
    """A memory change smaller than this many MB never counts."""

    def __post_init__(self) -> None:
        for name in ("speed", "memory"):
            if not getattr(self, name) >= 1.0:
                raise UserError(f"--{name}-threshold must be a factor >= 1 (e.g. 1.1 for 10%), got {getattr(self, name)}")
        if not self.return_margin >= 0:
            raise UserError(f"--return-margin must be >= 0, got {self.return_margin}")
        if not 0 < self.alpha < 1:
            raise UserError(f"--alpha must be in (0, 1), got {self.alpha}")


def rule_text(t: Thresholds, speed_gated: bool = True) -> list[str]:
    """The rule, printed with every verdict table."""
    conf = f"{100 * (1 - t.alpha):g}%"
    return [
        "Returns: a seed is identical when its outcome hash (curve, evaluations) and trained-parameter hash are "
        "equal on both sides. Otherwise final evaluation return and evaluation-curve AUC, normalised (random 0, "
        f"reference 1), are compared per seed: worse = one-sided Welch p < {t.alpha:g} and a drop > {t.return_margin:g} "
        "on either; better = the same upwards; more failed/diverged trials in HEAD = worse; fewer than 2 ok seeds "
        "a side = differs (not tested); the same seed giving different outcomes across repeats = nondeterministic.",
        f"Speed: training steps/s HEAD/BASE on the wall clock, the CPU clock (CPU time of the trial process) and the "
        f"unstarved wall clock (wall time minus the trial thread's run-queue wait: other processes' load taken out, "
        f"the trial's own sleeps and waits kept), each where both revisions record it; log ratios averaged over seeds "
        f"per repeat, geometric mean with a {conf} t-interval (sd pooled over the comparisons, repeats as the unit). "
        f"Where both revisions record the run-queue wait, the verdict comes from the CPU clock and the unstarved wall "
        f"clock and the raw wall clock is shown only (info); where either lacks it (older records), from the wall "
        f"clock and the CPU clock; the column speed_rule of verdicts.csv names the clocks each comparison used. "
        f"slower = the whole interval below 1/{t.speed:g} (= {1 / t.speed:.3f}) on either of its clocks; faster = "
        f"the whole interval above {t.speed:g}."
        + (" A comparison whose estimate is beyond a speed or memory threshold while its interval is not runs again "
           "(that algorithm and env only, both revisions) up to the run's maximum repeats (--max-repeats) before it "
           "is decided." if speed_gated else
           " Not gating here: the reference ran at another time, so load differences are not paired out."),
        f"Memory: peak RSS (and per-phase peak fields where recorded) HEAD/BASE, the same intervals: hungrier = the "
        f"whole {conf} interval above {t.memory:g} and an increase >= {t.memory_floor_mb:g} MB.",
        f"Exit code 1 when any comparison is {' / '.join(FAILING)}; 0 otherwise.",
    ]  # fmt: skip


# -- statistics ----------------------------------------------------------------------------------------------
K = TypeVar("K", bound=Hashable)


def pooled_ratio_intervals(log_ratios: Mapping[K, Sequence[float]], alpha: float) -> dict[K, tuple[float, float, float, int]]:
    """Ratios and (1 - alpha) intervals for several comparisons of one measure, variance pooled across them.

    Args:
        log_ratios: per comparison, its per-repeat mean ``log(head / base)`` values ``d_r``, shape ``(R_k,)``.
        alpha: 1 - confidence.

    Returns:
        Per comparison ``(ratio, lo, hi, R_k)``: ``ratio = exp(mean d)``; the interval is ``exp(mean d +- t s /
        sqrt(R_k))`` with ``t`` Student's quantile at ``1 - alpha/2`` on ``sum(R_k - 1)`` degrees of freedom and
        ``s`` the larger of the pooled standard deviation (``sqrt(sum of squared deviations / sum(R_k - 1))``)
        and the comparison's own (so one quiet comparison cannot make a noisy one look certain). No interval (NaN)
        while the pooled degrees of freedom are 0 (every comparison has one repeat).
    """
    clean = {k: finite(v) for k, v in log_ratios.items()}
    df = sum(max(x.size - 1, 0) for x in clean.values())
    ss = sum(float(((x - x.mean()) ** 2).sum()) for x in clean.values() if x.size > 1)
    pooled = math.sqrt(ss / df) if df > 0 else math.nan
    t = float(scipy.stats.t.ppf(1 - alpha / 2, df)) if df > 0 else math.nan
    out: dict[K, tuple[float, float, float, int]] = {}
    for key, x in clean.items():
        if x.size == 0:
            out[key] = (math.nan, math.nan, math.nan, 0)
            continue
        mean = float(x.mean())
        own = float(x.std(ddof=1)) if x.size > 1 else 0.0
        half = t * max(pooled, own) / math.sqrt(x.size) if df > 0 else math.nan
        out[key] = (math.exp(mean), math.exp(mean - half), math.exp(mean + half), int(x.size))
    return out


def welch_one_sided(head: Sequence[float], base: Sequence[float]) -> tuple[float, float]:
    """One-sided Welch t-test p-values ``(p_lower, p_higher)``: H1 mean(head) < mean(base), and >.

    Two constant samples give p 0 for the direction of their difference and 1 for the other (no spread to
    test against: the values differ exactly, as deterministic trials do); NaN with fewer than 2 values a side.
    """
    h, b = finite(head), finite(base)
    if h.size < 2 or b.size < 2:
        return math.nan, math.nan
    if np.ptp(h) == 0 and np.ptp(b) == 0:
        diff = float(h.mean() - b.mean())
        return (0.0 if diff < 0 else 1.0), (0.0 if diff > 0 else 1.0)
    lower = scipy.stats.ttest_ind(h, b, equal_var=False, alternative="less").pvalue
    higher = scipy.stats.ttest_ind(h, b, equal_var=False, alternative="greater").pvalue
    return float(lower), float(higher)


def speed_verdict(ratio: float, lo: float, hi: float, threshold: float) -> str:
    """``slower`` / ``faster`` when the whole interval is beyond the factor, else ``same``; ``n/a`` without one."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "n/a"
    if hi < 1 / threshold:
        return "slower"
    if lo > threshold:
        return "faster"
    return "same"


def memory_verdict(ratio: float, lo: float, hi: float, increase_mb: float, threshold: float, floor_mb: float) -> str:
    """``hungrier`` / ``leaner`` when the whole interval is beyond the factor and the change >= the floor."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "n/a"
    if lo > threshold and increase_mb >= floor_mb:
        return "hungrier"
    if hi < 1 / threshold and -increase_mb >= floor_mb:
        return "leaner"
    return "same"


def undecided(result: GroupResult, t: Thresholds) -> list[str]:
    """The gating measures of a comparison whose estimate is beyond its threshold while its interval is not: more
    repeats could turn them into ``slower`` / ``hungrier`` (or show they are not). Empty: decided.

    A speed ratio below ``1/speed`` on a clock that gates the comparison (a ``same`` verdict: the raw wall clock's
    is ``info`` where the unstarved wall clock replaces it, so it never asks for repeats), or a memory ratio above ``memory``
    (with an increase of at least the floor) with a ``same`` verdict. Estimates inside the thresholds are decided:
    even a certain interval there would not fail the gate.
    """
    out = [r.measure for r in result.speed
           if r.verdict == "same" and r.ratio < 1 / t.speed]  # fmt: skip
    out += [r.measure for r in result.memory
            if r.verdict == "same" and r.ratio > t.memory and r.head_mean - r.base_mean >= t.memory_floor_mb]  # fmt: skip
    return out


# -- per-group comparison --------------------------------------------------------------------------------------
@dataclass
class RatioResult:
    """A HEAD/BASE ratio of one measure in one comparison, and its verdict."""

    measure: str
    """``steps_per_second``, ``cpu_steps_per_second``, ``peak_rss_mb``, ``time:update``, ``mem:rollout:rss_peak_mb``..."""
    ratio: float
    lo: float
    hi: float
    repeats: int
    """Repeats with at least one ok pair (the interval's unit)."""
    pairs: int
    """(seed, repeat) pairs of ok trials."""
    base_mean: float
    head_mean: float
    verdict: str


@dataclass
class GroupResult:
    """Everything decided for one (algorithm, env)."""

    algo: str
    env_label: str
    env_id: str
    seeds: list[int]
    returns: str
    """identical, same, better, worse, differs, nondeterministic, missing."""
    returns_detail: str
    budget: Any = None
    """Steps per trial (a run's studies may hold the same algorithm and env at two budgets)."""
    final_base: float = math.nan
    final_head: float = math.nan
    auc_base: float = math.nan
    auc_head: float = math.nan
    p_final: float = math.nan
    """One-sided Welch p-value in the direction of the observed change (final return)."""
    p_auc: float = math.nan
    identical_seeds: int = 0
    speed: list[RatioResult] = field(default_factory=list)
    """Wall-clock steps/s first, then CPU-time and unstarved-wall steps/s where recorded (:data:`SPEEDS`)."""
    memory: list[RatioResult] = field(default_factory=list)
    """Peak RSS first, then per-phase fields."""
    phase_times: list[RatioResult] = field(default_factory=list)
    """HEAD/BASE seconds per phase (> 1 = slower); shown, not gated."""
    notes: list[str] = field(default_factory=list)

    @property
    def speed_verdict(self) -> str:
        """slower if any gating clock is; else that of the unstarved wall clock where it gates, else that of the wall
        clock (faster, same, info or n/a)."""
        verdicts = {s.measure: s.verdict for s in self.speed}
        if "slower" in verdicts.values():
            return "slower"
        if verdicts.get(UNSTARVED_SPEED, "info") != "info":
            return verdicts[UNSTARVED_SPEED]
        return verdicts.get(WALL_SPEED) or next(iter(verdicts.values()), "n/a")

    @property
    def speed_rule(self) -> str:
        """The clocks that decided the speed verdict: ``cpu + unstarved wall`` where both revisions record the
        run-queue wait, ``wall + cpu`` (the older rule) where either does not, ``not gated`` against a reference."""
        gating = [SPEEDS[s.measure] for s in self.speed if s.verdict != "info"]
        return " + ".join(gating) if gating else ("not gated" if self.speed else "n/a")

    @property
    def memory_verdict(self) -> str:
        """hungrier if any memory measure is; else that of the peak RSS (or n/a)."""
        verdicts = [m.verdict for m in self.memory]
        if "hungrier" in verdicts:
            return "hungrier"
        return verdicts[0] if verdicts else "n/a"

    @property
    def failures(self) -> list[str]:
        """The failing verdicts of this group (empty: it passes)."""
        out = [self.returns] if self.returns in ("worse", "nondeterministic") else []
        if self.speed_verdict == "slower":
            out.append("slower")
        if self.memory_verdict == "hungrier":
            out.append("hungrier")
        return out

    @property
    def verdict(self) -> str:
        """``FAIL: worse, slower`` or ``pass`` (with ``better``/``faster``/``leaner`` noted)."""
        if self.failures:
            return "FAIL: " + ", ".join(self.failures)
        good = [v for v in (self.returns, self.speed_verdict, self.memory_verdict) if v in ("better", "faster", "leaner")]
        return "pass" + (f" ({', '.join(good)})" if good else "")


Normaliser = Callable[[str, dict[str, Any]], Callable[[np.ndarray], np.ndarray] | None]
GroupKey = tuple[Any, ...]


def _default_normaliser(env_id: str, env_kwargs: dict[str, Any]) -> Callable[[np.ndarray], np.ndarray] | None:
    from suite.stats.references import env_reference

    try:
        return env_reference(env_id, env_kwargs).normalise
    except UserError:
        return None


def compare(
    runs: pd.DataFrame, thresholds: Thresholds, *, paired_speed: bool = True, normaliser: Normaliser | None = None
) -> list[GroupResult]:
    """Decide every (algorithm, env) group of a runs frame with sides ``base`` and ``head``.

    Args:
        runs: the runs frame (:func:`suite.regress.records.summarise` rows of both sides, all repeats).
        thresholds: when a difference counts.
        paired_speed: False when BASE did not run interleaved with HEAD (a reference): speed is then shown but
            its verdict is ``info`` instead of gating.
        normaliser: ``(env_id, env_kwargs) -> (raw returns -> normalised)`` or None for raw units with a margin
            relative to BASE's mean; default: the env's reference numbers.

    Returns:
        One :class:`GroupResult` per (algorithm, env, budget), sorted by them.
    """
    normaliser = normaliser or _default_normaliser
    groups: dict[GroupKey, GroupResult] = {}
    sides: dict[GroupKey, tuple[pd.DataFrame, pd.DataFrame]] = {}
    for key, group in runs.groupby(["algo", "env_label", "budget"], sort=True, dropna=False):
        algo, env_label, budget = key
        base, head = group[group["side"] == "base"], group[group["side"] == "head"]
        env_id = str(group["env_id"].iloc[0])
        if base.empty or head.empty:
            only = "HEAD" if base.empty else "BASE"
            seeds = sorted(set(group["seed"]))
            groups[key] = GroupResult(str(algo), str(env_label), env_id, seeds, "missing", f"only {only} ran it", budget)
            continue
        groups[key] = _returns(str(algo), str(env_label), env_id, base, head, thresholds, normaliser)
        groups[key].budget = budget
        sides[key] = (base, head)
    measures = [*SPEEDS, "peak_rss_mb", *phase_columns(runs, MEM_PREFIX), *phase_columns(runs, TIME_PREFIX)]
    for column in measures:
        for key, ratio in _ratios(sides, column, thresholds, paired_speed).items():
            if column in SPEEDS:
                groups[key].speed.append(ratio)
            elif column.startswith(TIME_PREFIX):
                groups[key].phase_times.append(ratio)
            else:
                groups[key].memory.append(ratio)
    for group in groups.values():
        if any(s.measure == UNSTARVED_SPEED for s in group.speed):
            for s in group.speed:  # the unstarved wall clock replaces the raw one: shown, not gating
                if s.measure == WALL_SPEED:
                    s.verdict = "info"
    return list(groups.values())


def _ratios(
    sides: Mapping[GroupKey, tuple[pd.DataFrame, pd.DataFrame]], column: str, t: Thresholds, paired_speed: bool
) -> dict[GroupKey, RatioResult]:
    """One measure's HEAD/BASE ratio in every group where both sides have it (see the module docstring)."""
    per_repeat: dict[GroupKey, list[float]] = {}
    pairs: dict[GroupKey, pd.DataFrame] = {}
    for key, (base, head) in sides.items():
        if column not in base.columns or column not in head.columns:
            continue
        cols = ["seed", "repeat", column]
        b = base[base["status"] == "ok"][cols].rename(columns={column: "b"})
        h = head[head["status"] == "ok"][cols].rename(columns={column: "h"})
        p = b.merge(h, on=["seed", "repeat"]).astype({"b": float, "h": float})
        p = p[(p["b"] > 0) & (p["h"] > 0)]
        if p.empty:
            continue
        p = p.assign(log=np.log(p["h"] / p["b"]))
        pairs[key] = p
        per_repeat[key] = p.groupby("repeat")["log"].mean().tolist()
    out: dict[GroupKey, RatioResult] = {}
    for key, (ratio, lo, hi, repeats) in pooled_ratio_intervals(per_repeat, t.alpha).items():
        p = pairs[key]
        b_mean, h_mean = float(p["b"].mean()), float(p["h"].mean())
        if column in SPEEDS:
            verdict = speed_verdict(ratio, lo, hi, t.speed) if paired_speed else "info"
        elif column.startswith(TIME_PREFIX):
            verdict = "info"
        else:
            verdict = memory_verdict(ratio, lo, hi, h_mean - b_mean, t.memory, t.memory_floor_mb)
        out[key] = RatioResult(column, ratio, lo, hi, repeats, len(p), b_mean, h_mean, verdict)
    return out


def _side(frame: pd.DataFrame, column: str, default: str | None) -> str | None:
    """The one value of ``column`` on a side (its first row's; ``default`` where the frame lacks it)."""
    if column not in frame.columns or frame.empty or pd.isna(frame[column].iloc[0]):
        return default
    return str(frame[column].iloc[0])


def changed_same_key_note(base: pd.DataFrame, head: pd.DataFrame, seeds: Sequence[int]) -> str:
    """Why outcomes moved under an unchanged key, with each side's CPU and kernel mode: native kernels follow the CPU
    (:mod:`suite.kernels`), so between machines that differ it is the machines, not a missing version bump."""
    cpu_b, cpu_h = _side(base, "cpu", None), _side(head, "cpu", None)
    mode = _side(head, "kernels", "native") or "native"  # the key holds the mode: both sides ran in it
    sides = f"BASE on {cpu_b or 'an unrecorded CPU'}, HEAD on {cpu_h or 'an unrecorded CPU'}, {mode} kernels"
    if cpu_b and cpu_h and cpu_b != cpu_h:
        if mode == "native":
            return (
                f"results changed with an unchanged trial key on seeds {list(seeds)}: the machines differ ({sides}); "
                "native kernels follow the CPU: compare in portable mode (--kernels portable) for exact results"
            )
        return (
            f"results changed with an unchanged trial key on seeds {list(seeds)} ({sides}): a machine dependence the "
            "portable kernels do not hold (docs/kernels.md), or a version not bumped"
        )
    return f"results changed with an unchanged trial key (version not bumped?) on seeds {list(seeds)} ({sides})"


def _ok_first(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per seed: the first repeat's (outcomes are deterministic; repeats only measure time and memory)."""
    return frame.sort_values(["seed", "repeat"]).drop_duplicates("seed", keep="first").set_index("seed")


def _nondeterministic_seeds(frame: pd.DataFrame) -> list[int]:
    counts = frame.groupby("seed")["result_hash"].nunique()
    return sorted(int(s) for s in counts[counts > 1].index)


def _same_outcome(b: pd.Series, h: pd.Series) -> bool:
    """Equal outcome hashes, and equal parameter hashes where both sides saved a policy."""
    if b["result_hash"] != h["result_hash"]:
        return False
    return bool(pd.isna(b["param_hash"]) or pd.isna(h["param_hash"]) or b["param_hash"] == h["param_hash"])


def _returns(
    algo: str, env_label: str, env_id: str, base: pd.DataFrame, head: pd.DataFrame, t: Thresholds, normaliser: Normaliser
) -> GroupResult:
    b, h = _ok_first(base), _ok_first(head)
    seeds = sorted(set(b.index) & set(h.index))
    res = GroupResult(algo, env_label, env_id, seeds, "same", "")
    # identity: key (algorithm version + resolved config), outcome, trained parameters
    if set(b["algo_version"]) != set(h["algo_version"]):
        res.notes.append(f"version {', '.join(sorted(set(b['algo_version'])))} -> {', '.join(sorted(set(h['algo_version'])))}")
    elif set(b["config_hash"]) != set(h["config_hash"]):
        res.notes.append("resolved config changed")
    same_key = [s for s in seeds if b.at[s, "key"] == h.at[s, "key"]]
    identical = [s for s in seeds if _same_outcome(b.loc[s], h.loc[s])]
    res.identical_seeds = len(identical)
    changed_same_key = [s for s in same_key if s not in identical]
    if changed_same_key:
        res.notes.append(changed_same_key_note(b, h, changed_same_key))
    nd_base, nd_head = _nondeterministic_seeds(base), _nondeterministic_seeds(head)
    if nd_base:
        res.notes.append(f"BASE gave different results across repeats on seeds {nd_base}")
    if nd_head:
        res.notes.append(f"HEAD gave different results across repeats on seeds {nd_head}")
    ok_b, ok_h = b[b["status"] == "ok"], h[h["status"] == "ok"]
    norm = normaliser(env_id, json.loads(str(b["env_kwargs"].iloc[0])))
    unit = "normalised"
    if norm is None:
        scale = max(abs(float(ok_b["final_return"].mean())) if len(ok_b) else 1.0, 1.0)

        def norm(x: np.ndarray) -> np.ndarray:
            return np.asarray(x, dtype=float) / scale

        unit = f"fraction of |BASE mean| {scale:.3g} (no reference scores for {env_id})"
    fb, fh = norm(ok_b["final_return"].to_numpy()), norm(ok_h["final_return"].to_numpy())
    ab, ah = norm(ok_b["auc"].to_numpy()), norm(ok_h["auc"].to_numpy())
    res.final_base, res.final_head = _mean(ok_b["final_return"]), _mean(ok_h["final_return"])
    res.auc_base, res.auc_head = _mean(ok_b["auc"]), _mean(ok_h["auc"])
    fail_b, fail_h = int((b["status"] != "ok").sum()), int((h["status"] != "ok").sum())

    if nd_head and not nd_base:
        res.returns, res.returns_detail = "nondeterministic", f"HEAD is not deterministic on seeds {nd_head}"
        return res
    if len(identical) == len(seeds) and set(b.index) == set(h.index):
        res.returns, res.returns_detail = "identical", f"identical on {len(seeds)}/{len(seeds)} seeds"
        return res
    lines = []
    decisions: list[str] = []
    for name, xb, xh in (("final", fb, fh), ("AUC", ab, ah)):
        p_lower, p_higher = welch_one_sided(list(xh), list(xb))
        diff = float(np.mean(xh) - np.mean(xb)) if xb.size and xh.size else math.nan
        p = p_lower if diff < 0 else p_higher
        if name == "final":
            res.p_final = p
        else:
            res.p_auc = p
        if math.isfinite(p_lower) and p_lower < t.alpha and diff < -t.return_margin:
            decisions.append("worse")
        elif math.isfinite(p_higher) and p_higher < t.alpha and diff > t.return_margin:
            decisions.append("better")
        lines.append(f"{name} {diff:+.3f} (p={p:.3g})" if math.isfinite(p) else f"{name} {diff:+.3f}")
    detail = f"{len(identical)}/{len(seeds)} seeds identical; change in {unit} score: " + ", ".join(lines)
    if fail_h > fail_b:
        res.returns, res.returns_detail = "worse", f"{fail_h} failed/diverged trials in HEAD vs {fail_b} in BASE; {detail}"
    elif "worse" in decisions:
        res.returns, res.returns_detail = "worse", detail
    elif len(ok_b) < 2 or len(ok_h) < 2:
        res.returns, res.returns_detail = "differs", f"fewer than 2 ok seeds a side, not tested; {detail}"
    elif "better" in decisions or fail_b > fail_h:
        res.returns, res.returns_detail = "better", detail
    else:
        res.returns, res.returns_detail = "same", detail
    return res


def _mean(values: pd.Series) -> float:
    x = finite(values)
    return float(x.mean()) if x.size else math.nan
