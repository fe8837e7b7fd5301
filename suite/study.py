"""Studies: a TOML file naming algorithms x envs x seeds, with step budgets per tier.

A study file (see ``suite/studies/*.toml``)::

    name = "default"
    description = "..."
    tier = "quick"                       # default tier; --tier overrides
    seeds = "0-2"                        # or a list [0, 1, 2]
    n_eval_episodes = 10
    algos = ["*"]                        # "*" = every registered algorithm that can run on the env
    envs = ["CartPole-v1", { id = "TextMatch-v0", kwargs = { language = "code", target = "12345" } }]

    [overrides]                          # optional: per-algorithm hyperparameter overrides
    ppo = { n_epochs = 10 }

    [budgets.quick]                      # optional: replaces suite/data/tiers.toml for this study
    "CartPole-v1" = 100000

    plugins = ["my_algo.py", "my_package"]   # optional: .py files (relative to the study file) or module names

Budgets come from ``suite/data/tiers.toml`` unless the study gives its own: per tier and env, a number or
a table ``{ default = N, <algo> = M }`` for algorithms whose reference budget differs (the zoo trains
DQN on CartPole for 5e4 steps, A2C for 5e5). An env the tiers do not list (any gymnasium id, a plugin's env)
takes its budget from, in order: the study's ``[budgets.<tier>]``, then its env spec's ``budgets`` (a plugin's
data); with none of them it is an error that says how to give one (``--steps N`` or a ``[budgets.<tier>]`` table),
never a silent default.

Plugins listed in ``plugins`` are loaded when the study is parsed and travel with every trial
(``TrialSpec.plugins``). ``algos = ["*"]`` means the built-in algorithms plus those of the study's own plugins
(``plugins`` and ``--plugin``): an installed plugin package does not change what a shipped study runs; name its
ids to include them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.config import load_toml
from suite.envs.specs import get_env_spec
from suite.errors import UserError
from suite.kernels import check_mode as check_kernels
from suite.plugins import load_plugins, normalise_spec
from suite.registry import get_algorithm, list_algorithms

if TYPE_CHECKING:  # imported in Study.trials: it imports torch, which reading a study's budgets (a report) does not need
    from suite.trial import TrialSpec

TIERS = ("smoke", "quick", "standard", "paper")
STUDY_KEYS = {"name", "description", "tier", "seeds", "n_eval_episodes", "algos", "envs", "overrides", "budgets",
              "threads", "eval_freq", "plugins", "kernels"}  # fmt: skip


def parse_seeds(text: str | Sequence[int]) -> list[int]:
    """``"0-4"`` -> [0..4]; ``"0,3"`` -> [0, 3]; ``"0-2,7"`` -> [0, 1, 2, 7]; a list passes through.

    Raises:
        UserError: malformed spec, negative seeds or an empty range.
    """
    if not isinstance(text, str):
        seeds = list(text)
        if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
            raise UserError(f"seeds must be a non-empty list of integers >= 0, got {seeds!r}")
        return seeds
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise UserError(f"bad seed spec {text!r}; use e.g. 0-4, 0,3 or 0-2,7 (integers >= 0)")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise UserError(f"bad seed range {part!r} in {text!r}: the end is below the start")
        out.extend(range(lo, hi + 1))
    return sorted(set(out))


@dataclass(frozen=True)
class EnvEntry:
    """One env of a study: a suite env id and its kwargs."""

    id: str
    kwargs: Mapping[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Study:
    """A parsed study file."""

    name: str
    """Study name (results are grouped by it)."""
    description: str
    """What the study is for."""
    tier: str
    """Default budget tier."""
    seeds: tuple[int, ...]
    """Trial seeds."""
    algos: tuple[str, ...]
    """Algorithm ids, or ``*`` for every registered one that fits each env."""
    envs: tuple[EnvEntry, ...]
    """Envs with kwargs."""
    budgets: Mapping[str, Any]
    """tier -> env id -> steps or {default, algo: steps}."""
    overrides: Mapping[str, Mapping[str, Any]]
    """algo id -> hyperparameter overrides."""
    n_eval_episodes: int = 10
    """Episodes per evaluation."""
    threads: int = 1
    """torch threads per trial."""
    eval_freq: int = 0
    """Env steps between evaluations (0: a tenth of the budget)."""
    path: str | None = None
    """Where it was read from."""
    plugins: tuple[str, ...] = ()
    """Plugins the study loads (absolute ``.py`` paths or module names); every trial carries them."""
    kernels: str | None = None
    """Kernel mode of its trials (``kernels = "portable"``, :mod:`suite.kernels`); None: the default."""

    def budget(self, tier: str, env_id: str, algo: str) -> int:
        """Step budget of ``algo`` on ``env_id`` at ``tier``: the study's, else ``suite/data/tiers.toml``'s, else the
        env spec's (a plugin's data); none of them is a UserError saying how to give one."""
        entry = self.budgets.get(tier, {}).get(env_id)
        if entry is None:
            entry = get_env_spec(env_id).budgets.get(tier)
        if entry is None:
            raise UserError(
                f"no {tier!r} budget for {env_id}: neither study {self.name!r}, suite/data/tiers.toml nor its env spec "
                f'gives one; pass --steps N, or add [budgets.{tier}] "{env_id}" = N to the study file'
            )
        if isinstance(entry, Mapping):
            return int(entry.get(algo, entry["default"]))
        return int(entry)

    def trials(
        self,
        *,
        tier: str | None = None,
        algos: Sequence[str] | None = None,
        envs: Sequence[str] | None = None,
        seeds: Sequence[int] | None = None,
        steps: int | None = None,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
        threads: int | None = None,
    ) -> list[TrialSpec]:
        """Expand into trial specs; CLI filters (``--algo``/``--env``) narrow, ``--seeds``/``--steps`` replace."""
        tier = tier or self.tier
        if tier not in TIERS:
            raise UserError(f"unknown tier {tier!r}; allowed: {', '.join(TIERS)}")
        env_entries = list(self.envs)
        if envs:
            for e in envs:
                get_env_spec(e)
            env_entries = [x for x in env_entries if x.id in envs] or [EnvEntry(e) for e in envs]
        from suite.trial import TrialSpec, default_kernels

        out: list[TrialSpec] = []
        for entry in env_entries:
            env = get_env_spec(entry.id)
            names = self._algos_for(env.action_space, env.observation, algos)
            for algo in names:
                budget = steps or self.budget(tier, entry.id, algo)
                ov = dict(self.overrides.get(algo, {}))
                ov.update((overrides or {}).get("*", {}))
                ov.update((overrides or {}).get(algo, {}))
                for seed in seeds or self.seeds:
                    out.append(
                        TrialSpec(
                            algo=algo,
                            env_id=entry.id,
                            seed=seed,
                            total_timesteps=budget,
                            overrides=ov,
                            env_kwargs=dict(entry.kwargs),
                            threads=threads or self.threads,
                            n_eval_episodes=self.n_eval_episodes,
                            eval_freq=self.eval_freq,
                            study=self.name,
                            plugins=self.plugins,
                            kernels=self.kernels or default_kernels(),
                        )
                    )
        return out

    def _algos_for(self, action_space: str, observation: str, filt: Sequence[str] | None) -> list[str]:
        requested = [get_algorithm(a).id for a in filt] if filt else None
        wanted = list(self.algos)
        if "*" in wanted:
            own = {p.name for p in load_plugins(self.plugins)}
            pool = [
                a.id
                for a in list_algorithms()
                if a.supports(action_space, observation) and (a.plugin is None or a.plugin in own)
            ]
        else:
            pool = [get_algorithm(a).id for a in wanted]
            pool = [a for a in pool if get_algorithm(a).supports(action_space, observation)]
        if requested is not None:
            # An explicit --algo runs even outside the study's list; incompatibility errors come later.
            pool = [a for a in requested if a in pool] or [
                a for a in requested if get_algorithm(a).supports(action_space, observation)
            ]
        return pool


def default_tiers() -> dict[str, Any]:
    return load_toml(resources.files("suite") / "data" / "tiers.toml")  # type: ignore[arg-type]


def merged_budgets(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A study table's budget tiers: the suite's defaults (``suite/data/tiers.toml``) with its ``[budgets.<tier>]``
    tables laid over them."""
    budgets = default_tiers()
    for t, table in data.get("budgets", {}).items():
        if t not in TIERS:
            raise UserError(f"{where}: unknown tier {t!r} in budgets; allowed: {', '.join(TIERS)}")
        budgets = {**budgets, t: {**budgets.get(t, {}), **table}}
    return budgets


