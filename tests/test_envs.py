"""The environment layer: registry, kwargs, vector-env contract (seeding, SAME_STEP, raw episode stats)."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

from suite.envs import (
    EnvSpec,
    EpisodicLife,
    SeededVectorEnv,
    env_label,
    episode_limit,
    final_observations,
    finished_episodes,
    get_env_spec,
    list_envs,
    make_vec_env,
    resolve_env_kwargs,
    wrap_atari_agent_side,
)
from suite.errors import UserError

ALL_IDS = ["CartPole-v1", "LunarLander-v3", "ALE/Pong-v5", "Hopper-v5", "TextMatch-v0"]

# single-env observation shape/dtype and action space of every id (gymnasium docs; Pong after preprocessing)
EXPECTED = {
    "CartPole-v1": ((4,), np.float32, spaces.Discrete(2)),
    "LunarLander-v3": ((8,), np.float32, spaces.Discrete(4)),
    "ALE/Pong-v5": ((4, 84, 84), np.uint8, spaces.Discrete(6)),
    "Hopper-v5": ((11,), np.float64, spaces.Box(-1.0, 1.0, (3,), np.float32)),
    "TextMatch-v0": ((1,), np.float32, spaces.Discrete(26)),
}


def _sub_envs(envs: gym.vector.VectorEnv) -> list[Any]:
    """The sub-envs of a sync vector env (under the suite's wrappers)."""
    return envs.unwrapped.envs  # type: ignore[attr-defined]


def _rollout(envs: SeededVectorEnv, seed: int | list[int], n_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Reset with ``seed``, step with actions from the (reset-seeded) action space; stacked obs and rewards."""
    obs, _ = envs.reset(seed=seed)
    all_obs, all_rewards = [obs.copy()], []
    for _ in range(n_steps):
        obs, reward, _, _, _ = envs.step(envs.action_space.sample())
        all_obs.append(obs.copy())
        all_rewards.append(reward.copy())
    return np.stack(all_obs), np.stack(all_rewards)


# ---------------------------------------------------------------------------------------------------------------
# registry and kwargs


def test_list_envs_and_specs() -> None:
    assert [s.id for s in list_envs()] == ALL_IDS
    pong = get_env_spec("ALE/Pong-v5")
    assert (pong.family, pong.action_space, pong.observation, pong.max_episode_steps) == (
        "atari",
        "discrete",
        "image",
        27000,
    )
    assert get_env_spec("Hopper-v5").action_space == "box"
    text = get_env_spec("TextMatch-v0")
    with pytest.raises(dataclasses.FrozenInstanceError):
        text.id = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        text.default_kwargs["target"] = "x"  # type: ignore[index]
    assert hash(text) == hash(get_env_spec("TextMatch-v0"))
    as_json = json.loads(json.dumps(text.as_dict()))
    assert EnvSpec(**{**as_json, "default_kwargs": as_json["default_kwargs"]}).as_dict() == text.as_dict()


def test_unknown_id_lists_allowed_ids_and_close_gymnasium_ids() -> None:
    with pytest.raises(
        UserError,
        match=r"^unknown env id 'Acrobot-v9'; allowed: CartPole-v1, .*TextMatch-v0, or any registered gymnasium id; "
        r"did you mean 'Acrobot-v1'\?$",
    ):
        get_env_spec("Acrobot-v9")
    with pytest.raises(UserError, match="unknown env id 'NoSuchEnv-v0'; allowed: .*gymnasium id$"):
        make_vec_env("NoSuchEnv-v0", 2)


@pytest.mark.parametrize(
    ("env_id", "expected"),
    [
        ("Acrobot-v1", ("classic", "discrete", "vector", 500, -100.0)),
        ("MountainCarContinuous-v0", ("classic", "box", "vector", 999, 90.0)),
        ("Pendulum-v1", ("classic", "box", "vector", 200, None)),
        ("ALE/Breakout-v5", ("atari", "discrete", "image", 27000, None)),  # 108000 frames / 4 frames per step
    ],
)
def test_any_gymnasium_id_gets_an_inferred_spec(env_id: str, expected: tuple[Any, ...]) -> None:
    spec = get_env_spec(env_id)
    assert (spec.family, spec.action_space, spec.observation, spec.max_episode_steps, spec.threshold) == expected
    assert spec is get_env_spec(env_id)  # inferred once per process
    assert env_id not in {s.id for s in list_envs()}  # usable, not listed


def test_an_inferred_env_runs_through_the_vector_env_contract() -> None:
    envs = make_vec_env("Acrobot-v1", 2, vectorization="sync")
    try:
        first, _ = _rollout(envs, 7, 5)
        second, _ = _rollout(envs, 7, 5)
        assert first.shape == (6, 2, 6) and np.array_equal(first, second)
    finally:
        envs.close()


@pytest.mark.parametrize(
    ("env_id", "match"),
    [
        ("FrozenLake-v1", r"the suite cannot run 'FrozenLake-v1': observation space Discrete\(16\)"),
        ("Blackjack-v1", "the suite cannot run 'Blackjack-v1': observation space Tuple"),
    ],
)
def test_gymnasium_ids_the_suite_cannot_run_are_one_line_user_errors(env_id: str, match: str) -> None:
    with pytest.raises(UserError, match=match) as err:
        get_env_spec(env_id)
    assert "\n" not in str(err.value)


def test_a_gymnasium_id_without_an_episode_limit_is_refused() -> None:
    gym.register("SuiteNoLimit-v0", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv")
    try:
        with pytest.raises(UserError, match="its gymnasium registration has no episode limit"):
            get_env_spec("SuiteNoLimit-v0")
    finally:
        gym.registry.pop("SuiteNoLimit-v0")


def test_env_spec_validates_and_round_trips_new_fields() -> None:
    spec = EnvSpec("X-v0", "other", "box", "vector", 10, random_score=0.0, reference_score=1.0, budgets={"quick": 5})
    assert spec.normalised and dict(spec.budgets) == {"quick": 5}
    with pytest.raises(TypeError):
        spec.budgets["quick"] = 6  # type: ignore[index]
    assert EnvSpec(**json.loads(json.dumps(spec.as_dict()))) == spec
    with pytest.raises(ValueError, match="max_episode_steps must be a positive int"):
        EnvSpec("X-v0", "other", "box", "vector", 0)
    with pytest.raises(ValueError, match="action_space must be 'discrete' or 'box'"):
        EnvSpec("X-v0", "other", "multi", "vector", 10)


def test_resolve_env_kwargs() -> None:
    assert resolve_env_kwargs("TextMatch-v0", None) == {"language": "english", "target": "hello"}
    assert resolve_env_kwargs("TextMatch-v0", {"language": "code"}) == {"language": "code", "target": "12345"}
    assert resolve_env_kwargs("TextMatch-v0", {"target": "abc"}) == {"language": "english", "target": "abc"}
    assert resolve_env_kwargs("CartPole-v1", {}) == {}


@pytest.mark.parametrize(
    ("env_id", "kwargs", "match"),
    [
        (
            "TextMatch-v0",
            {"lang": "code"},
            r"unknown env kwargs \['lang'\] for TextMatch-v0; allowed: language, target",
        ),
        ("TextMatch-v0", {"language": "klingon"}, "unsupported TextMatch language 'klingon'; allowed: english, code"),
        ("TextMatch-v0", {"target": ""}, "non-empty"),
        ("TextMatch-v0", {"language": "code", "target": "hello"}, "outside the 'code' charset"),
        ("CartPole-v1", {"gravity": 1.0}, "allowed: none"),
    ],
)
def test_bad_env_kwargs_are_user_errors(env_id: str, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(UserError, match=match):
        resolve_env_kwargs(env_id, kwargs)


def test_env_label_and_episode_limit() -> None:
    assert env_label("TextMatch-v0", None) == "TextMatch-v0"
    assert env_label("TextMatch-v0", {"language": "english", "target": "hello"}) == "TextMatch-v0"
    assert env_label("TextMatch-v0", {"language": "code"}) == "TextMatch-v0[code:12345]"
    assert env_label("TextMatch-v0", {"target": "abc"}) == "TextMatch-v0[english:abc]"
    assert env_label("ALE/Pong-v5", None) == "ALE/Pong-v5"
    assert [episode_limit(i, None) for i in ALL_IDS] == [500, 1000, 27000, 1000, 5]
    assert episode_limit("TextMatch-v0", {"target": "abcdefgh"}) == 8


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_envs": 0}, "n_envs must be a positive int"),
        ({"n_envs": 2, "vectorization": "ray"}, "unknown vectorization 'ray'; allowed: auto, sync, async"),
        ({"n_envs": 2, "max_episode_steps": 0}, "max_episode_steps must be a positive int"),
    ],
)
def test_bad_make_vec_env_args(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(UserError, match=match):
        make_vec_env("CartPole-v1", **kwargs)


# ---------------------------------------------------------------------------------------------------------------
# every env: builds, steps, is deterministic


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_every_env_builds_and_steps(env_id: str) -> None:
    shape, dtype, action_space = EXPECTED[env_id]
    envs = make_vec_env(env_id, 2)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert envs.single_action_space == action_space
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, *shape) and obs.dtype == dtype
    obs, reward, terminated, truncated, _ = envs.step(envs.action_space.sample())
    assert obs.shape == (2, *shape) and reward.shape == terminated.shape == truncated.shape == (2,)
    envs.close()


@pytest.mark.parametrize("vectorization", ["auto", "sync"])
@pytest.mark.parametrize("env_id", ALL_IDS)
def test_same_seed_same_trajectory(env_id: str, vectorization: str) -> None:
    n_steps = 40 if env_id == "ALE/Pong-v5" else 60
    runs = []
    for _ in range(2):
        envs = make_vec_env(env_id, 2, vectorization=vectorization)
        runs.append(_rollout(envs, 123, n_steps))
        envs.close()
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    if env_id != "TextMatch-v0":  # TextMatch obs are step counters; everything else must depend on the seed
        other = make_vec_env(env_id, 2, vectorization=vectorization)
        assert not np.array_equal(_rollout(other, 124, n_steps)[0], runs[0][0])


@pytest.mark.parametrize("env_id", ["CartPole-v1", "LunarLander-v3", "Hopper-v5", "ALE/Pong-v5"])
def test_list_seeds_reset_sub_envs_identically(env_id: str) -> None:
    envs = make_vec_env(env_id, 3, vectorization="sync")
    obs, _ = envs.reset(seed=list(np.full(3, 7)))  # GRPO: one group, one shared seed (numpy ints accepted)
    np.testing.assert_array_equal(obs[0], obs[1])
    np.testing.assert_array_equal(obs[0], obs[2])
    int_seeded, _ = envs.reset(seed=10)
    list_seeded, _ = envs.reset(seed=[10, 11, 12])
    np.testing.assert_array_equal(int_seeded, list_seeded)  # int seed s == list [s, s+1, ...]
    if env_id != "ALE/Pong-v5":  # Pong's first frames are identical whatever the seed
        assert not np.array_equal(list_seeded[0], list_seeded[1])


def test_cartpole_fast_path_rejects_list_seeds() -> None:
    envs = make_vec_env("CartPole-v1", 2)
    with pytest.raises(UserError, match="vectorization='sync'"):
        envs.reset(seed=[1, 1])


def test_action_spaces_seeded_by_reset() -> None:
    envs = make_vec_env("Hopper-v5", 2, vectorization="sync")
    envs.reset(seed=5)
    a = [envs.action_space.sample(), _sub_envs(envs)[1].action_space.sample()]
    envs.reset(seed=5)
    b = [envs.action_space.sample(), _sub_envs(envs)[1].action_space.sample()]
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_async_list_seeds_and_info_layout() -> None:
    envs = make_vec_env("TextMatch-v0", 2, vectorization="async", env_kwargs={"language": "code"})
    obs, _ = envs.reset(seed=[3, 3])
    assert obs.tolist() == [[0.0], [0.0]]
    for _ in range(5):
        obs, reward, terminated, _, info = envs.step(np.array([1, 2]))  # writes "11111" and "22222"
    assert terminated.tolist() == [True, True] and obs.tolist() == [[0.0], [0.0]]  # already reset
    mask, returns, lengths = finished_episodes(info, 2)
    assert mask.tolist() == [True, True]
    np.testing.assert_allclose(returns, [1.0 - 0.4, 1.0 - 0.4])
    assert lengths.tolist() == [5, 5]
    final_mask, final_obs = final_observations(info, 2)
    assert final_mask.tolist() == [True, True] and final_obs is not None and final_obs.tolist() == [[1.0], [1.0]]
    assert info["final_info"]["text"].tolist() == ["11111", "22222"]
    assert "t" not in info["final_info"]["episode"]  # wall time is not deterministic, never recorded
    envs.close()


# ---------------------------------------------------------------------------------------------------------------
# SAME_STEP, final obs, episode stats


def test_textmatch_same_step_and_step_cap() -> None:
    envs = make_vec_env("TextMatch-v0", 2, env_kwargs={"target": "hello"}, max_episode_steps=3)
    envs.reset(seed=0)
    h, e = 7, 4  # charset indices of "h" and "e"
    for t in range(3):
        obs, reward, terminated, truncated, info = envs.step(np.array([h, e]))
        mask, returns, lengths = finished_episodes(info, 2)
        if t < 2:
            assert not mask.any() and final_observations(info, 2)[1] is None
    assert truncated.tolist() == [True, True] and terminated.tolist() == [False, False]
    np.testing.assert_allclose(returns, [1.0 - 0.2, -0.1 + 1.0 - 0.1])  # "hhh" and "eee" against "hel"
    assert lengths.tolist() == [3, 3]
    _, final_obs = final_observations(info, 2)
    assert final_obs is not None
    np.testing.assert_allclose(final_obs, np.array([[0.6], [0.6]]))
    assert obs.tolist() == [[0.0], [0.0]]


def _check_cartpole_same_step(vectorization: str, n_envs: int, n_steps: int, cap: int | None) -> np.ndarray:
    """Run random CartPole; check SAME_STEP invariants on every step; return all finished episode lengths."""
    envs = make_vec_env("CartPole-v1", n_envs, vectorization=vectorization, max_episode_steps=cap)
    obs, _ = envs.reset(seed=0)
    steps_since_reset = np.zeros(n_envs, dtype=np.int64)
    lengths_seen = []
    for _ in range(n_steps):
        obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
        steps_since_reset += 1
        assert (reward == 1.0).all()  # no NEXT_STEP dummy transition with reward 0
        done = terminated | truncated
        mask, returns, lengths = finished_episodes(info, n_envs)
        np.testing.assert_array_equal(mask, done)
        final_mask, final_obs = final_observations(info, n_envs)
        np.testing.assert_array_equal(final_mask, done)
        if done.any():
            assert final_obs is not None and final_obs.shape == (n_envs, 4)
            assert (np.abs(obs[done]) <= 0.05).all()  # already the reset obs, within the reset bounds
            x, theta = final_obs[terminated, 0], final_obs[terminated, 2]
            assert ((np.abs(x) > 2.4) | (np.abs(theta) > 12 * 2 * np.pi / 360)).all()  # the terminal state
            np.testing.assert_array_equal(lengths[done], steps_since_reset[done])
            np.testing.assert_array_equal(returns[done], steps_since_reset[done])  # reward 1 per step
            if cap is not None:
                assert (lengths[truncated & ~terminated] == cap).all()
            lengths_seen.append(lengths[done])
            steps_since_reset[done] = 0
        assert (steps_since_reset < (cap or 500)).all()
    envs.close()
    return np.concatenate(lengths_seen)


def test_cartpole_adapter_matches_sync_semantics() -> None:
    fast = _check_cartpole_same_step("auto", 64, 300, None)
    slow = _check_cartpole_same_step("sync", 64, 300, None)
    # Random-policy CartPole episodes last ~22 steps; with ~800 episodes each, the means agree to within ~2.
    assert len(fast) > 500 and len(slow) > 500
    assert abs(fast.mean() - slow.mean()) < 2.5
    assert 15 < fast.mean() < 30


@pytest.mark.parametrize("vectorization", ["auto", "sync"])
def test_cartpole_step_cap_truncates(vectorization: str) -> None:
    lengths = _check_cartpole_same_step(vectorization, 16, 100, 10)
    assert lengths.max() == 10 and (lengths <= 10).all()


def test_finished_episodes_on_empty_info() -> None:
    mask, returns, lengths = finished_episodes({}, 3)
    assert mask.tolist() == [False] * 3 and returns.dtype == np.float64 and lengths.dtype == np.int64
    assert final_observations({}, 3)[1] is None


# ---------------------------------------------------------------------------------------------------------------
# Atari pipeline


def test_pong_skips_exactly_four_frames_per_agent_step() -> None:
    envs = make_vec_env("ALE/Pong-v5", 1, vectorization="sync")
    envs.reset(seed=0)
    ale = _sub_envs(envs)[0].unwrapped.ale
    start = ale.getEpisodeFrameNumber()  # includes the random no-op frames of the reset
    for _ in range(25):
        envs.step(envs.action_space.sample())
    assert ale.getEpisodeFrameNumber() - start == 4 * 25  # not 16 per step (published.md pitfall)
    assert _sub_envs(envs)[0].unwrapped._frameskip == 1
    envs.close()


def test_pong_full_random_game_reports_raw_score() -> None:
    envs = make_vec_env("ALE/Pong-v5", 1, training=True)
    envs.reset(seed=1)
    agent_reward, n_steps = 0.0, 0
    while True:
        obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
        agent_reward += float(reward[0])
        n_steps += 1
        mask, returns, lengths = finished_episodes(info, 1)
        if terminated[0] or truncated[0]:
            break
    assert mask[0] and terminated[0]  # Pong has no lives: the first termination is the game's end
    assert returns[0] == agent_reward and returns[0] == int(returns[0]) and -21 <= returns[0] <= -15
    assert lengths[0] == n_steps and 500 < n_steps < 2000
    envs.close()


class _ScriptedAtari(gym.Env):
    """Stand-in for a preprocessed Atari env: scripted rewards, lives and game end (step t, 1-based)."""

    REWARDS = [3.0, 0.0, -2.0, 5.0, 1.0, 4.0, -1.0]
    LIVES = [3, 3, 2, 2, 1, 1, 1]

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0, 255, (84, 84), np.uint8)
        self.action_space = spaces.Discrete(2)
        self.ale = self
        self.t = 0

    def lives(self) -> int:
        return 3 if self.t == 0 else self.LIVES[self.t - 1]

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros((84, 84), np.uint8), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        obs = np.full((84, 84), self.t, np.uint8)
        return obs, self.REWARDS[self.t - 1], self.t == len(self.REWARDS), False, {}


@pytest.mark.parametrize("training", [True, False])
def test_atari_training_clips_rewards_but_stats_are_raw(training: bool) -> None:
    envs = SyncVectorEnv(
        [lambda: wrap_atari_agent_side(_ScriptedAtari(), training=training, max_episode_steps=None)],
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    envs.reset(seed=0)
    rewards, terms, finished = [], [], []
    while True:
        obs, reward, terminated, _, info = envs.step(np.array([0]))
        rewards.append(float(reward[0]))
        terms.append(bool(terminated[0]))
        mask, returns, lengths = finished_episodes(info, 1)
        finished.append(bool(mask[0]))
        if mask[0]:
            break
    assert returns[0] == sum(_ScriptedAtari.REWARDS) == 10.0  # raw score, including the no-op steps' rewards
    assert lengths[0] == 7
    if training:
        # agent steps hit stub steps 1, 2, 3 (life lost), 5 (life lost), 7; steps 4 and 6 are EpisodicLife no-ops
        assert rewards == [1.0, 0.0, -1.0, 1.0, -1.0]
        assert terms == [False, False, True, True, True] and finished == [False, False, False, False, True]
    else:
        assert rewards == _ScriptedAtari.REWARDS and terms == [False] * 6 + [True]
    assert obs.shape == (1, 4, 84, 84)


def test_atari_eval_env_has_no_training_wrappers() -> None:
    for training, expected in [(True, True), (False, False)]:
        envs = make_vec_env("ALE/Pong-v5", 1, training=training, vectorization="sync")
        env, found = _sub_envs(envs)[0], False
        while isinstance(env, gym.Wrapper):
            found |= isinstance(env, EpisodicLife | gym.wrappers.TransformReward)
            env = env.env
        assert found is expected
        envs.close()


# ---------------------------------------------------------------------------------------------------------------
# speed report (prints numbers; speed targets belong in benchmarks, not in timed tests)


def test_cartpole_speed_report_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    rates = {}
    for vectorization, n_steps in [("auto", 1000), ("sync", 60)]:
        envs = make_vec_env("CartPole-v1", 64, vectorization=vectorization)
        envs.reset(seed=0)
        actions = [envs.action_space.sample() for _ in range(16)]
        start = time.perf_counter()
        for i in range(n_steps):
            envs.step(actions[i % 16])
        rates[vectorization] = 64 * n_steps / (time.perf_counter() - start)
    with capsys.disabled():
        print(f"\nCartPole-v1 x64 env-steps/s: numpy adapter {rates['auto']:,.0f}, sync {rates['sync']:,.0f}")


# ---------------------------------------------------------------------------------------------------------------
# numpy twins of SyncVectorEnv (the hot path's fast envs): the same values, bit for bit


def _sync_reference(env_id: str, n: int, kwargs: dict[str, Any], cap: int | None) -> SeededVectorEnv:
    from functools import partial

    from suite.envs import make_single_env, resolve_env_kwargs

    fns = [partial(make_single_env, env_id, resolve_env_kwargs(env_id, kwargs), True, cap) for _ in range(n)]
    return SeededVectorEnv(SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP))


@pytest.mark.parametrize(
    ("env_id", "kwargs", "cap", "n_steps"),
    [
        ("CartPole-v1", {}, None, 1200),  # random play: terminations, several resets per env
        ("CartPole-v1", {}, 9, 200),  # the suite's cap: truncations (grpo's max_episode_steps)
        ("TextMatch-v0", {"target": "hello"}, None, 40),
        ("TextMatch-v0", {"language": "code", "target": "12345"}, 3, 20),
    ],
)
def test_numpy_twins_equal_sync_vector_env(env_id: str, kwargs: dict[str, Any], cap: int | None, n_steps: int) -> None:
    n = 5
    fast = make_vec_env(env_id, n, vectorization="sync", env_kwargs=kwargs, max_episode_steps=cap)
    ref = _sync_reference(env_id, n, kwargs, cap)
    assert type(fast.unwrapped).__name__ in ("SeededCartPole", "VectorTextMatch")
    seeds = [11, 11, 12, 13, 2**30 + 5]
    o1, _ = fast.reset(seed=seeds)
    o2, _ = ref.reset(seed=seeds)
    np.testing.assert_array_equal(o1, o2)
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(n_steps):
        a = rng.integers(0, fast.single_action_space.n, size=n)
        r1, r2 = fast.step(a), ref.step(a)
        for x, y in zip(r1[:4], r2[:4], strict=True):
            np.testing.assert_array_equal(x, y)
            assert x.dtype == y.dtype
        for got, want in zip(finished_episodes(r1[4], n), finished_episodes(r2[4], n), strict=True):
            np.testing.assert_array_equal(got, want)
        m1, f1 = final_observations(r1[4], n)
        m2, f2 = final_observations(r2[4], n)
        np.testing.assert_array_equal(m1, m2)
        if m1.any():
            np.testing.assert_array_equal(f1[m1], f2[m2])
            ended += int(m1.sum())
        if env_id == "TextMatch-v0":  # the texts so far, and the finished ones' whole texts
            assert r1[4]["text"].tolist() == r2[4]["text"].tolist()
            if m1.any():
                assert r1[4]["final_info"]["text"][m1].tolist() == r2[4]["final_info"]["text"][m2].tolist()
    assert ended >= n  # every env ended at least once on average
    o1, _ = fast.reset(seed=3)  # an int seed is seed + k, as in SyncVectorEnv
    o2, _ = ref.reset(seed=3)
    np.testing.assert_array_equal(o1, o2)


class _GymCartPoleSameStep(SeededVectorEnv):
    """The oracle for ``auto`` CartPole (the suite's adapter before the numpy twin replaced it): SAME_STEP autoreset
    and episode statistics on gymnasium's own numpy ``CartPoleVectorEnv``.

    The inner env only implements NEXT_STEP autoreset (it resets a done env on the following ``step`` and
    returns a dummy transition). After each inner step this adapter captures the final obs of the envs that
    ended, re-samples their state from the inner env's ``np_random`` within its reset bounds (as the inner
    reset does), zeroes their step counters and clears ``prev_done`` so the inner env never resets by itself.
    Everything is vectorised numpy; the info layout matches ``SyncVectorEnv`` + ``RecordEpisodeStatistics``
    (without the wall-time field), except that ``info["final_obs"]`` is a float32 ``(n_envs, 4)`` array
    rather than an object array. Read it through :func:`final_observations`.
    """

    def __init__(self, env: VectorEnv) -> None:
        super().__init__(env)
        self._inner: Any = env.unwrapped  # CartPoleVectorEnv; its state arrays are edited in place
        n = env.num_envs
        self._returns = np.zeros(n, dtype=np.float64)
        self._lengths = np.zeros(n, dtype=np.int64)
        self.metadata = {**env.metadata, "autoreset_mode": AutoresetMode.SAME_STEP}

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset all envs; only an int seed (or None) is supported by the numpy CartPole."""
        if seed is not None and not isinstance(seed, int | np.integer):
            raise UserError(
                "CartPole-v1 with vectorization='auto' takes an int reset seed only; "
                "use vectorization='sync' for per-env seed lists"
            )
        obs, info = super().reset(seed=None if seed is None else int(seed), options=options)
        self._returns[:] = 0.0
        self._lengths[:] = 0
        return obs, info

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step all envs; ended rows of obs are already reset, their last obs is in ``info["final_obs"]``."""
        obs, reward, terminated, truncated, _ = self.env.step(actions)
        inner = self._inner
        self._returns += reward
        self._lengths += 1
        done = terminated | truncated
        info: dict[str, Any] = {}
        if done.any():
            idx = np.flatnonzero(done)
            final_obs = obs.copy()  # rows of envs that did not end are their current obs (documented as arbitrary)
            fresh = inner.np_random.uniform(low=inner.low, high=inner.high, size=(4, idx.size))
            inner.state[:, idx] = fresh
            inner.steps[idx] = 0
            obs[idx] = fresh.T  # obs is a fresh float32 copy of the inner state, safe to edit
            episode = {"r": self._returns * done, "_r": done, "l": self._lengths * done, "_l": done}
            info = {
                "final_obs": final_obs,
                "_final_obs": done,
                "final_info": {"episode": episode, "_episode": done},
                "_final_info": done,
            }
            self._returns[idx] = 0.0
            self._lengths[idx] = 0
        inner.prev_done.fill(False)  # the inner env must never run its own NEXT_STEP reset
        return obs, reward, terminated, truncated, info


@pytest.mark.parametrize("cap", [None, 7])
def test_auto_cartpole_equals_gymnasiums_vector_env_made_same_step(cap: int | None) -> None:
    n = 6
    inner = gym.make_vec("CartPole-v1", n, vectorization_mode="vector_entry_point", max_episode_steps=cap or 500)
    ref = _GymCartPoleSameStep(inner)
    fast = make_vec_env("CartPole-v1", n, max_episode_steps=cap)
    np.testing.assert_array_equal(fast.reset(seed=5)[0], ref.reset(seed=5)[0])
    rng = np.random.default_rng(1)
    ended = 0
    for _ in range(400):
        a = rng.integers(0, 2, size=n)
        r1, r2 = fast.step(a), ref.step(a)
        for x, y in zip(r1[:4], r2[:4], strict=True):
            np.testing.assert_array_equal(x, y)
            assert x.dtype == y.dtype
        for got, want in zip(finished_episodes(r1[4], n), finished_episodes(r2[4], n), strict=True):
            np.testing.assert_array_equal(got, want)
        m1, f1 = final_observations(r1[4], n)
        m2, f2 = final_observations(r2[4], n)
        np.testing.assert_array_equal(m1, m2)
        if m1.any():
            np.testing.assert_array_equal(f1[m1], f2[m2])
            ended += int(m1.sum())
    assert ended > n


@pytest.mark.parametrize("integrator", ["euler", "semi-implicit euler"])
def test_cartpole_twin_dynamics_are_gymnasiums_bit_for_bit(integrator: str) -> None:
    """The twin's per-env float arithmetic gives CartPoleEnv.step's float64 state exactly (not only its float32
    observations), over states far wider than random play reaches (1e-3 to 10x the termination bounds)."""
    import warnings

    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    from suite.envs import SeededCartPole

    n = 16
    fast = SeededCartPole(n, 10**9)
    fast.reset(seed=0)
    refs = [CartPoleEnv() for _ in range(n)]
    for r in refs:
        r.reset(seed=0)
        r.kinematics_integrator = integrator
    consts = list(fast._consts)
    consts[7:] = [float("inf"), float("inf"), integrator == "euler"]  # never terminate: compare every row
    fast._consts = tuple(consts)
    rng = np.random.default_rng(0)
    compared = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reference warns when stepped past its termination
        for _ in range(40):
            start = rng.uniform(-1, 1, (n, 4)) * np.array([2.4, 3.0, 0.21, 3.0]) * 10.0 ** rng.uniform(-3, 1)
            fast.state = start.copy()
            for k, r in enumerate(refs):
                r.state = start[k].copy()
            for _ in range(15):
                a = rng.integers(0, 2, n)
                fast.step(a)
                for k, r in enumerate(refs):
                    r.step(int(a[k]))
                want = np.array([r.state for r in refs])
                assert fast.state.dtype == np.float64
                np.testing.assert_array_equal(fast.state.view(np.int64), want.view(np.int64))
                compared += n
    assert compared == 40 * 15 * n
