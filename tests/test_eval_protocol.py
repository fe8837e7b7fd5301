"""The evaluation protocol as a trial option: deterministic (the policy's mode, the default) or sampled actions
(rl-baselines3-zoo's Atari agents). Existing trial keys do not change; both the suite's policies and SB3's agents
honour it; a sampled evaluation never moves the training's random streams."""

from __future__ import annotations

import numpy as np
import pytest

import suite.algorithms  # noqa: F401  (registers every algorithm)
from suite.trial import TrialSpec, run_trial

HELLO = {"language": "english", "target": "hello"}


def spec(algo: str, **kw: object) -> TrialSpec:
    base: dict[str, object] = {"algo": algo, "env_id": "TextMatch-v0", "seed": 3, "total_timesteps": 400,
                               "env_kwargs": HELLO, "n_eval_episodes": 30, "memory_profile": "off"}  # fmt: skip
    return TrialSpec(**{**base, **kw})  # type: ignore[arg-type]


def test_the_default_protocol_keeps_every_existing_trial_key() -> None:
    default, explicit, sampled = spec("ppo"), spec("ppo", eval_deterministic=True), spec("ppo", eval_deterministic=False)
    assert default.resolve().key == explicit.resolve().key
    assert sampled.resolve().key != default.resolve().key


@pytest.mark.parametrize("algo", ["ppo", "sb3-ppo"])
def test_sampled_evaluation_is_honoured_and_leaves_training_alone(algo: str) -> None:
    """TextMatch resets to the same observation every episode, so a deterministic policy writes the same string in
    every evaluation episode (zero spread), while sampled actions write different ones; the training curve is the
    same bit for bit under both protocols, and a sampled evaluation repeats exactly."""
    greedy = run_trial(spec(algo).resolve())
    sampled = run_trial(spec(algo, eval_deterministic=False).resolve())
    again = run_trial(spec(algo, eval_deterministic=False).resolve())
    assert greedy["status"] == sampled["status"] == "ok", (greedy["error"], sampled["error"])
    assert np.ptp(greedy["evals"][-1]["returns"]) == 0.0
    assert np.ptp(sampled["evals"][-1]["returns"]) > 0.0
    assert sampled["curve"] == greedy["curve"] and sampled["updates"] == greedy["updates"]
    assert [e["returns"] for e in again["evals"]] == [e["returns"] for e in sampled["evals"]]
