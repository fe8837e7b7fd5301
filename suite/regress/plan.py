"""What a regression run runs: the study both revisions can run, written out as one explicit study file.

Both revisions run the *same* study file, written into the run folder from the requested study (a shipped name
or a path, read with the current code): the tier's budgets, the seeds, the threads and the evaluation protocol
are spelled out in it, so an older revision with other tier budgets still trains for the same number of steps
(a fair comparison: same env-step count, same evaluation seeds). Algorithms or envs that one revision does not
have (``suite list --json`` of each build) are left out and reported, instead of failing the older revision.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from suite.config import stable_hash
from suite.errors import UserError
from suite.registry import get_algorithm
from suite.study import TIERS, EnvEntry, Study, load_study, parse_seeds

DEFAULT_STUDIES = ("regression", "regression-returns", "regression-memory")
"""What ``suite regress`` runs without ``--study``: the shipped CI-sized studies (``suite/studies/*.toml``). Three
files, because a study is algorithms x envs x seeds and each part needs other seeds and budgets: ``regression``
runs every suite algorithm and the SB3 PPO wrapper on CartPole with one seed (exact outcomes, speed, memory per
code path), ``regression-returns`` runs every suite algorithm and the SB3 PPO wrapper on the text env with 3 seeds
at a budget where each learns (a returns test needs seeds; it is what fails a version bump that loses learning),
``regression-memory`` runs ``ppo`` on Pong frames (large observations make a memory regression of the
rollout visible)."""


@dataclass(frozen=True)
class Group:
    """One (algorithm, env) comparison."""

    algo: str
    """Registry id."""
    env: EnvEntry
    """Env id and kwargs."""
    budget: int
    """Steps per trial."""


@dataclass(frozen=True)
class Plan:
    """One study (a *part* of the run) as every revision runs it."""

    study: Study
    """The requested study, as the current code reads it."""
    tier: str
    """Budget tier."""
    seeds: tuple[int, ...]
    """Trial seeds."""
    threads: int
    """torch threads per trial (recorded in every trial key)."""
    groups: tuple[Group, ...]
    """Comparisons, in study order."""
    skipped: tuple[str, ...]
    """Why parts of the study were left out (one sentence each)."""
    toml: str
    """The study file both revisions run."""

    @property
    def n_trials(self) -> int:
        """Trials per revision and repeat."""
        return len(self.groups) * len(self.seeds)

    @property
    def total_steps(self) -> int:
        """Env steps per revision and repeat."""
        return sum(g.budget for g in self.groups) * len(self.seeds)

    @property
    def units(self) -> list[tuple[str, str]]:
        """``(algorithm, env id)`` pairs in study order: what each ``suite run`` of a slot runs."""
        return list(dict.fromkeys((g.algo, g.env.id) for g in self.groups))

    def unit_trials(self, algo: str, env: str) -> int:
        """Trials of one unit (its env entries, which may differ only in kwargs, times the seeds)."""
        return sum(1 for g in self.groups if (g.algo, g.env.id) == (algo, env)) * len(self.seeds)

    @property
    def file_name(self) -> str:
        """Name of its study file in the run folder."""
        return f"study-{self.study.name}.toml"


def plans_id(plans: Sequence[Plan]) -> str:
    """8 hex digits identifying the study files of a run (part of the run folder's name)."""
    return stable_hash([p.toml for p in plans], 8)


def make_plans(
    studies: Sequence[str],
    *,
    tier: str | None,
    seeds: str | None,
    threads: int | None,
    capabilities: Sequence[Mapping[str, Any]],
) -> list[Plan]:
    """:func:`make_plan` for each study (default :data:`DEFAULT_STUDIES`).

    Raises:
        UserError: as :func:`make_plan`, or two studies with the same name.
    """
    plans = [
        make_plan(s, tier=tier, seeds=seeds, threads=threads, capabilities=capabilities) for s in studies or DEFAULT_STUDIES
    ]
    names = [p.study.name for p in plans]
    if len(set(names)) != len(names):
        raise UserError(f"the studies of one regression run need different names, got {', '.join(names)}")
    return plans


def _capability_sets(
    capabilities: Mapping[str, Any],
) -> tuple[dict[str, tuple[set[str], set[str]]], dict[str, tuple[str, str]]]:
    algos: dict[str, tuple[set[str], set[str]]] = {}
    for a in capabilities.get("algorithms", []):
        spaces = (set(a.get("action_spaces", [])), set(a.get("observations", [])))
        for name in [a["id"], *a.get("aliases", [])]:
            algos[name] = spaces
    envs = {e["id"]: (e["action_space"], e["observation"]) for e in capabilities.get("envs", [])}
    return algos, envs


def _ids(capabilities: Mapping[str, Any]) -> set[str]:
    return {a["id"] for a in capabilities.get("algorithms", [])}


def make_plan(
    study_arg: str,
    *,
    tier: str | None,
    seeds: str | None,
    threads: int | None,
    capabilities: Sequence[Mapping[str, Any]],
) -> Plan:
    """The groups every revision can run, and the study file that runs them.

    Args:
        study_arg: study name or TOML path (see :func:`suite.study.load_study`).
        tier: budget tier (default: the study's).
        seeds: seed spec (default: the study's).
        threads: torch threads per trial (default: the study's).
        capabilities: ``suite list --json`` of each revision.

    Raises:
        UserError: unknown study, tier or seed spec, missing budgets, or nothing left that every revision can run.
    """
    study = load_study(study_arg)
    tier = tier or study.tier
    if tier not in TIERS:
        raise UserError(f"unknown tier {tier!r}; allowed: {', '.join(TIERS)}")
    seed_list = tuple(parse_seeds(seeds) if seeds else study.seeds)
    if threads is not None and threads < 1:
        raise UserError(f"--threads must be >= 1, got {threads}")
    sets = [_capability_sets(c) for c in capabilities]
    groups: list[Group] = []
    skipped: list[str] = []
    for entry in study.envs:
        kinds = [envs.get(entry.id) for _, envs in sets]
        if any(k is None for k in kinds):
            skipped.append(f"{entry.id}: not an env of every revision")
            continue
        if "*" in study.algos:  # every algorithm (by id, not alias) that every revision has and that fits the env
            wanted = sorted(set.intersection(*(_ids(c) for c in capabilities)))
        else:
            wanted = list(dict.fromkeys(get_algorithm(a).id for a in study.algos))
        for algo in wanted:
            missing = [i for i, (algos, _) in enumerate(sets) if algo not in algos]
            if missing:
                skipped.append(f"{algo} on {entry.id}: {algo!r} is not an algorithm of every revision")
                continue
            fits = all(
                k is not None and k[0] in algos[algo][0] and k[1] in algos[algo][1]
                for (algos, _), k in zip(sets, kinds, strict=True)
            )
            if not fits:
                if "*" not in study.algos:
                    skipped.append(f"{algo} on {entry.id}: the algorithm cannot run on the env in every revision")
                continue
            groups.append(Group(algo, entry, study.budget(tier, entry.id, algo)))
    if not groups:
        raise UserError(f"study {study.name!r} has no (algorithm, env) that every revision can run" + (
            f" ({'; '.join(skipped)})" if skipped else ""))  # fmt: skip
    plan_threads = threads or study.threads
    return Plan(study, tier, seed_list, plan_threads, tuple(groups), tuple(skipped),
                study_toml(study, tier, seed_list, plan_threads, groups))  # fmt: skip


def study_toml(study: Study, tier: str, seeds: Sequence[int], threads: int, groups: Sequence[Group]) -> str:
    """A study file that every revision of the suite reads the same way (only keys the first study format had)."""
    algos = list(dict.fromkeys(g.algo for g in groups))
    envs: list[EnvEntry] = []
    for g in groups:
        if g.env not in envs:
            envs.append(g.env)
    budgets: dict[str, Any] = {}
    table = study.budgets.get(tier, {})
    for e in envs:
        budgets[e.id] = table[e.id]
    data: dict[str, Any] = {
        "name": study.name,
        "description": _tagged(study.description, tier),
        "tier": tier,
        "seeds": list(seeds),
        "n_eval_episodes": study.n_eval_episodes,
        "threads": threads,
        "eval_freq": study.eval_freq,
        "algos": algos,
        "envs": [{"id": e.id, "kwargs": dict(e.kwargs)} for e in envs],
        "overrides": {a: dict(study.overrides[a]) for a in algos if a in study.overrides},
        "budgets": {tier: budgets},
    }
    return "".join(f"{toml_key(k)} = {toml_value(v)}\n" for k, v in data.items())


def _tagged(description: str, tier: str) -> str:
    """The study's description marked as rewritten (once: a written study read back, e.g. a reference's, keeps its
    text, so the same study gives the same file)."""
    tag = f"[written by suite regress: tier {tier}, explicit budgets]"
    text = description.strip()
    return text if text.endswith(tag) else f"{text} {tag}".strip()


def toml_key(key: str) -> str:
    """A TOML key: bare when it can be, else a quoted string."""
    return key if key and all(c.isalnum() or c in "-_" for c in key) else json.dumps(key)


def toml_value(value: Any) -> str:
    """A TOML value for a string, bool, int, float, list or (inline) table; JSON string escapes are valid TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{toml_key(str(k))} = {toml_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")