def shipped_study_budgets(name: str) -> dict[str, Any]:
    """The budget tiers of the shipped study ``name`` read from its file alone (no plugins loaded, no algorithm or
    env checked: what a report needs, without importing every algorithm and torch)."""
    if name not in list_studies():
        raise UserError(f"unknown study {name!r}; shipped studies: {', '.join(list_studies())}")
    path = resources.files("suite") / "studies" / f"{name}.toml"
    return merged_budgets(load_toml(path), str(path))  # type: ignore[arg-type]


def list_studies() -> list[str]:
    """Names of the studies shipped with the suite."""
    return sorted(p.name[:-5] for p in (resources.files("suite") / "studies").iterdir() if p.name.endswith(".toml"))


def load_study(name_or_path: str, plugins: Sequence[str] = ()) -> Study:
    """A packaged study by name, or a TOML file by path, with ``plugins`` (``--plugin``) added to its own.

    Raises:
        UserError: unknown name, bad file, a plugin that fails to load.
    """
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        candidate = resources.files("suite") / "studies" / f"{name_or_path}.toml"
        if not candidate.is_file():
            raise UserError(f"unknown study {name_or_path!r}; shipped studies: {', '.join(list_studies())} (or a path)")
        path = Path(str(candidate))
    data = load_toml(path)
    return parse_study(data, default_name=path.stem, path=str(path), plugins=plugins)


