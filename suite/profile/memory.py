"""``suite profile memory``: where a trial's memory goes, phase by phase, and what each toggle changes.

The per-trial probe it reads is :mod:`suite.memory_probe` (modes, record fields); this module plans the profile
(a training slice per variant, repeats), runs each in a fresh process, and summarises and formats the results.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from suite.errors import UserError
from suite.memory_probe import MODES as MODES  # re-exported: the probe's modes, for callers of this command
from suite.memory_probe import SETUP, check_mode
from suite.memory_probe import MemoryProbe as MemoryProbe  # re-exported (benchmarks/bench_memory_overhead.py)


# ------------------------------------------------------------------------------------------- what a rollout weighs
def rollout_weight(
    n_steps: int,
    n_envs: int,
    obs_shape: tuple[int, ...],
    obs_itemsize: int,
    *,
    action_size: int = 1,
    action_itemsize: int = 8,
    float_itemsize: int = 4,
) -> dict[str, int]:
    """Bytes of one rollout in the suite's layout (:class:`suite.algorithms.core.Rollout` plus what GAE adds).

    ``T = n_steps`` steps of ``N = n_envs`` envs: observations ``(T, N, *obs_shape)``, actions ``(T, N, action_size)``
    and six ``(T, N)`` floats (log-probs, values, rewards, dones, advantages, returns). Used to say what a rollout of
    the same shape weighs at a document's sizes (the ``seed000-memory`` claim set). On Pong, ``ppo`` keeps frames as
    uint8: 27.6 MiB computed, of the 48.0 MB memray tracks in its ``setup`` (with the networks and 8 emulators).

    Returns:
        ``{"observations", "actions", "per_step_floats", "total"}`` in bytes.
    """
    cells = n_steps * n_envs
    obs = cells * int(np.prod(obs_shape, dtype=np.int64)) * obs_itemsize
    actions = cells * action_size * action_itemsize
    floats = 6 * cells * float_itemsize
    return {"observations": obs, "actions": actions, "per_step_floats": floats, "total": obs + actions + floats}


# ------------------------------------------------------------------------------------------ suite profile memory
PROFILE_MODES: tuple[str, ...] = ("rss", "full")
"""Modes ``suite profile memory --mode`` accepts (a profile without measurement is not one)."""

DEFAULT_SLICE_STEPS = 3_072
"""Default training slice (3 Atari rollouts of 8 envs x 128 steps); on-policy configs get at least 2 rollouts."""

TRIAL = "trial"
"""Row of a profile for the whole trial: the process peak RSS, and the highest tracked total of any phase."""

PROFILE_ROWS: tuple[str, ...] = (SETUP, "rollout", "advantages", "update", "eval", TRIAL)
"""Rows of a profile table, in order (a phase an algorithm does not have is left out)."""

MEASURES: tuple[tuple[str, str], ...] = (
    ("rss_peak_mb", "peak RSS (MB)"),
    ("rss_above_start_mb", "peak RSS above the trial's start (MB)"),
    ("rss_peak_over_entry_mb", "peak RSS above the phase's entry (MB)"),
    ("rss_growth_mb", "RSS growth (MB)"),
    ("rss_anon_growth_mb", "anonymous RSS growth (MB)"),
    ("alloc_peak_mb", "peak tracked allocations (MB)"),
    ("alloc_peak_over_entry_mb", "peak tracked allocations above the phase's entry (MB)"),
    ("alloc_growth_mb", "tracked allocation growth (MB)"),
)
"""Per-row measures of a profile run (``rss_above_start_mb`` = ``rss_peak_mb`` - the trial's ``baseline_rss_mb``,
the RSS before its envs and networks were built: what the algorithm itself adds to the imported libraries)."""

BASELINE = "baseline"

RATIO_MIN_MB = 1.0
"""No ratio is given against a baseline value below this: identical runs differ by ~0.5 MB of tracked allocations
(Python's 256 KiB arenas, hash seeds), so a ratio of two sub-MB figures is noise."""


@dataclass(frozen=True)
class Variant:
    """One configuration of a profile: the baseline, one toggle, or all toggles together."""

    name: str
    """``baseline``, ``NAME=VALUE`` or ``all toggles``."""
    changes: dict[str, Any]
    """What differs from the baseline (empty for it)."""
    spec: Any
    """The :class:`suite.trial.TrialSpec` that runs it (resolved once when planned, so mistakes surface first)."""


@dataclass(frozen=True)
class ProfilePlan:
    """What ``suite profile memory`` runs: every variant ``repeats`` times, interleaved, each in a fresh process."""

    algo: str
    env_id: str
    env_label: str
    steps: int
    seed: int
    repeats: int
    mode: str
    n_eval_episodes: int
    baseline_overrides: dict[str, Any]
    variants: tuple[Variant, ...]
    notes: tuple[str, ...] = ()
    """Caveats found while planning (e.g. a slice shorter than one rollout)."""

    def runs(self) -> list[tuple[int, Variant]]:
        """``(repeat, variant)`` in execution order: repeat 0 of every variant, then repeat 1, ..."""
        return [(r, v) for r in range(self.repeats) for v in self.variants]


def default_slice_steps(config: dict[str, Any]) -> int:
    """The default ``--steps``: :data:`DEFAULT_SLICE_STEPS`, or two whole rollouts of an on-policy config
    (``n_steps`` x ``n_envs``, no replay buffer) when that is more, so rollout and update see full batches."""
    steps = DEFAULT_SLICE_STEPS
    if "buffer_size" not in config and isinstance(config.get("n_steps"), int) and isinstance(config.get("n_envs"), int):
        steps = max(steps, 2 * config["n_steps"] * config["n_envs"])
    return steps


def parse_toggles(items: list[str] | None) -> list[tuple[str, Any]]:
    """``["NAME=VALUE", ...]`` (values parsed as ``--set`` parses them) -> ``[(name, value)]``; a malformed item or a
    name given twice is a :class:`UserError`."""
    from suite.config import parse_value

    out: list[tuple[str, Any]] = []
    for item in items or []:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UserError(f"--toggle expects NAME=VALUE, got {item!r}")
        if any(name == n for n, _ in out):
            raise UserError(f"--toggle {name} is given twice; give each config field once")
        out.append((name, parse_value(value.strip())))
    return out


def plan_profile(
    algo: str,
    env_id: str,
    *,
    toggles: list[str] | None = None,
    overrides: dict[str, Any] | None = None,
    env_kwargs: dict[str, Any] | None = None,
    steps: int | None = None,
    repeats: int = 3,
    seed: int = 0,
    mode: str = "full",
    n_eval_episodes: int = 2,
    threads: int = 1,
) -> ProfilePlan:
    """Validate a profile request and build its variants (every mistake is a :class:`UserError` here).

    The baseline is the algorithm's per-env configuration with ``overrides`` (``--set``); each toggle
    ``NAME=VALUE`` is the baseline with that one field changed; with two or more toggles, ``all toggles`` has
    them all. Every run trains ``steps`` env steps from ``seed`` and evaluates once at the end
    (``n_eval_episodes`` episodes), so all variants do the same work.
    """
    from suite.config import config_to_dict
    from suite.envs.specs import env_label
    from suite.trial import TrialSpec

    if mode not in PROFILE_MODES:
        raise UserError(f"unknown profile mode {mode!r}; allowed: {', '.join(PROFILE_MODES)}")
    check_mode(mode)
    if repeats < 1:
        raise UserError(f"--repeats must be >= 1, got {repeats}")
    if steps is not None and steps < 1:
        raise UserError(f"--steps must be >= 1, got {steps}")
    if n_eval_episodes < 1:
        raise UserError(f"--eval-episodes must be >= 1, got {n_eval_episodes}")
    base = dict(overrides or {})
    pairs = parse_toggles(toggles)

    def spec_for(layer: dict[str, Any], budget: int) -> Any:
        return TrialSpec(
            algo, env_id, seed, budget, overrides=layer, env_kwargs=dict(env_kwargs or {}), threads=threads,
            n_eval_episodes=n_eval_episodes, eval_freq=budget, study="profile-memory", memory_profile=mode,
        )  # fmt: skip

    probe = spec_for(base, steps or 1).resolve()  # the baseline's config: validates algo, env, --set
    config = config_to_dict(probe.config)
    budget = steps or default_slice_steps(config)
    notes: list[str] = []
    per_rollout = config.get("n_steps", 0) * config.get("n_envs", 0) if "buffer_size" not in config else 0
    if isinstance(per_rollout, int) and per_rollout > budget:
        notes.append(
            f"the slice ({budget:,} steps) is shorter than one rollout ({per_rollout:,} = n_steps x n_envs): the "
            "update trains on a partial batch; pass --steps to cover whole rollouts"
        )
    variants = [Variant(BASELINE, {}, spec_for(base, budget))]
    for name, value in pairs:
        if name not in config:
            raise UserError(
                f"--toggle {name}: {probe.algo.id} has no config field {name!r}; fields: {', '.join(sorted(config))}"
            )
        variants.append(Variant(f"{name}={_show(value)}", {name: value}, spec_for({**base, name: value}, budget)))
    if len(pairs) > 1:
        changes = dict(pairs)
        variants.append(Variant("all toggles", changes, spec_for({**base, **changes}, budget)))
    for variant in variants:
        resolved = variant.spec.resolve()  # a bad value is one clear error, before anything runs
        new = config_to_dict(resolved.config)
        for name in variant.changes:
            if new[name] == config[name]:
                raise UserError(
                    f"--toggle {name}={_show(variant.changes[name])}: the baseline already has {name} = "
                    f"{_show(config[name])}; set the baseline with --set {name}=OTHER"
                )
    return ProfilePlan(
        algo=probe.algo.id, env_id=env_id, env_label=env_label(env_id, probe.env_kwargs), steps=budget, seed=seed,
        repeats=repeats, mode=mode, n_eval_episodes=n_eval_episodes, baseline_overrides=base,
        variants=tuple(variants), notes=tuple(notes),
    )  # fmt: skip


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return str(value)


def run_measures(record: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The profile rows of one trial record: ``{row: {measure: MB}}`` (rows of :data:`PROFILE_ROWS` it has)."""
    phases = record.get("phases") or {}
    start = record.get("baseline_rss_mb")
    out: dict[str, dict[str, float]] = {}
    for row in PROFILE_ROWS[:-1]:
        fields = phases.get(row)
        if not fields or "rss_peak_mb" not in fields:
            continue
        values = {m: float(fields[m]) for m, _ in MEASURES if m in fields}
        if start is not None:
            values["rss_above_start_mb"] = float(fields["rss_peak_mb"]) - float(start)
        out[row] = values
    if record.get("peak_rss_mb") is not None:
        trial: dict[str, float] = {"rss_peak_mb": float(record["peak_rss_mb"])}
        if start is not None:
            trial["rss_above_start_mb"] = float(record["peak_rss_mb"]) - float(start)
        allocs = [v["alloc_peak_mb"] for v in out.values() if "alloc_peak_mb" in v]
        if allocs:
            trial["alloc_peak_mb"] = max(allocs)
        out[TRIAL] = trial
    return out


@dataclass
class ProfileRun:
    """One finished run of a profile."""

    variant: str
    repeat: int
    key: str
    status: str
    error: str | None
    steps: int
    wall_time_s: float
    baseline_rss_mb: float | None
    peak_rss_mb: float | None
    phases: dict[str, dict[str, Any]]
    flamegraph: str | None = None

    @property
    def measures(self) -> dict[str, dict[str, float]]:
        return run_measures({"phases": self.phases, "baseline_rss_mb": self.baseline_rss_mb, "peak_rss_mb": self.peak_rss_mb})

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _worker(spec: Any, capture: str | None, conn: Any) -> None:
    """Body of a profile run's process: one trial, its record sent back (progress messages on the way)."""
    import signal

    from suite.trial import run_trial

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and ends this process
    # torch imports torch._dynamo (and sympy) lazily when the first optimizer is built: ~75 MB and seconds, the same
    # for every torch-based algorithm. Import it before the trial so that its setup row shows what the algorithm
    # builds, not torch's own start-up (a forkserver that preloads it would give trials the same baseline).
    import torch._dynamo  # noqa: F401

    last = [0.0]

    def progress(steps: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.5:
            last[0] = now
            conn.send(("progress", steps))

    try:
        record = run_trial(spec.resolve(), progress=progress, memory_capture=Path(capture) if capture else None)
        keep = ("key", "status", "error", "steps", "wall_time_s", "baseline_rss_mb", "peak_rss_mb", "phases")
        conn.send(("record", {k: record[k] for k in keep}))
    finally:
        conn.close()


def _run_in_fresh_process(spec: Any, capture: Path | None, on_progress: Any) -> dict[str, Any]:
    """Run one trial in a new interpreter (``spawn``: nothing inherited but the spec) and return its record."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_worker, args=(spec, str(capture) if capture else None, child), daemon=True)
    proc.start()
    child.close()
    record = None
    try:
        while record is None:
            if parent.poll(0.5):
                try:
                    kind, payload = parent.recv()
                except EOFError:
                    break
                if kind == "progress":
                    on_progress(payload)
                else:
                    record = payload
            elif not proc.is_alive():
                break
    finally:
        if proc.is_alive() and record is None:
            proc.terminate()
        proc.join(timeout=30)
        parent.close()
    if record is None:
        return {"key": "", "status": "failed", "error": f"WorkerDied: profile run exited with code {proc.exitcode}",
                "steps": 0, "wall_time_s": 0.0, "baseline_rss_mb": None, "peak_rss_mb": None, "phases": {}}  # fmt: skip
    return record


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "run"


PROFILES_DIR = Path("reports") / "profile-memory"
"""Parent of the default output folders of ``suite profile memory`` (relative to the current directory)."""


def default_output_dir(algo: str, env_label: str) -> Path:
    """``reports/profile-memory/<algo>_<env>/`` (unsafe characters replaced: ``ALE/Pong-v5`` -> ``ALE_Pong-v5``)."""
    return PROFILES_DIR / _slug(f"{algo}_{env_label}")


def render_flamegraph(capture: Path, html: Path) -> None:
    """memray's own flame graph HTML for a capture (``memray flamegraph``), then the capture is deleted."""
    import subprocess

    html.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "memray", "flamegraph", "--force", "-o", str(html), str(capture)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"memray flamegraph failed: {done.stderr.strip() or done.stdout.strip()}")
    capture.unlink(missing_ok=True)


RUNS_FILE = "runs.jsonl"
"""Where a profile keeps its finished runs (one JSON object per line), so a second call resumes."""


def load_runs(out_dir: Path, plan: ProfilePlan) -> dict[tuple[str, int], ProfileRun]:
    """Finished runs of this plan already in ``out_dir`` (matched by trial key, repeat and mode)."""
    import json

    path = out_dir / RUNS_FILE
    keys = {v.name: v.spec.resolve().key for v in plan.variants}
    found: dict[tuple[str, int], ProfileRun] = {}
    if not path.exists():
        return found
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            data = json.loads(line)
            run = ProfileRun(**data["run"])
        except (ValueError, TypeError, KeyError):
            continue  # a line cut short by a kill, or from another version: rerun it
        if data.get("mode") == plan.mode and keys.get(run.variant) == run.key and run.repeat < plan.repeats:
            found[(run.variant, run.repeat)] = run
    return found


def run_profile(
    plan: ProfilePlan,
    out_dir: Path,
    *,
    flamegraph_dir: Path | None = None,
    fresh: bool = False,
    show_progress: bool = True,
) -> list[ProfileRun]:
    """Run every (repeat, variant) of ``plan`` not already in ``out_dir`` (see :data:`RUNS_FILE`).

    Each run is a fresh process; runs are interleaved (baseline, toggle 1, ..., then the next repeat), so
    machine drift spreads over all variants. A failed run is kept (status and error) and left out of the
    statistics. Ctrl-C ends the profile after saving what finished; the same command resumes it.

    Returns:
        Every run of the plan, in plan order.
    """
    import json

    from tqdm import tqdm

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / RUNS_FILE
    if fresh:
        path.unlink(missing_ok=True)
    done = load_runs(out_dir, plan)
    todo = [(r, v) for r, v in plan.runs() if (v.name, r) not in done]
    if done:
        print(f"{len(done)} of {len(plan.runs())} runs already in {path}; running the other {len(todo)}", file=sys.stderr)
    bar = tqdm(total=len(todo) * plan.steps, unit="step", unit_scale=True, disable=not show_progress, dynamic_ncols=True)
    try:
        for i, (repeat, variant) in enumerate(todo):
            bar.set_description(f"{i}/{len(todo)} runs: {variant.name} #{repeat + 1}")
            credited = [0]

            def advance(steps: int, credited: list[int] = credited) -> None:
                step = min(steps, plan.steps)
                bar.update(step - credited[0])
                credited[0] = step

            capture = None
            if flamegraph_dir is not None:
                capture = flamegraph_dir / f"{_slug(variant.name)}-r{repeat}.bin"
            record = _run_in_fresh_process(variant.spec, capture, advance)
            advance(plan.steps)
            graph = None
            if capture is not None and capture.exists():
                html = capture.with_suffix(".html")
                render_flamegraph(capture, html)
                graph = str(html)
            run = ProfileRun(
                variant=variant.name, repeat=repeat, key=record["key"], status=record["status"], error=record["error"],
                steps=record["steps"], wall_time_s=record["wall_time_s"], baseline_rss_mb=record["baseline_rss_mb"],
                peak_rss_mb=record["peak_rss_mb"], phases=record["phases"], flamegraph=graph,
            )  # fmt: skip
            with path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"mode": plan.mode, "run": run.to_json()}) + "\n")
            done[(variant.name, repeat)] = run
    finally:
        bar.close()
    return [done[(v.name, r)] for r, v in plan.runs() if (v.name, r) in done]


