"""Claim sets: a published table as data (TOML), validated before anything runs, expanded into trials.

A claim set file (``suite/claims/sets/<name>.toml``, or any path) names its source and, row by row in the
source's own layout, the cells to check::

    name = "seed004-table"
    title = "PPO vs 'GRPO' (document 004's results table)"
    source = "004_f1fcbbd2bdebb4e5.txt"
    location = "the results table (claimed final scores)"
    stand_in = ""                  # non-empty: the runnable stand-in for another task, printed in every output
    tier = "standard"              # default run tier (suite reproduce --tier overrides)
    seeds = "0-4"                  # seeds the set asks for (--seeds overrides; fewer seeds = inconclusive)
    metric = "final_return"        # default metric of every cell (suite.claims.metrics)
    statistic = "mean"             # default statistic over seeds: mean, median or iqm (as the source reports)
    n_eval_episodes = 10
    notes = ["..."]

    [budgets.standard]             # optional: per-env run budgets of one tier, as in a study file
    "ALE/Pong-v5" = 300000

    [arms.rlvr]                    # an algorithm configuration that cells measure
    algo = "ppo-rlvr-prm"
    label = "GRPO = ppo-rlvr-prm"
    overrides = { gae_lambda = 0.9 }     # hyperparameter overrides (any key of the algorithm's config)
    hyperparams_from = "ppo"             # optional: start from this algorithm's per-env values for shared keys

    [[rows]]
    label = "LunarLander-v3"
    env = "LunarLander-v3"
    env_kwargs = {}
    budget = 1000000               # the budget the claim is made at (the source's, or a stated default; a tier
                                   # name stands for that tier's budget for the env)
    budget_source = "stated default: ..."
    [[rows.cells]]
    column = "GRPO"
    arm = "rlvr"
    claimed = 315.2
    [[rows.cells]]
    column = "gain"
    arm = "rlvr"
    versus = "ppo"                 # a comparison of two arms: improvement (A - B) or ratio (A / B)
    comparison = "improvement"
    relative = true                # improvement in percent of B
    claimed = 8.8

A ratio of two arms (e.g. a memory claim, peak RSS of an optimised arm over its baseline)::

    [[rows.cells]]
    column = "peak memory, optimised / baseline"
    arm = "optimised"
    versus = "baseline"
    comparison = "ratio"
    metric = "peak_rss_mb"         # or "phases.update.<field>", "metrics.<name>" (suite.claims.metrics)
    claimed = 0.695                # document 000: 8.2 GB -> 5.7 GB
    claimed_a = 5.7
    claimed_b = 8.2

A cell can take its claimed value, ±, budget and env from ``baselines/published/*.csv`` with
``published = { source = "rl-baselines3-zoo", algo = "ppo", env_id = "CartPole-v1" }``.

Cells may override ``env``, ``env_kwargs``, ``budget``, ``seeds``, ``metric``, ``statistic`` and metric
parameters (``threshold``, ``target``, ``last_episodes``, ``alpha``). Every name (algorithm, env, metric, tier,
statistic, comparison, hyperparameter key and value) is checked when the file is loaded, through the same
validation as ``suite run`` (:meth:`suite.trial.TrialSpec.resolve`), so a mistake is one clear error before
anything runs.

Run budgets: at tier ``paper`` every cell runs at its claim's budget; at any other tier at the tier's budget
for the env and algorithm (``suite/data/tiers.toml``, replaced per env by the set's ``[budgets.<tier>]``),
never above the claim's budget. A cell run below its claim's budget is ``inconclusive`` (:mod:`.verdict`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from suite.config import config_to_dict, load_toml
from suite.envs import env_label, get_env_spec, resolve_env_kwargs
from suite.errors import UserError
from suite.registry import get_algorithm
from suite.study import TIERS, default_tiers, parse_seeds
from suite.trial import ResolvedTrial, TrialSpec

STATISTICS = ("mean", "median", "iqm")
"""How a cell aggregates its seeds (the source's own statistic; IQM = rliable's interquartile mean)."""

COMPARISONS = ("value", "improvement", "ratio")
"""``value``: the statistic of one arm; ``improvement``: A - B (or percent of B with ``relative``); ``ratio``: A / B."""

METRIC_PARAMS = ("threshold", "target", "last_episodes", "alpha")
"""Metric parameters a cell (or row) may set; each metric says which it reads (:mod:`suite.claims.metrics`)."""

SET_KEYS = {"name", "title", "source", "location", "description", "stand_in", "tier", "seeds", "metric", "statistic",
            "n_eval_episodes", "eval_freq", "notes", "budgets", "arms", "rows"}  # fmt: skip
ARM_KEYS = {"algo", "label", "overrides", "hyperparams_from", "note"}
ROW_KEYS = {"label", "env", "env_kwargs", "budget", "budget_source", "seeds", "metric", "statistic", "eval_freq", "note",
            "cells", *METRIC_PARAMS}  # fmt: skip
CELL_KEYS = {"column", "arm", "versus", "comparison", "relative", "claimed", "claimed_pm", "pm_over", "claimed_a",
             "claimed_b", "env", "env_kwargs", "budget", "budget_source", "seeds", "metric", "statistic", "eval_freq",
             "note", "published", *METRIC_PARAMS}  # fmt: skip

SETS_DIR = "sets"
"""Folder of the shipped claim sets inside the package (``suite/claims/sets/*.toml``)."""


@dataclass(frozen=True)
class Arm:
    """An algorithm configuration that cells measure: an algorithm id with hyperparameter overrides."""

    name: str
    """Key in the set's ``[arms]`` table."""
    algo: str
    """Registry id (aliases resolved)."""
    label: str
    """How tables name it."""
    overrides: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Hyperparameter overrides over the per-env defaults (and over ``hyperparams_from``)."""
    hyperparams_from: str | None = None
    """Another algorithm whose per-env values are taken for every key both configs have, before ``overrides``
    (e.g. ``ppo-rlvr-prm`` with ``ppo``'s learning rate, lambda and entropy: only its own modules differ)."""
    note: str = ""
    """What the arm stands for."""

    def describe(self) -> str:
        """``algo`` with its overrides, as a table shows it."""
        parts = [self.algo]
        if self.hyperparams_from:
            parts.append(f"{self.hyperparams_from}'s hyperparameters")
        parts += [f"{k}={_short(v)}" for k, v in sorted(self.overrides.items())]
        return parts[0] if len(parts) == 1 else f"{parts[0]} ({', '.join(parts[1:])})"

    def overrides_for(self, env_id: str) -> dict[str, Any]:
        """The full override layer for ``env_id`` (``hyperparams_from``'s shared values, then ``overrides``)."""
        layer: dict[str, Any] = {}
        if self.hyperparams_from:
            donor = get_algorithm(self.hyperparams_from)
            own = set(config_to_dict(get_algorithm(self.algo).make_config(env_id)))
            layer = {k: v for k, v in config_to_dict(donor.make_config(env_id)).items() if k in own}
        layer.update(self.overrides)
        return layer


@dataclass(frozen=True)
class Cell:
    """One claimed number: what measures it, how, at which budget, and what was claimed."""

    row: str
    """Row label (the source's row)."""
    column: str
    """Column label (the source's column)."""
    arm: Arm
    """What is measured (A)."""
    versus: Arm | None
    """B of an improvement or ratio; None for a value."""
    comparison: str
    """``value``, ``improvement`` or ``ratio``."""
    relative: bool
    """Improvement in percent of B."""
    claimed: float
    """The claimed number (a value, an improvement, a ratio)."""
    claimed_pm: float | None
    """The claimed ``±``, when the source gives one."""
    pm_over: str
    """What the ``±`` is over, as the source says (or ``not stated``)."""
    claimed_a: float | None
    """For comparisons: the source's own A value (context, e.g. 12k steps)."""
    claimed_b: float | None
    """For comparisons: the source's own B value."""
    env_id: str
    """Suite env id."""
    env_kwargs: Mapping[str, Any]
    """Env options (resolved)."""
    budget: int
    """Env steps the claim is made at (the source's, or a stated default)."""
    budget_source: str
    """Where ``budget`` comes from."""
    seeds: tuple[int, ...]
    """Seeds the claim asks for."""
    metric: str
    """Metric name (:data:`suite.claims.metrics.METRICS`)."""
    statistic: str
    """``mean``, ``median`` or ``iqm`` over seeds."""
    params: Mapping[str, Any]
    """Metric parameters."""
    eval_freq: int
    """Env steps between evaluations (0: a tenth of the budget)."""
    note: str = ""
    """Free text shown with the cell."""

    @property
    def env_label(self) -> str:
        """Env id with its non-default options."""
        return env_label(self.env_id, dict(self.env_kwargs))

    @property
    def arms(self) -> tuple[Arm, ...]:
        """A, then B when there is one."""
        return (self.arm,) if self.versus is None else (self.arm, self.versus)

    @property
    def label(self) -> str:
        """``row / column``."""
        return f"{self.row} / {self.column}"


@dataclass(frozen=True)
class ClaimSet:
    """A parsed claim set."""

    name: str
    """Name (``suite reproduce NAME``); its trials are recorded under the study ``claims/<name>``."""
    title: str
    """Table title."""
    source: str
    """Document or paper."""
    location: str
    """Where in the source the table is."""
    description: str
    """What the set checks."""
    stand_in: str
    """Non-empty when the set is a runnable stand-in for another task: says for what (shown in every output)."""
    tier: str
    """Default run tier."""
    seeds: tuple[int, ...]
    """Default seeds."""
    n_eval_episodes: int
    """Episodes per evaluation."""
    budgets: Mapping[str, Any]
    """tier -> env id -> steps or ``{default, <algo>}`` (``tiers.toml`` with the set's ``[budgets]`` over it)."""
    arms: Mapping[str, Arm]
    """Arms by name."""
    cells: tuple[Cell, ...]
    """Every cell, row by row."""
    notes: tuple[str, ...] = ()
    """Caveats printed under the table."""
    path: str | None = None
    """Where it was read from."""

    @property
    def study(self) -> str:
        """Study name of its trials in the results database."""
        return f"claims/{self.name}"

    @property
    def rows(self) -> list[str]:
        """Row labels in order."""
        return list(dict.fromkeys(c.row for c in self.cells))

    @property
    def columns(self) -> list[str]:
        """Column labels in order of first appearance."""
        return list(dict.fromkeys(c.column for c in self.cells))

    def select_rows(self, selectors: Sequence[str]) -> ClaimSet:
        """The same set with only the rows named by ``selectors`` (a row label or an env id, case-insensitive):
        one row of a long table run and judged alone. Trial keys do not depend on the set, so the records are
        the full set's own, and a later run of the whole set reuses them.

        Raises:
            UserError: a selector that names no row (the rows are listed).
        """
        if not selectors:
            return self
        keep: set[str] = set()
        for sel in selectors:
            hits = {c.row for c in self.cells if sel.strip().lower() in (c.row.lower(), c.env_id.lower())}
            if not hits:
                rows = "; ".join(f"{r} ({self._row_env(r)})" for r in self.rows)
                raise UserError(f"claim set {self.name!r} has no row {sel!r}; its rows (label and env): {rows}")
            keep |= hits
        chosen = [r for r in self.rows if r in keep]
        note = f"Rows run and judged: {', '.join(chosen)} ({len(chosen)} of the set's {len(self.rows)}, selected with --row)."
        return replace(self, cells=tuple(c for c in self.cells if c.row in keep), notes=(*self.notes, note))

    def select_columns(self, selectors: Sequence[str]) -> ClaimSet:
        """The same set with only the cells of the columns named by ``selectors`` (a column label, or the label,
        name or algorithm id of the arm a cell measures, case-insensitive): one column of a table run and judged
        alone, e.g. the suite's own ``ppo`` beside the published library's class, whose trials may cost several
        times more. A comparison cell is kept when either of its arms is named. Trial keys do not depend on the set.

        Raises:
            UserError: a selector that names no column or arm (the columns and arms are listed).
        """
        if not selectors:
            return self
        keep: set[tuple[str, str]] = set()
        for sel in selectors:
            s = sel.strip().lower()
            hits = {
                (c.row, c.column)
                for c in self.cells
                if s == c.column.lower() or any(s in (a.label.lower(), a.name.lower(), a.algo.lower()) for a in c.arms)
            }
            if not hits:
                arms = sorted({f"{a.label} ({a.algo})" for c in self.cells for a in c.arms})
                raise UserError(
                    f"claim set {self.name!r} has no column or arm {sel!r}; its columns: {'; '.join(self.columns)}; "
                    f"its arms: {'; '.join(arms)}"
                )
            keep |= hits
        cells = tuple(c for c in self.cells if (c.row, c.column) in keep)
        chosen = list(dict.fromkeys(c.column for c in cells))
        note = (
            f"Columns run and judged: {', '.join(chosen)} ({len(cells)} of the set's {len(self.cells)} cells, "
            "selected with --column)."
        )
        return replace(self, cells=cells, notes=(*self.notes, note))

    def _row_env(self, row: str) -> str:
        return next(c.env_id for c in self.cells if c.row == row)

    def run_budget(self, cell: Cell, arm: Arm, tier: str) -> int:
        """Env steps ``arm`` runs for ``cell`` at ``tier``: the claim's budget at ``paper``, else the tier's budget
        for the env and algorithm, never above the claim's."""
        if tier == "paper":
            return cell.budget
        entry = self.budgets.get(tier, {}).get(cell.env_id)
        if entry is None:
            raise UserError(f"claim set {self.name!r}: no {tier!r} budget for {cell.env_id} (suite/data/tiers.toml)")
        steps = int(entry.get(arm.algo, entry["default"])) if isinstance(entry, Mapping) else int(entry)
        return min(steps, cell.budget)

    def trial_spec(self, cell: Cell, arm: Arm, seed: int, tier: str) -> TrialSpec:
        """The trial behind one seed of one arm of one cell (same for every cell sharing arm, env and budget)."""
        return TrialSpec(
            algo=arm.algo,
            env_id=cell.env_id,
            seed=seed,
            total_timesteps=self.run_budget(cell, arm, tier),
            overrides=arm.overrides_for(cell.env_id),
            env_kwargs=dict(cell.env_kwargs),
            n_eval_episodes=self.n_eval_episodes,
            eval_freq=cell.eval_freq,
            study=self.study,
        )

    def expand(self, tier: str | None = None, seeds: Sequence[int] | None = None) -> Expansion:
        """Every trial the set needs at ``tier`` with ``seeds`` (None: the set's), resolved and validated.

        Raises:
            UserError: an unknown tier, or any trial that does not resolve (bad override, incompatible env).
        """
        tier = tier or self.tier
        if tier not in TIERS:
            raise UserError(f"unknown tier {tier!r}; allowed: {', '.join(TIERS)}")
        cell_keys: dict[int, dict[str, list[str]]] = {}
        resolved: dict[str, ResolvedTrial] = {}
        for i, cell in enumerate(self.cells):
            per_arm: dict[str, list[str]] = {}
            for arm in cell.arms:
                keys = []
                for seed in seeds if seeds is not None else cell.seeds:
                    trial = self.trial_spec(cell, arm, seed, tier).resolve()
                    resolved.setdefault(trial.key, trial)
                    keys.append(trial.key)
                per_arm[arm.name] = keys
            cell_keys[i] = per_arm
        return Expansion(self, tier, resolved, cell_keys)


@dataclass(frozen=True)
class Expansion:
    """A claim set at one tier and seed list: its trials and which of them each cell reads."""

    claims: ClaimSet
    """The set."""
    tier: str
    """Run tier."""
    trials: Mapping[str, ResolvedTrial]
    """Every distinct trial, by key."""
    cell_keys: Mapping[int, Mapping[str, list[str]]]
    """Cell index -> arm name -> trial keys (one per seed)."""


def _short(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}={_short(v)}" for k, v in value.items()) + "}"
    return str(value)


def _check_keys(data: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise UserError(f"{where}: unknown keys {unknown}; allowed: {', '.join(sorted(allowed))}")


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UserError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _optional_number(value: Any, where: str) -> float | None:
    return None if value is None else _number(value, where)


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{where}: expected an integer >= 1, got {value!r}")
    return value


def _claim_budget(value: Any, budgets: Mapping[str, Any], env_id: str, algo: str, where: str) -> int:
    """A claim's budget: env steps, or a tier name standing for that tier's budget for the env and algorithm."""
    if isinstance(value, str):
        if value not in TIERS:
            raise UserError(f"{where} budget: {value!r} is neither a step count nor a tier ({', '.join(TIERS)})")
        entry = budgets.get(value, {}).get(env_id)
        if entry is None:
            raise UserError(f"{where} budget: no {value!r} budget for {env_id}")
        return int(entry.get(algo, entry["default"])) if isinstance(entry, Mapping) else int(entry)
    return _positive_int(value, f"{where} budget")


def _published_cell(ref: Any, where: str) -> dict[str, Any]:
    """Claimed value, ±, budget and env of a ``published = { source, algo, env_id }`` cell, read from
    ``baselines/published/*.csv`` (one copy of every published number)."""
    from suite.claims.published import load_published

    if not isinstance(ref, Mapping) or set(ref) != {"source", "algo", "env_id"}:
        raise UserError(f"{where}: published must be {{ source = ..., algo = ..., env_id = ... }}, got {ref!r}")
    table = load_published()
    match = table[(table["source"] == ref["source"]) & (table["algo"] == ref["algo"]) & (table["env_id"] == ref["env_id"])]
    if len(match) != 1:
        rows = ", ".join(f"{s}:{a}:{e}" for s, a, e in table[["source", "algo", "env_id"]].itertuples(index=False))
        raise UserError(f"{where}: no published row {ref['source']}:{ref['algo']}:{ref['env_id']}; rows: {rows}")
    row = match.iloc[0]
    return {
        "claimed": float(row["mean"]),
        "claimed_pm": float(row["std"]),
        "pm_over": str(row["std_meaning"]),
        "budget": int(row["n_timesteps"]),
        "budget_source": f"{row['source']} {row['source_ref']}",
        "env": str(row["suite_env_id"]),
        "note": str(row["version_note"]),
    }


def shipped_dir() -> Path:
    """Folder of the shipped claim sets."""
    return Path(str(resources.files("suite.claims") / SETS_DIR))


def list_claim_sets() -> list[str]:
    """Names of the shipped claim sets."""
    return sorted(p.stem for p in shipped_dir().glob("*.toml"))


def load_claim_set(name_or_path: str) -> ClaimSet:
    """A shipped claim set by name, or a TOML file by path.

    Raises:
        UserError: unknown name (the shipped ones are listed), unreadable file, or any invalid entry.
    """
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        candidate = shipped_dir() / f"{name_or_path}.toml"
        if not candidate.is_file():
            raise UserError(f"unknown claim set {name_or_path!r}; shipped: {', '.join(list_claim_sets())} (or a path)")
        path = candidate
    return parse_claim_set(load_toml(path), default_name=path.stem, path=str(path))


def parse_claim_set(data: Mapping[str, Any], *, default_name: str = "claims", path: str | None = None) -> ClaimSet:
    """Validate a claim set's TOML table (see the module docstring) and build it.

    Raises:
        UserError: one line naming the first problem (unknown key, algorithm, env, metric, tier, statistic,
            comparison, arm, hyperparameter; missing claimed value; a bad number).
    """
    from suite.claims.metrics import check_metric

    where = path or default_name
    _check_keys(data, SET_KEYS, where)
    name = str(data.get("name", default_name))
    tier = str(data.get("tier", "standard"))
    if tier not in TIERS:
        raise UserError(f"{where}: unknown tier {tier!r}; allowed: {', '.join(TIERS)}")
    set_seeds = tuple(parse_seeds(data.get("seeds", "0-4")))
    set_metric = str(data.get("metric", "final_return"))
    set_statistic = str(data.get("statistic", "mean"))
    set_eval_freq = int(data.get("eval_freq", 0))
    budgets = default_tiers()
    for t, table in data.get("budgets", {}).items():
        if t not in TIERS:
            raise UserError(f"{where}: unknown tier {t!r} in budgets; allowed: {', '.join(TIERS)}")
        budgets = {**budgets, t: {**budgets.get(t, {}), **table}}

    arms: dict[str, Arm] = {}
    for arm_name, entry in data.get("arms", {}).items():
        at = f"{where} [arms.{arm_name}]"
        if not isinstance(entry, Mapping):
            raise UserError(f"{at}: expected a table with algo = ...")
        _check_keys(entry, ARM_KEYS, at)
        if "algo" not in entry:
            raise UserError(f"{at}: missing algo")
        algo = get_algorithm(str(entry["algo"])).id
        donor = entry.get("hyperparams_from")
        arms[arm_name] = Arm(
            name=arm_name,
            algo=algo,
            label=str(entry.get("label", algo)),
            overrides=dict(entry.get("overrides", {})),
            hyperparams_from=get_algorithm(str(donor)).id if donor else None,
            note=str(entry.get("note", "")),
        )
    if not arms:
        raise UserError(f"{where}: a claim set needs at least one arm ([arms.<name>] with algo = ...)")

    def arm_named(value: Any, at: str) -> Arm:
        if value not in arms:
            raise UserError(f"{at}: unknown arm {value!r}; arms: {', '.join(arms)}")
        return arms[value]

    cells: list[Cell] = []
    rows = data.get("rows", [])
    if not rows:
        raise UserError(f"{where}: a claim set needs at least one [[rows]] entry")
    for r, row in enumerate(rows):
        rat = f"{where} rows[{r}]"
        _check_keys(row, ROW_KEYS, rat)
        if "label" not in row:
            raise UserError(f"{rat}: missing label")
        label = str(row["label"])
        if not row.get("cells"):
            raise UserError(f"{rat} ({label}): no cells")
        for c, entry in enumerate(row["cells"]):
            at = f"{where} row {label!r} cell {c}"
            _check_keys(entry, CELL_KEYS, at)
            merged = {**{k: v for k, v in row.items() if k != "cells"}, **entry}
            if "published" in entry:
                merged = {**_published_cell(entry["published"], at), **merged}
            for required in ("column", "arm", "claimed", "env", "budget"):
                if required not in merged:
                    raise UserError(f"{at}: missing {required}")
            env_id = str(merged["env"])
            get_env_spec(env_id)
            try:
                env_kwargs = resolve_env_kwargs(env_id, dict(merged.get("env_kwargs", {})))
            except UserError as exc:
                raise UserError(f"{at}: {exc}") from None
            comparison = str(entry.get("comparison", "improvement" if "versus" in entry else "value"))
            if comparison not in COMPARISONS:
                raise UserError(f"{at}: unknown comparison {comparison!r}; allowed: {', '.join(COMPARISONS)}")
            versus = arm_named(entry["versus"], at) if "versus" in entry else None
            if (comparison == "value") != (versus is None):
                raise UserError(f"{at}: comparison {comparison!r} {'needs' if versus is None else 'takes no'} versus = <arm>")
            statistic = str(merged.get("statistic", set_statistic))
            if statistic not in STATISTICS:
                raise UserError(f"{at}: unknown statistic {statistic!r}; allowed: {', '.join(STATISTICS)}")
            metric = str(merged.get("metric", set_metric))
            params = {k: merged[k] for k in METRIC_PARAMS if k in merged}
            try:
                check_metric(metric, params)
            except UserError as exc:
                raise UserError(f"{at}: {exc}") from None
            cells.append(
                Cell(
                    row=label,
                    column=str(merged["column"]),
                    arm=arm_named(merged["arm"], at),
                    versus=versus,
                    comparison=comparison,
                    relative=bool(entry.get("relative", False)),
                    claimed=_number(merged["claimed"], f"{at} claimed"),
                    claimed_pm=_optional_number(merged.get("claimed_pm"), f"{at} claimed_pm"),
                    pm_over=str(merged.get("pm_over", "not stated" if "claimed_pm" in merged else "")),
                    claimed_a=_optional_number(merged.get("claimed_a"), f"{at} claimed_a"),
                    claimed_b=_optional_number(merged.get("claimed_b"), f"{at} claimed_b"),
                    env_id=env_id,
                    env_kwargs=env_kwargs,
                    budget=_claim_budget(merged["budget"], budgets, env_id, arm_named(merged["arm"], at).algo, at),
                    budget_source=str(merged.get("budget_source", "")),
                    seeds=tuple(parse_seeds(merged["seeds"])) if "seeds" in merged else set_seeds,
                    metric=metric,
                    statistic=statistic,
                    params=params,
                    eval_freq=int(merged.get("eval_freq", set_eval_freq)),
                    note=str(merged.get("note", "")),
                )
            )
    claims = ClaimSet(
        name=name,
        title=str(data.get("title", name)),
        source=str(data.get("source", "")),
        location=str(data.get("location", "")),
        description=str(data.get("description", "")),
        stand_in=str(data.get("stand_in", "")),
        tier=tier,
        seeds=set_seeds,
        n_eval_episodes=_positive_int(data.get("n_eval_episodes", 10), f"{where} n_eval_episodes"),
        budgets=budgets,
        arms=arms,
        cells=tuple(cells),
        notes=tuple(str(n) for n in data.get("notes", [])),
        path=path,
    )
    # Every trial must resolve (algorithm x env compatibility, override keys and values) before anything runs.
    claims.expand(tier)
    return claims
