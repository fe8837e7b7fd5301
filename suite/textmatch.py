"""``TextMatch-v0``: the "multilingual text environment" of source document 003 (seeds/README.md).

The agent writes a fixed-length string one character per step. The action is an index into the
language's charset; the observation is a single float, the fraction of the string written so far;
the reward is +1.0 when the written character matches the target at that position and -0.1 otherwise.
The episode terminates after ``len(target)`` steps, so the maximum return is ``len(target)`` and a
uniformly random policy scores ``len(target) * (1.0 / n - 0.1 * (n - 1) / n)`` on average
(``n`` = charset size).

Registration with gymnasium happens in :mod:`suite.envs.specs` (on import), not here, so this module has no
side effects; the trial-end metric that samples generations is :mod:`suite.envs.metrics`.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

CHARSETS: MappingProxyType[str, str] = MappingProxyType(
    {
        "english": "abcdefghijklmnopqrstuvwxyz",
        "code": "0123456789",
    }
)
"""Language name -> ordered charset; action ``a`` writes ``charset[a]`` (document 003)."""

DEFAULT_TARGETS: MappingProxyType[str, str] = MappingProxyType({"english": "hello", "code": "12345"})
"""Language name -> target string used when none is given (document 003)."""

MATCH_REWARD = 1.0
"""Reward for a character equal to the target at that position."""

MISMATCH_REWARD = -0.1
"""Reward for any other character."""


def validate_text_target(language: str, target: str | None) -> str:
    """Check a (language, target) pair and return the target to use.

    Args:
        language: One of :data:`CHARSETS`.
        target: The string to write; ``None`` means the language's default target.

    Returns:
        The validated target string.

    Raises:
        ValueError: unsupported language, empty target, or a target character outside the charset.
    """
    if language not in CHARSETS:
        raise ValueError(f"unsupported TextMatch language {language!r}; allowed: {', '.join(sorted(CHARSETS))}")
    if target is None:
        return DEFAULT_TARGETS[language]
    if not isinstance(target, str) or not target:
        raise ValueError(f"TextMatch target must be a non-empty string, got {target!r}")
    charset = CHARSETS[language]
    bad = sorted({c for c in target if c not in charset})
    if bad:
        raise ValueError(
            f"TextMatch target {target!r} has characters {''.join(bad)!r} outside the {language!r} charset {charset!r}"
        )
    return target


class TextMatchEnv(gym.Env[np.ndarray, np.int64]):
    """Write ``target`` one character per step.

    Spaces:
        action: ``Discrete(len(charset))`` (26 for ``english``, 10 for ``code``).
        observation: ``Box(0, 1, (1,), float32)``, ``steps_written / len(target)``.

    Info (reset and step): ``"text"``, the string written so far (``""`` after reset).
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, language: str = "english", target: str | None = None, render_mode: str | None = None) -> None:
        """Build the env.

        Args:
            language: ``"english"`` (a-z) or ``"code"`` (0-9).
            target: String to write; ``None`` picks the language default (``hello`` / ``12345``).
            render_mode: ``None`` or ``"ansi"``.

        Raises:
            ValueError: see :func:`validate_text_target`, or an unsupported render mode.
        """
        self.target = validate_text_target(language, target)
        self.language = language
        self.charset = CHARSETS[language]
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"unsupported render_mode {render_mode!r}; allowed: None, 'ansi'")
        self.render_mode = render_mode
        self.action_space = spaces.Discrete(len(self.charset))
        self.observation_space = spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self._written: list[str] = []

    def _obs(self) -> np.ndarray:
        """Observation, shape ``(1,)`` float32: fraction of the target written."""
        return np.array([len(self._written) / len(self.target)], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start a new string. The env is deterministic; the seed only seeds ``np_random`` (gymnasium API)."""
        super().reset(seed=seed)
        self._written = []
        return self._obs(), {"text": ""}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        """Write ``charset[action]``.

        Returns:
            ``(obs (1,), reward, terminated, truncated=False, {"text": written so far})``;
            ``terminated`` is True exactly at step ``len(target)``.

        Raises:
            RuntimeError: stepping after termination without a reset.
            ValueError: action outside the action space.
        """
        if len(self._written) >= len(self.target):
            raise RuntimeError("TextMatch episode is over; call reset() before step()")
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} outside Discrete({len(self.charset)})")
        char = self.charset[int(action)]
        reward = MATCH_REWARD if char == self.target[len(self._written)] else MISMATCH_REWARD
        self._written.append(char)
        terminated = len(self._written) == len(self.target)
        return self._obs(), reward, terminated, False, {"text": "".join(self._written)}

    def render(self) -> str | None:
        """``"ansi"``: the text written so far against the target."""
        if self.render_mode == "ansi":
            return f"{''.join(self._written)!r} / {self.target!r}"
        return None


SAMPLE_DIVERSITY_EPISODES = 100
"""Sampled generations behind ``sample_diversity`` (one per evaluation seed ``eval_seeds(seed, 100)``)."""


def sample_diversity(texts: list[str]) -> float:
    """Fraction of distinct strings among generations: ``len(set(texts)) / len(texts)`` (1.0: all different)."""
    if not texts:
        raise ValueError("sample_diversity needs at least one generation")
    return len(set(texts)) / len(texts)