def summarise(runs: list[ProfileRun], plan: ProfilePlan) -> Any:
    """Statistics of a profile, long format (a pandas DataFrame).

    Columns: ``variant, row, measure, n`` (ok runs), ``median, min, max`` (MB over the repeats), and for every
    variant but the baseline ``ratio_median, ratio_min, ratio_max``: the variant's value over the baseline's in
    the same repeat (runs are paired by repeat: they ran next to each other), so ``0.70`` is a 30% saving. A
    ratio is left out (NaN) where the baseline's value is below :data:`RATIO_MIN_MB`.
    """
    import numpy as np
    import pandas as pd

    values: dict[tuple[str, str, str], dict[int, float]] = {}
    for run in runs:
        if run.status != "ok":
            continue
        for row, fields in run.measures.items():
            for measure, value in fields.items():
                values.setdefault((run.variant, row, measure), {})[run.repeat] = value
    rows = []
    for variant in plan.variants:
        for row in PROFILE_ROWS:
            for measure, _ in MEASURES:
                by_repeat = values.get((variant.name, row, measure))
                if not by_repeat:
                    continue
                v = np.array(list(by_repeat.values()), dtype=float)
                entry: dict[str, Any] = {
                    "variant": variant.name, "row": row, "measure": measure, "n": len(v),
                    "median": float(np.median(v)), "min": float(v.min()), "max": float(v.max()),
                    "ratio_median": np.nan, "ratio_min": np.nan, "ratio_max": np.nan,
                }  # fmt: skip
                base = values.get((BASELINE, row, measure), {})
                if variant.name != BASELINE:
                    ratios = np.array(
                        [x / base[r] for r, x in by_repeat.items() if base.get(r, 0.0) >= RATIO_MIN_MB], dtype=float
                    )
                    if ratios.size:
                        entry.update(ratio_median=float(np.median(ratios)), ratio_min=float(ratios.min()),
                                     ratio_max=float(ratios.max()))  # fmt: skip
                rows.append(entry)
    columns = ["variant", "row", "measure", "n", "median", "min", "max", "ratio_median", "ratio_min", "ratio_max"]
    return pd.DataFrame(rows, columns=columns)


