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
    statistic = "mean"             # mean (t-intervals), or median for times to an event (Kaplan-Meier)
    kind = "single_run"            # default claim kind (below); kind_source says why
    kind_source = "the document gives one number per cell, no seeds or spread"
    tolerance_fraction = 0.1       # default tolerance: this share of the env's random-to-reference range
    multiplicity = "holm"          # family-wise control over the set's judged cells (holm, fdr_bh or none)
    n_eval_episodes = 10
    eval_protocol = "deterministic"   # or "sampled": how the source evaluated its agents
    notes = ["..."]

    [budgets.standard]             # optional: per-env run budgets of one tier, as in a study file
    "ALE/Pong-v5" = 300000

    [arms.rlvr]                    # an algorithm configuration that cells measure
    algo = "ppo-rlvr-prm"
    label = "GRPO = ppo-rlvr-prm"
    overrides = { gae_lambda = 0.9 }     # hyperparameter overrides (any key of the algorithm's config)
    hyperparams_from = "ppo"             # optional: start from this algorithm's per-env values for shared keys
    env_kwargs = {}                      # optional: env options of this arm over the cell's (e.g. another target)

    [[rows]]
    label = "LunarLander-v3"
    env = "LunarLander-v3"
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
    versus = "ppo"                 # a comparison of two arms: A - B (kind improvement) or A / B (kind ratio)
    kind = "improvement"
    relative = true                # the source's figure is a percentage of B: claimed_a and claimed_b are required,
    claimed = 8.8                  # and the gain is judged as claimed_a - claimed_b in score units
    claimed_a = 315.2
    claimed_b = 289.7

Claim kinds (what the claimed number is, so what noise it carries; :mod:`suite.claims.verdict`):

