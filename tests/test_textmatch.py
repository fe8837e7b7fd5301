"""TextMatch-v0 (source document 003): exact rewards, termination and text on hand-made action sequences."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import suite.envs  # noqa: F401  (registers TextMatch-v0)
from suite.textmatch import CHARSETS, TextMatchEnv


def _actions(env: TextMatchEnv, text: str) -> list[int]:
    return [env.charset.index(c) for c in text]


def _play(env: TextMatchEnv, text: str) -> tuple[list[float], list[bool], list[float], list[str]]:
    """Write ``text``; returns per-step rewards, terminated flags, observations and info texts."""
    rewards, terms, obs_values, texts = [], [], [], []
    for a in _actions(env, text):
        obs, reward, terminated, truncated, info = env.step(a)
        assert truncated is False
        assert obs.shape == (1,) and obs.dtype == np.float32
        rewards.append(reward)
        terms.append(terminated)
        obs_values.append(float(obs[0]))
        texts.append(info["text"])
    return rewards, terms, obs_values, texts


def test_english_default_target_perfect_episode() -> None:
    env = TextMatchEnv()
    assert env.target == "hello" and env.action_space == gym.spaces.Discrete(26)
    obs, info = env.reset(seed=0)
    assert obs.tolist() == [0.0] and info == {"text": ""}
    rewards, terms, obs_values, texts = _play(env, "hello")
    assert rewards == [1.0] * 5
    assert sum(rewards) == len("hello")  # max return = len(target)
    assert terms == [False, False, False, False, True]
    assert obs_values == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert texts == ["h", "he", "hel", "hell", "hello"]


def test_english_mixed_episode_rewards() -> None:
    env = TextMatchEnv("english", "hello")
    env.reset()
    rewards, terms, _, texts = _play(env, "hxllz")
    assert rewards == [1.0, -0.1, 1.0, 1.0, -0.1]
    assert sum(rewards) == pytest.approx(2.8)
    assert terms[-1] and not any(terms[:-1])
    assert texts[-1] == "hxllz"


def test_code_language_default_and_custom_target() -> None:
    env = TextMatchEnv("code")
    assert env.target == "12345" and env.action_space == gym.spaces.Discrete(10) and env.charset == "0123456789"
    env.reset()
    rewards, terms, _, texts = _play(env, "02395")
    assert rewards == [-0.1, 1.0, 1.0, -0.1, 1.0]
    assert terms == [False, False, False, False, True]
    assert texts[-1] == "02395"

    env = TextMatchEnv("code", "907")
    env.reset()
    rewards, terms, obs_values, _ = _play(env, "907")
    assert rewards == [1.0, 1.0, 1.0] and terms == [False, False, True]
    assert obs_values == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_reset_starts_a_new_string() -> None:
    env = TextMatchEnv("english", "ab")
    env.reset()
    _play(env, "ab")
    obs, info = env.reset()
    assert obs.tolist() == [0.0] and info["text"] == ""
    rewards, _, _, texts = _play(env, "bb")
    assert rewards == [-0.1, 1.0] and texts == ["b", "bb"]


@pytest.mark.parametrize(
    ("language", "target", "match"),
    [
        ("french", None, "unsupported TextMatch language 'french'; allowed: code, english"),
        ("english", "", "non-empty"),
        ("english", "Hello", r"'H'.*outside the 'english' charset"),
        ("code", "12a", r"'a'.*outside the 'code' charset"),
    ],
)
def test_bad_language_or_target_raises(language: str, target: str | None, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TextMatchEnv(language, target)


def test_misuse_raises() -> None:
    env = TextMatchEnv("code", "1")
    env.reset()
    with pytest.raises(ValueError, match="outside Discrete"):
        env.step(10)
    env.step(1)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(1)


@pytest.mark.parametrize("language", sorted(CHARSETS))
def test_check_env_passes_without_warnings(language: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(gym.make("TextMatch-v0", language=language, render_mode="ansi").unwrapped)


def test_registered_with_gymnasium() -> None:
    env = gym.make("TextMatch-v0", language="code")
    assert isinstance(env.unwrapped, TextMatchEnv) and env.unwrapped.target == "12345"
    assert env.spec is not None and env.spec.max_episode_steps is None  # ends by termination, not TimeLimit