TABLE_MEASURES: tuple[tuple[str, str], ...] = (
    ("rss_peak_mb", "RSS peak"),
    ("rss_above_start_mb", "above start"),
    ("alloc_peak_mb", "alloc peak"),
)
"""The measures the terminal table shows (MB, median over repeats), each with its ratio to the baseline."""


def format_ratio(median: float, lo: float, hi: float) -> str:
    """``0.70 [0.69, 0.71]``; ``-`` when there is no ratio; one number when the spread is nil."""
    import math

    if math.isnan(median):
        return "-"
    if lo == hi:
        return f"{median:.2f}"
    return f"{median:.2f} [{lo:.2f}, {hi:.2f}]"


def profile_table(summary: Any, plan: ProfilePlan) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the side-by-side table (one line per phase and variant)."""
    header = ["phase", "variant"]
    for _, title in TABLE_MEASURES:
        header += [f"{title} MB", f"{title} ratio"]
    index = {(r.variant, r.row, r.measure): r for r in summary.itertuples(index=False)}
    lines = []
    for row in PROFILE_ROWS:
        first = True
        for variant in plan.variants:
            cells = []
            present = False
            for measure, _ in TABLE_MEASURES:
                entry = index.get((variant.name, row, measure))
                if entry is None:
                    cells += ["-", "-"]
                    continue
                present = True
                cells += [f"{entry.median:,.1f}", format_ratio(entry.ratio_median, entry.ratio_min, entry.ratio_max)]
            if present:
                lines.append([row if first else "", variant.name, *cells])
                first = False
    return header, lines


def format_profile(summary: Any, plan: ProfilePlan, runs: list[ProfileRun]) -> str:
    """The terminal report: what ran, the side-by-side table, failed runs, notes."""
    n_ok = sum(r.status == "ok" for r in runs)
    lines = [
        f"memory profile: {plan.algo} on {plan.env_label}, {plan.steps:,} steps from seed {plan.seed}, "
        f"{plan.repeats} repeat(s) per variant in fresh processes, mode {plan.mode}; {n_ok}/{len(runs)} runs ok",
        "MB = 2**20 bytes, median over repeats; ratio = variant / baseline in the same repeat: median [min, max]; "
        "'above start' = peak RSS - the RSS before the trial built its envs and networks; 'alloc' = memray's tracked "
        "allocations (full mode).",
    ]
    if plan.baseline_overrides:
        lines.append("baseline: " + ", ".join(f"{k}={_show(v)}" for k, v in sorted(plan.baseline_overrides.items())))
    header, rows = profile_table(summary, plan)
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines.append("")
    for r in [header, *rows]:
        lines.append(
            "  ".join(str(c).rjust(w) if i > 1 else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        )
    for run in runs:
        if run.status != "ok":
            lines.append(f"run {run.variant} #{run.repeat + 1}: {run.status}: {run.error}")
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines)