def parse_study(
    data: Mapping[str, Any], *, default_name: str = "adhoc", path: str | None = None, plugins: Sequence[str] = ()
) -> Study:
    """Validate a study table (a parsed TOML file) and load its plugins.

    Args:
        data: The table.
        default_name: Name when the table has none.
        path: The file it was read from (relative plugin paths are resolved against its folder).
        plugins: More plugins (``--plugin``), loaded before the study's own and carried with its trials.
    """
    where = path or default_name
    unknown = set(data) - STUDY_KEYS
    if unknown:
        raise UserError(f"{where}: unknown study keys {sorted(unknown)}; allowed: {', '.join(sorted(STUDY_KEYS))}")
    listed = data.get("plugins", [])
    if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
        raise UserError(f"{where}: plugins must be a list of .py paths or module names, got {listed!r}")
    base = Path(path).resolve().parent if path else None
    plugin_specs = tuple(dict.fromkeys([normalise_spec(p) for p in plugins] + [normalise_spec(p, base) for p in listed]))
    load_plugins(plugin_specs)  # before the algorithm ids and envs below are checked
    tier = data.get("tier", "quick")
    if tier not in TIERS:
        raise UserError(f"{where}: unknown tier {tier!r}; allowed: {', '.join(TIERS)}")
    algos = data.get("algos", ["*"])
    if isinstance(algos, str):
        algos = [algos]
    for a in algos:
        if a != "*":
            get_algorithm(a)
    envs: list[EnvEntry] = []
    for e in data.get("envs", []):
        if isinstance(e, str):
            envs.append(EnvEntry(e))
        elif isinstance(e, Mapping) and "id" in e:
            envs.append(EnvEntry(str(e["id"]), dict(e.get("kwargs", {}))))
        else:
            raise UserError(f"{where}: an env entry is an id or {{ id = ..., kwargs = {{...}} }}, got {e!r}")
        get_env_spec(envs[-1].id)
    if not envs:
        raise UserError(f"{where}: a study needs at least one env")
    budgets = merged_budgets(data, where)
    overrides = data.get("overrides", {})
    for a in overrides:
        get_algorithm(a)
    return Study(
        name=str(data.get("name", default_name)),
        description=str(data.get("description", "")),
        tier=tier,
        seeds=tuple(parse_seeds(data.get("seeds", "0-2"))),
        algos=tuple(algos),
        envs=tuple(envs),
        budgets=budgets,
        overrides=overrides,
        n_eval_episodes=int(data.get("n_eval_episodes", 10)),
        threads=int(data.get("threads", 1)),
        eval_freq=int(data.get("eval_freq", 0)),
        path=path,
        plugins=plugin_specs,
        kernels=check_kernels(data["kernels"]) if "kernels" in data else None,
    )