* ``mean_over_seeds``: a mean with its ``claimed_pm`` (a standard deviation) over ``claim_n`` seeds (CleanRL).
* ``single_run``: one run, no spread given (the seed documents).
* ``single_agent``: one trained agent scored over ``claim_episodes`` evaluation episodes, ``claimed_pm`` the standard
  deviation over those episodes (rl-baselines3-zoo's benchmark.md).
* ``improvement``: A - B; a number (``claimed``, or ``claimed_a`` and ``claimed_b``) or only a ``direction``
  (``higher`` or ``lower``) when the source gives none; ``claim_noise`` says whether the claimed gain carries the
  noise of single runs (``single_run``, the default) or none (``none``: a stated target such as "equally good").
* ``ratio``: A / B of a positive metric (judged on the log scale).

A cell may also give ``claimed_range = [lo, hi]`` instead of a number ("by update 50"), ``decimals`` (how many places
the source printed; the reward-lattice check uses it), ``claim_episodes`` (episodes a claimed mean averages),
``tolerance`` (in the metric's units; required where the env's score range gives no default),
``attainable = [lo, hi]`` with ``attainable_source`` (what the measured procedure can produce at all),
``role = "reference"`` (shown, never judged or counted) and ``note``.

A cell can take its claimed value, ±, budget and env from ``baselines/published/*.csv`` with
``published = { source = "rl-baselines3-zoo", algo = "ppo", env_id = "CartPole-v1" }``.

Cells may override ``env``, ``env_kwargs``, ``budget``, ``seeds``, ``metric``, ``statistic``, ``eval_protocol``
and metric parameters (``threshold``, ``target``, ``last_episodes``, ``alpha``, ``update``, ``field``). Every name
(algorithm, env, metric, tier, statistic, kind, hyperparameter key and value) is checked when the file is loaded,
through the same validation as ``suite run`` (:meth:`suite.trial.TrialSpec.resolve`), and every number must be
finite, so a mistake is one clear error before anything runs.

Run budgets: at tier ``paper`` every cell runs at its claim's budget; at any other tier at the tier's budget
for the env and algorithm (``suite/data/tiers.toml``, replaced per env by the set's ``[budgets.<tier>]``),
never above the claim's budget. A cell run below its claim's budget is ``inconclusive`` (:mod:`.verdict`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from suite.config import config_to_dict, load_toml
from suite.envs import env_label, get_env_spec, resolve_env_kwargs
from suite.errors import UserError
from suite.kernels import check_mode as check_kernels
from suite.registry import get_algorithm
from suite.study import TIERS, default_tiers, parse_seeds
from suite.trial import ResolvedTrial, TrialSpec, default_kernels

STATISTICS = ("mean", "median")
"""How a cell aggregates its seeds: the mean (t-intervals), or for a time to an event the median (Kaplan-Meier)."""

KINDS = ("mean_over_seeds", "single_run", "single_agent", "improvement", "ratio")
"""What a claimed number is (:mod:`suite.claims.verdict` says how each is judged)."""

COMPARISON_OF = {"mean_over_seeds": "value", "single_run": "value", "single_agent": "value", "improvement": "improvement",
                 "ratio": "ratio"}  # fmt: skip
"""The measured quantity of each kind: one arm's statistic, A - B or A / B."""

ROLES = ("claim", "reference")
"""``claim``: judged and counted; ``reference``: shown beside the claims, never judged or counted."""

MULTIPLICITY = ("holm", "fdr_bh", "none")
"""Error control over a set's judged cells (statsmodels ``multipletests`` methods)."""

EVAL_PROTOCOLS = ("deterministic", "sampled")
"""How the source evaluated its agents: the policy's mode, or actions sampled from it."""

METRIC_PARAMS = ("threshold", "target", "last_episodes", "alpha", "update", "field", "fraction")
"""Metric parameters a cell (or row) may set; each metric says which it reads (:mod:`suite.claims.metrics`)."""

DEFAULT_TOLERANCE_FRACTION = 0.1
"""Default tolerance of a return: a tenth of the env's random-to-reference range (``suite/data/envs.toml``)."""

SET_KEYS = {"name", "title", "source", "location", "description", "stand_in", "tier", "seeds", "metric", "statistic",
            "n_eval_episodes", "eval_freq", "notes", "budgets", "arms", "rows", "kind", "kind_source",
            "tolerance_fraction", "multiplicity", "eval_protocol", "findings", "tolerance", "tolerance_source",
            "kernels"}  # fmt: skip
ARM_KEYS = {"algo", "label", "overrides", "hyperparams_from", "note", "env_kwargs", "sweep"}
CLAIM_KEYS = {"kind", "kind_source", "role", "relative", "claimed", "claimed_pm", "pm_over", "claimed_a", "claimed_b",
              "claimed_range", "direction", "decimals", "claim_n", "claim_episodes", "claim_noise", "tolerance",
              "tolerance_source", "attainable", "attainable_source", "eval_protocol"}  # fmt: skip
ROW_KEYS = {"label", "env", "env_kwargs", "budget", "budget_source", "seeds", "metric", "statistic", "eval_freq", "note",
            "n_eval_episodes", "cells", *METRIC_PARAMS, *CLAIM_KEYS}  # fmt: skip
CELL_KEYS = {"column", "arm", "versus", "env", "env_kwargs", "budget", "budget_source", "seeds", "metric", "statistic",
             "eval_freq", "n_eval_episodes", "note", "published", *METRIC_PARAMS, *CLAIM_KEYS}  # fmt: skip

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
    env_kwargs: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Env options of this arm over the cell's (an arm on another TextMatch target, compared with the cell's)."""
    sweep_key: str | None = None
    """A hyperparameter the arm sweeps (``sweep = { learning_rate = [...] }``): each seed runs every value, and the
    arm's value for that seed is the range (max - min) of the metric over them: how sensitive the result is."""
    sweep_values: tuple[Any, ...] = ()
    """The values swept."""

    def sweep_layers(self, env_id: str) -> list[dict[str, Any]]:
        """The override layer of each point of the sweep (one layer, the arm's own, without a sweep)."""
        base = self.overrides_for(env_id)
        if self.sweep_key is None:
            return [base]
        return [{**base, self.sweep_key: v} for v in self.sweep_values]

    def describe(self) -> str:
        """``algo`` with its overrides, as a table shows it."""
        parts = [self.algo]
        if self.hyperparams_from:
            parts.append(f"{self.hyperparams_from}'s hyperparameters")
        parts += [f"{k}={_short(v)}" for k, v in sorted(self.overrides.items())]
        parts += [f"env {k}={_short(v)}" for k, v in sorted(self.env_kwargs.items())]
        if self.sweep_key:
            parts.append(f"swept over {self.sweep_key} in {', '.join(_short(v) for v in self.sweep_values)}")
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
    kind: str
    """What the claim is (:data:`KINDS`)."""
    kind_source: str
    """Why the cell has its kind (what the source says about its number)."""
    relative: bool
    """The source's own figure is a percentage of B (judged as ``claimed_a - claimed_b``)."""
    claimed: float | None
    """The source's own figure (a value, a gain in percent or score units, a ratio); None for a claimed range or a
    direction only."""
    claimed_pm: float | None
    """The claimed ``±`` (a standard deviation), when the source gives one."""
    pm_over: str
    """What the ``±`` is over, as the source says (or ``not stated``)."""
    claimed_a: float | None
    """For comparisons: the source's own A value."""
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
    """``mean`` or ``median`` over seeds."""
    params: Mapping[str, Any]
    """Metric parameters."""
    eval_freq: int
    """Env steps between evaluations (0: a tenth of the budget)."""
    note: str = ""
    """Free text shown with the cell."""
    role: str = "claim"
    """``claim`` or ``reference`` (:data:`ROLES`)."""
    claimed_range: tuple[float, float] | None = None
    """A claimed interval ("by update 50": ``[1, 50]``)."""
    direction: str | None = None
    """``higher`` or ``lower``: an improvement claimed without a number."""
    decimals: int | None = None
    """Decimal places the source printed its number with (for the reward-lattice check)."""
    claim_n: int | None = None
    """Seeds behind a ``mean_over_seeds`` claim."""
    claim_episodes: int | None = None
    """Evaluation episodes behind a ``single_agent`` claim, or episodes a claimed mean of returns averages."""
    claim_noise: str = "single_run"
    """An improvement's own noise: ``single_run`` (each claimed value one run) or ``none`` (a stated target)."""
    tolerance: float | None = None
    """The tolerance in the metric's units when the set states it for this cell (else the env's default)."""
    tolerance_source: str = ""
    """Why the cell's tolerance is what it is."""
    attainable: tuple[float, float] | None = None
    """What the measured procedure can produce at all, when narrower than the env's range (with its source)."""
    attainable_source: str = ""
    """Why."""
    eval_protocol: str = "deterministic"
    """How the claim's source evaluated (:data:`EVAL_PROTOCOLS`); the trials evaluate the same way."""
    n_eval_episodes: int | None = None
    """Episodes per evaluation when the cell's source evaluated with other than the set's number (None: the set's)."""

    @property
    def comparison(self) -> str:
        """``value``, ``improvement`` or ``ratio``: the measured quantity."""
        return COMPARISON_OF[self.kind]

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

    def arm_env_kwargs(self, arm: Arm) -> dict[str, Any]:
        """The env options ``arm`` runs with in this cell (the cell's, then the arm's own)."""
        return resolve_env_kwargs(self.env_id, {**self.env_kwargs, **arm.env_kwargs})

    @property
    def claimed_gain(self) -> float | None:
        """An improvement's claimed A - B in score units (its endpoints when given, else ``claimed``)."""
        if self.claimed_a is not None and self.claimed_b is not None:
            return self.claimed_a - self.claimed_b
        return self.claimed

    @property
    def claimed_ratio(self) -> float | None:
        """A ratio's claimed A / B (its endpoints when given, else ``claimed``)."""
        if self.claimed_a is not None and self.claimed_b is not None and self.claimed_b != 0:
            return self.claimed_a / self.claimed_b
        return self.claimed

    @property
    def claim_interval(self) -> tuple[float, float] | None:
        """The claim as an interval of the measured quantity (a point ``[c, c]``, a range), None for a direction."""
        if self.claimed_range is not None:
            return self.claimed_range
        c = {"value": self.claimed, "improvement": self.claimed_gain, "ratio": self.claimed_ratio}[self.comparison]
        return None if c is None else (c, c)


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
    tolerance_fraction: float = DEFAULT_TOLERANCE_FRACTION
    """Default tolerance of a return, as a share of the env's random-to-reference range."""
    multiplicity: str = "holm"
    """Error control over the set's judged cells (:data:`MULTIPLICITY`)."""
    findings: tuple[str, ...] = ()
    """What the set's own authors found worth saying on the first screen beside the generated headline."""
    kernels: str | None = None
    """Kernel mode of its trials (``kernels = "portable"``, :mod:`suite.kernels`; ``--kernels`` replaces it); None: the
    default of :func:`suite.trial.default_kernels`."""

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

    def trial_spec(self, cell: Cell, arm: Arm, seed: int, tier: str, overrides: Mapping[str, Any] | None = None) -> TrialSpec:
        """The trial behind one seed of one arm of one cell (same for every cell sharing arm, env and budget);
        ``overrides``: one point of the arm's sweep (default: the arm's own)."""
        return TrialSpec(
            algo=arm.algo,
            env_id=cell.env_id,
            seed=seed,
            total_timesteps=self.run_budget(cell, arm, tier),
            overrides=dict(overrides) if overrides is not None else arm.overrides_for(cell.env_id),
            env_kwargs=cell.arm_env_kwargs(arm),
            n_eval_episodes=cell.n_eval_episodes or self.n_eval_episodes,
            eval_freq=cell.eval_freq,
            study=self.study,
            eval_deterministic=cell.eval_protocol == "deterministic",
            kernels=self.kernels or default_kernels(),
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
                keys = []  # seed-major: every point of a sweep for seed 0, then seed 1, ...
                for seed in seeds if seeds is not None else cell.seeds:
                    for layer in arm.sweep_layers(cell.env_id):
                        trial = self.trial_spec(cell, arm, seed, tier, layer).resolve()
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
    if not math.isfinite(value):
        raise UserError(f"{where}: expected a finite number, got {value!r} (a claim is a number the source printed)")
    return float(value)


def _optional_number(value: Any, where: str) -> float | None:
    return None if value is None else _number(value, where)


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{where}: expected an integer >= 1, got {value!r}")
    return value


def _optional_int(value: Any, where: str) -> int | None:
    return None if value is None else _positive_int(value, where)


def _pair(value: Any, where: str) -> tuple[float, float] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise UserError(f"{where}: expected [low, high], got {value!r}")
    low, high = _number(value[0], where), _number(value[1], where)
    if low > high:
        raise UserError(f"{where}: expected [low, high] with low <= high, got {value!r}")
    return low, high


def _choice(value: Any, allowed: Sequence[str], where: str) -> str:
    if value not in allowed:
        raise UserError(f"{where}: unknown value {value!r}; allowed: {', '.join(allowed)}")
    return str(value)


def _decimals_of(value: float) -> int:
    """Decimal places of a number as Python prints it shortest (``8.8`` -> 1, ``6.06`` -> 2, ``500.0`` -> 0)."""
    text = repr(float(value))
    if "e" in text:
        return 6
    frac = text.partition(".")[2].rstrip("0")
    return len(frac)


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
    """Claimed value, ±, kind, budget and env of a ``published = { source, algo, env_id }`` cell, read from
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
    over_seeds = str(row["std_over"]) == "seeds"
    kind_source = f"{row['source']}: {row['std_meaning']}"
    if not over_seeds:
        kind_source += f" ({int(row['n_eval_episodes'])} episodes, {row['eval_protocol']} actions)"
    out: dict[str, Any] = {
        "claimed": float(row["mean"]),
        "claimed_pm": float(row["std"]),
        "pm_over": str(row["std_meaning"]),
        "budget": int(row["n_timesteps"]),
        "budget_source": f"{row['source']} {row['source_ref']}",
        "env": str(row["suite_env_id"]),
        "note": str(row["version_note"]),
        "kind": "mean_over_seeds" if over_seeds else "single_agent",
        "kind_source": kind_source,
        "decimals": int(row["mean_decimals"]),
    }
    if over_seeds:
        out["claim_n"] = int(row["n_runs"])
    else:
        out["claim_episodes"] = int(row["n_eval_episodes"])
    if row["eval_protocol"] in EVAL_PROTOCOLS:  # else the training episodes themselves (CleanRL): no evaluation
        out["eval_protocol"] = str(row["eval_protocol"])
    return out


def tolerance_of(claims: ClaimSet, cell: Cell) -> tuple[float, str]:
    """The cell's tolerance in the units of its measured quantity, and where it comes from.

    A stated ``tolerance`` wins. Otherwise a return (``final_return``, ``final_train_return``) on an env with a random
    and a reference score takes ``tolerance_fraction`` of that range (the set's default, a tenth); an improvement's is
    at most half its claimed gain, so that agreement within it also means a gain of the claimed sign.

    Raises:
        UserError: a cell whose metric or env gives no default (the set must state one).
    """
    from suite.claims.metrics import RETURN_METRICS
    from suite.stats.references import env_reference

    if cell.tolerance is not None:
        return cell.tolerance, cell.tolerance_source or "stated for this cell"
    ref = env_reference(cell.env_id, cell.arm_env_kwargs(cell.arm))
    if cell.metric not in RETURN_METRICS or not ref.normalised or cell.kind == "ratio":
        units = "ratio units" if cell.kind == "ratio" else f"units of {cell.metric}"
        raise UserError(
            f"{claims.path or claims.name} {cell.label}: no default tolerance for {cell.metric} on {cell.env_id} "
            f"(defaults exist for returns on envs with random and reference scores): state tolerance = <{units}>"
        )
    span = ref.reference_score - ref.random_score
    tol = claims.tolerance_fraction * span
    text = (
        f"{claims.tolerance_fraction:.0%} of {cell.env_label}'s random-to-reference range "
        f"({ref.random_score:g} to {ref.reference_score:g}: {span:.4g})"
    )
    gain = cell.claimed_gain if cell.kind == "improvement" else None
    if gain is not None and gain != 0 and tol > abs(gain) / 2:
        tol = abs(gain) / 2
        text += f", capped at half the claimed gain ({abs(gain):.4g} / 2) so that agreement implies a gain"
    return tol, text


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


def _claim_fields(merged: Mapping[str, Any], versus: Arm | None, stand_in: bool, at: str) -> dict[str, Any]:
    """Validate the claim part of a cell (kind, claimed number or range or direction, its noise) and return it."""
    kind = _choice(merged.get("kind", "single_run" if versus is None else "improvement"), KINDS, f"{at} kind")
    comparison = COMPARISON_OF[kind]
    if (comparison == "value") != (versus is None):
        need = "needs versus = <arm>" if versus is None else "takes no versus (a value of one arm)"
        raise UserError(f"{at}: kind {kind!r} {need}")
    claimed = _optional_number(merged.get("claimed"), f"{at} claimed")
    claimed_a = _optional_number(merged.get("claimed_a"), f"{at} claimed_a")
    claimed_b = _optional_number(merged.get("claimed_b"), f"{at} claimed_b")
    claimed_range = _pair(merged.get("claimed_range"), f"{at} claimed_range")
    direction = merged.get("direction")
    if direction is not None:
        direction = _choice(direction, ("higher", "lower"), f"{at} direction")
        if kind != "improvement":
            raise UserError(f"{at}: a direction is an improvement claimed without a number (kind = 'improvement')")
    stated = [x for x in ("claimed", "claimed_range", "direction") if merged.get(x) is not None]
    if comparison != "value" and claimed_a is not None and claimed_b is not None and "claimed" not in stated:
        stated.append("claimed_a and claimed_b")
    if len(stated) != 1:
        raise UserError(
            f"{at}: give exactly one of claimed, claimed_range, direction (an improvement or ratio may give "
            f"claimed_a and claimed_b instead); got {', '.join(stated) or 'none'}"
        )
    relative = bool(merged.get("relative", False))
    if relative:
        if kind != "improvement" or claimed is None:
            raise UserError(f"{at}: relative = true is a percentage gain of an improvement (claimed = <percent>)")
        if claimed_a is None or claimed_b is None or claimed_b == 0:
            raise UserError(
                f"{at}: a relative gain needs its endpoints claimed_a and claimed_b: it is judged as their difference in "
                "score units (a percentage of a raw return depends on the env's reward offset)"
            )
        implied = 100 * (claimed_a - claimed_b) / abs(claimed_b)
        if abs(implied - claimed) > 0.5 * 10.0 ** -_decimals_of(claimed) + 1e-9:
            raise UserError(
                f"{at}: claimed {claimed:+g}% but its endpoints give {implied:+.3g}% ({claimed_b:g} -> {claimed_a:g})"
            )
    elif comparison == "improvement" and claimed is not None and claimed_a is not None and claimed_b is not None:
        if abs(claimed_a - claimed_b - claimed) > 1e-9 * max(1.0, abs(claimed)):
            raise UserError(f"{at}: claimed {claimed:+g} but its endpoints differ by {claimed_a - claimed_b:+g}")
    pm = _optional_number(merged.get("claimed_pm"), f"{at} claimed_pm")
    claim_n = _optional_int(merged.get("claim_n"), f"{at} claim_n")
    claim_episodes = _optional_int(merged.get("claim_episodes"), f"{at} claim_episodes")
    if kind == "mean_over_seeds" and (pm is None or claim_n is None or claim_n < 2):
        raise UserError(f"{at}: kind 'mean_over_seeds' needs claimed_pm (the std over seeds) and claim_n >= 2 (the seeds)")
    if kind == "single_agent" and (pm is None or claim_episodes is None):
        raise UserError(f"{at}: kind 'single_agent' needs claimed_pm (the std over episodes) and claim_episodes")
    if kind == "single_run" and pm is not None:
        raise UserError(f"{at}: kind 'single_run' has no claimed_pm (a ± is a mean_over_seeds or single_agent claim)")
    if kind == "ratio" and any(x is not None and x <= 0 for x in (claimed, claimed_a, claimed_b)):
        raise UserError(f"{at}: a ratio compares positive numbers; got a claimed value <= 0")
    tolerance = _optional_number(merged.get("tolerance"), f"{at} tolerance")
    if tolerance is not None and tolerance < 0:
        raise UserError(f"{at}: tolerance must be >= 0, got {tolerance!r}")
    decimals = merged.get("decimals")
    if decimals is not None and (isinstance(decimals, bool) or not isinstance(decimals, int) or decimals < 0):
        raise UserError(f"{at} decimals: expected an integer >= 0, got {decimals!r}")
    role = _choice(merged.get("role", "claim"), ROLES, f"{at} role")
    if stand_in and role == "reference":
        raise UserError(f"{at}: a stand-in set has no reference columns (every cell is the stand-in's own)")
    return {
        "kind": kind,
        "kind_source": str(merged.get("kind_source", "")),
        "role": role,
        "relative": relative,
        "claimed": claimed,
        "claimed_pm": pm,
        "pm_over": str(merged.get("pm_over", "not stated" if pm is not None else "")),
        "claimed_a": claimed_a,
        "claimed_b": claimed_b,
        "claimed_range": claimed_range,
        "direction": direction,
        "decimals": decimals,
        "claim_n": claim_n,
        "claim_episodes": claim_episodes,
        "claim_noise": _choice(merged.get("claim_noise", "single_run"), ("single_run", "none"), f"{at} claim_noise"),
        "tolerance": tolerance,
        "tolerance_source": str(merged.get("tolerance_source", "")),
        "attainable": _pair(merged.get("attainable"), f"{at} attainable"),
        "attainable_source": str(merged.get("attainable_source", "")),
        "eval_protocol": _choice(merged.get("eval_protocol", "deterministic"), EVAL_PROTOCOLS, f"{at} eval_protocol"),
    }


def parse_claim_set(data: Mapping[str, Any], *, default_name: str = "claims", path: str | None = None) -> ClaimSet:
    """Validate a claim set's TOML table (see the module docstring) and build it.

    Raises:
        UserError: one line naming the first problem (unknown key, algorithm, env, metric, tier, statistic,
            kind, arm, hyperparameter; missing claimed value; a bad or non-finite number).
    """
    from suite.claims.metrics import check_metric, get_metric

    where = path or default_name
    _check_keys(data, SET_KEYS, where)
    name = str(data.get("name", default_name))
    tier = str(data.get("tier", "standard"))
    if tier not in TIERS:
        raise UserError(f"{where}: unknown tier {tier!r}; allowed: {', '.join(TIERS)}")
    stand_in = str(data.get("stand_in", ""))
    set_seeds = tuple(parse_seeds(data.get("seeds", "0-4")))
    set_eval_freq = int(data.get("eval_freq", 0))
    defaults = {k: data[k] for k in ("metric", "statistic", "kind", "kind_source", "eval_protocol", "tolerance",
                                     "tolerance_source") if k in data}  # fmt: skip
    defaults.setdefault("metric", "final_return")
    defaults.setdefault("statistic", "mean")
    fraction = _number(data.get("tolerance_fraction", DEFAULT_TOLERANCE_FRACTION), f"{where} tolerance_fraction")
    if not 0 < fraction < 1:
        raise UserError(f"{where}: tolerance_fraction must be in (0, 1), got {fraction!r}")
    multiplicity = _choice(data.get("multiplicity", "holm"), MULTIPLICITY, f"{where} multiplicity")
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
        sweep = entry.get("sweep", {})
        if (
            not isinstance(sweep, Mapping)
            or len(sweep) > 1
            or any(not isinstance(v, list) or len(v) < 2 for v in sweep.values())
        ):
            raise UserError(f"{at}: sweep must be {{ <hyperparameter> = [two or more values] }} (one hyperparameter)")
        arms[arm_name] = Arm(
            name=arm_name,
            algo=algo,
            label=str(entry.get("label", algo)),
            overrides=dict(entry.get("overrides", {})),
            hyperparams_from=get_algorithm(str(donor)).id if donor else None,
            note=str(entry.get("note", "")),
            env_kwargs=dict(entry.get("env_kwargs", {})),
            sweep_key=next(iter(sweep), None),
            sweep_values=tuple(next(iter(sweep.values()), ())),
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
            merged = {**defaults, **{k: v for k, v in row.items() if k != "cells"}, **entry}
            if "published" in entry:
                merged = {**defaults, **_published_cell(entry["published"], at),
                          **{k: v for k, v in row.items() if k != "cells"}, **entry}  # fmt: skip
            for required in ("column", "arm", "env", "budget"):
                if required not in merged:
                    raise UserError(f"{at}: missing {required}")
            env_id = str(merged["env"])
            get_env_spec(env_id)
            try:
                env_kwargs = resolve_env_kwargs(env_id, dict(merged.get("env_kwargs", {})))
            except UserError as exc:
                raise UserError(f"{at}: {exc}") from None
            versus = arm_named(entry["versus"], at) if "versus" in entry else None
            claim = _claim_fields(merged, versus, bool(stand_in), at)
            statistic = _choice(merged.get("statistic"), STATISTICS, f"{at} statistic")
            metric = str(merged["metric"])
            params = {k: merged[k] for k in METRIC_PARAMS if k in merged}
            try:
                check_metric(metric, params)
            except UserError as exc:
                raise UserError(f"{at}: {exc}") from None
            if statistic == "median" and not get_metric(metric).censored:
                raise UserError(
                    f"{at}: statistic 'median' is for a time to an event (Kaplan-Meier); {metric!r} takes the mean"
                )
            arm = arm_named(merged["arm"], at)
            cells.append(
                Cell(
                    row=label,
                    column=str(merged["column"]),
                    arm=arm,
                    versus=versus,
                    env_id=env_id,
                    env_kwargs=env_kwargs,
                    budget=_claim_budget(merged["budget"], budgets, env_id, arm.algo, at),
                    budget_source=str(merged.get("budget_source", "")),
                    seeds=tuple(parse_seeds(merged["seeds"])) if "seeds" in merged else set_seeds,
                    metric=metric,
                    statistic=statistic,
                    params=params,
                    eval_freq=int(merged.get("eval_freq", set_eval_freq)),
                    n_eval_episodes=_optional_int(merged.get("n_eval_episodes"), f"{at} n_eval_episodes"),
                    note=str(merged.get("note", "")),
                    **claim,
                )
            )
    claims = ClaimSet(
        name=name,
        title=str(data.get("title", name)),
        source=str(data.get("source", "")),
        location=str(data.get("location", "")),
        description=str(data.get("description", "")),
        stand_in=stand_in,
        tier=tier,
        seeds=set_seeds,
        n_eval_episodes=_positive_int(data.get("n_eval_episodes", 10), f"{where} n_eval_episodes"),
        budgets=budgets,
        arms=arms,
        cells=tuple(cells),
        notes=tuple(str(n) for n in data.get("notes", [])),
        path=path,
        tolerance_fraction=fraction,
        multiplicity=multiplicity,
        findings=tuple(str(n) for n in data.get("findings", [])),
        kernels=check_kernels(data["kernels"]) if "kernels" in data else None,
    )
    # Every cell needs a tolerance (stated, or the env's default), and every trial must resolve (algorithm x env
    # compatibility, override keys and values) before anything runs.
    for cell in claims.cells:
        tolerance_of(claims, cell)
    claims.expand(tier)
    return claims
