"""Per-environment reference numbers: sample-efficiency threshold, random-policy and reference scores.

The numbers live in ``suite/data/envs.toml`` (STYLE.md: data in files, not in code), each with its source. An env
that file does not list takes them from its :class:`suite.envs.EnvSpec` (a plugin's data; for an inferred
gymnasium id, the threshold is gymnasium's ``reward_threshold``); without a random and a reference score its
results are **not normalised**: the normalised columns are NaN ("n/a"), the across-env aggregates leave it out,
and the source says so. Normalised score = ``(score - random_score) / (reference_score - random_score)``, so a uniformly random
policy scores 0 and the reference agent scores 1 (Agarwal et al. 2021, "Deep RL at the Edge of the
Statistical Precipice", Sec. 3, the usual human/random normalisation with a trained agent in place of the human).
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from suite.errors import UserError
from suite.stats.equivalence import Lattice

ENVS_DATA_FILE = "envs.toml"
"""File name inside the ``suite.data`` package directory."""


@dataclass(frozen=True)
class EnvReference:
    """Reference numbers of one environment (with its kwargs), as used by the statistics.

    Attributes:
        threshold: Sample-efficiency target; a run reaches it at the first evaluation whose mean return is >= it.
        random_score: Expected return of a uniformly random policy (normalised score 0).
        reference_score: Published trained-agent score (normalised score 1).
        source: Where the three numbers come from, one clause each (``threshold: ...; random: ...; reference: ...``).
        env_id: The environment id the numbers belong to.
    """

    threshold: float
    """Sample-efficiency target in raw return units."""
    random_score: float
    """Expected return of a uniformly random policy."""
    reference_score: float
    """Published trained-agent return."""
    source: str
    """Sources of the three numbers."""
    env_id: str = ""
    """Environment id (key of ``envs.toml``)."""
    min_return: float = float("nan")
    """Lowest episode return the env can produce (NaN: no finite bound known)."""
    max_return: float = float("nan")
    """Highest episode return the env can produce (NaN: no finite bound known): the cap of the ceiling rule."""
    lattice: Lattice | None = None
    """The evenly spaced returns one episode can have, when they are (None otherwise)."""
    range_source: str = ""
    """Why the range and the lattice are what they are."""

    @property
    def bounded(self) -> bool:
        """Whether both ends of the return range are known."""
        return bool(np.isfinite(self.min_return) and np.isfinite(self.max_return))

    @property
    def normalised(self) -> bool:
        """Whether both scores are known, so normalised scores exist (else they are NaN)."""
        return bool(np.isfinite(self.random_score) and np.isfinite(self.reference_score))

    def normalise(self, scores: np.ndarray | float) -> np.ndarray:
        """Map raw returns to normalised scores: random policy -> 0, reference -> 1.

        Args:
            scores: Raw returns, any shape.

        Returns:
            Array of the same shape, ``(scores - random_score) / (reference_score - random_score)``.
        """
        return (np.asarray(scores, dtype=float) - self.random_score) / (self.reference_score - self.random_score)


@functools.cache
def _load_envs_data() -> Mapping[str, Any]:
    """Parse ``suite/data/envs.toml`` once; returns the ``envs`` table keyed by env id."""
    text = resources.files("suite").joinpath("data", ENVS_DATA_FILE).read_text(encoding="utf-8")
    return tomllib.loads(text)["envs"]


def known_env_ids() -> list[str]:
    """Env ids that have reference data, sorted."""
    return sorted(_load_envs_data())


def _text_match_reference(entry: Mapping[str, Any], env_kwargs: Mapping[str, Any]) -> tuple[float, float, float, Lattice]:
    """Threshold, random score, reference score and return lattice of ``TextMatch-v0`` for its kwargs (rules in
    ``envs.toml``)."""
    rules = entry["text_match"]
    language = env_kwargs.get("language", rules["default_language"])
    sizes: Mapping[str, int] = rules["charset_sizes"]
    if language not in sizes:
        raise UserError(f"no TextMatch-v0 reference data for language {language!r}; allowed: {', '.join(sorted(sizes))}")
    target = env_kwargs.get("target") or rules["default_targets"][language]
    n, length = sizes[language], len(target)
    match, mismatch = float(rules["match_reward"]), float(rules["mismatch_reward"])
    maximum = length * match
    random_score = length * (match / n + mismatch * (n - 1) / n)
    lattice = Lattice(start=length * mismatch, step=match - mismatch, count=length + 1)
    return maximum - float(entry["threshold_from_max"]), random_score, maximum, lattice


def env_reference(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> EnvReference:
    """Reference numbers for ``env_id`` built with ``env_kwargs``.

    Args:
        env_id: A gymnasium id with data in ``suite/data/envs.toml`` (e.g. ``"CartPole-v1"``, ``"ALE/Pong-v5"``).
        env_kwargs: The kwargs the env was made with. Only ``TextMatch-v0`` uses them (``language``, ``target``);
            other envs' numbers do not depend on kwargs such as ``frameskip``.

    Returns:
        The env's :class:`EnvReference`.

    Raises:
        UserError: an unsupported TextMatch language. An env without data is not an error: see the module doc.
    """
    data = _load_envs_data()
    if env_id not in data:
        return _spec_reference(env_id)
    entry = data[env_id]
    nan = float("nan")
    lattice: Lattice | None
    if "text_match" in entry:
        threshold, random_score, reference_score, lattice = _text_match_reference(entry, env_kwargs or {})
        low, high = lattice.start, lattice.start + lattice.step * (lattice.count - 1)
    else:
        threshold, random_score = float(entry["threshold"]), float(entry["random_score"])
        reference_score = float(entry["reference_score"])
        low, high = float(entry.get("min_return", nan)), float(entry.get("max_return", nan))
        grid = entry.get("lattice")
        lattice = Lattice(float(grid["start"]), float(grid["step"]), int(grid["count"])) if grid else None
    source = (
        f"threshold: {entry['threshold_source']}; random: {entry['random_source']}; reference: {entry['reference_source']}"
    )
    range_source = "; ".join(str(entry[k]) for k in ("range_source", "lattice_source") if k in entry)
    return EnvReference(threshold, random_score, reference_score, source, env_id, low, high, lattice, range_source)


NOT_NORMALISED = "not normalised"
"""How a source starts when an env has no random/reference scores."""


def _spec_reference(env_id: str) -> EnvReference:
    """Reference numbers of an env ``envs.toml`` does not list: from its EnvSpec, NaN where it gives none."""
    from suite.envs import get_env_spec

    nan = float("nan")
    try:
        spec = get_env_spec(env_id)
    except UserError:  # a plugin env whose plugin is not loaded in this process: nothing is known
        spec = None
    threshold = nan if spec is None or spec.threshold is None else float(spec.threshold)
    parts = [spec.references_source] if spec is not None and spec.references_source else []
    if spec is not None and spec.normalised:
        assert spec.random_score is not None and spec.reference_score is not None
        return EnvReference(threshold, float(spec.random_score), float(spec.reference_score), "; ".join(parts), env_id)
    parts.append(
        f"{NOT_NORMALISED}: no random and reference scores for {env_id} in suite/data/{ENVS_DATA_FILE} or its env spec"
    )
    return EnvReference(threshold, nan, nan, "; ".join(parts), env_id)
