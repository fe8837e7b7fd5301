"""The ``sb3-*`` baselines: zoo YAML parsing, the VecEnv adapter, runs through the trial runner, determinism,
identical evaluation start states, saved-policy round trips."""

from __future__ import annotations

import dataclasses
import inspect
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3 import PPO
from torch import nn

import suite.trial as trial_mod
from suite.algorithms import sb3
from suite.config import Schedule
from suite.envs import get_env_spec, make_vec_env
from suite.errors import UserError
from suite.registry import get_algorithm
from suite.trial import TrialSpec, deterministic_view, eval_seeds, evaluate_policy, load_policy, run_trial

SB3_IDS = ("sb3-ppo", "sb3-a2c", "sb3-dqn", "sb3-sac", "sb3-td3")

# One tiny trial per id: CartPole for the discrete ones, Hopper-v5 with a short warm-up for SAC/TD3 (the zoo's
# learning_starts of 10k would never train within a CI budget). Two evaluation episodes, one periodic evaluation.
SMOKE: dict[str, tuple[str, int, dict[str, Any]]] = {
    "sb3-ppo": ("CartPole-v1", 1024, {}),
    "sb3-a2c": ("CartPole-v1", 1024, {}),
    "sb3-dqn": ("CartPole-v1", 1536, {}),
    "sb3-sac": ("Hopper-v5", 240, {"learning_starts": 100, "batch_size": 64}),
    "sb3-td3": ("Hopper-v5", 240, {"learning_starts": 100, "batch_size": 64}),
}


def _spec(algo: str, env_id: str, steps: int, overrides: dict[str, Any] | None = None, **kw: Any) -> TrialSpec:
    kw.setdefault("n_eval_episodes", 2)
    kw.setdefault("eval_freq", steps // 2)
    return TrialSpec(algo, env_id, 0, steps, overrides=overrides or {}, **kw)


@pytest.fixture(scope="module")
def twice() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Each sb3-* id run twice with the same spec (shared by the smoke and determinism tests)."""
    out = {}
    for algo, (env_id, steps, ov) in SMOKE.items():
        resolved = _spec(algo, env_id, steps, ov).resolve()
        out[algo] = (run_trial(resolved), run_trial(resolved))
    return out


# -- the zoo's YAML -----------------------------------------------------------------------------------------------


def test_lin_schedule_means_what_it_means_in_the_zoo():
    ov = sb3.zoo_entry_to_overrides("ppo", "CartPole-v1", {"learning_rate": "lin_0.001", "clip_range": "lin_0.2"})
    cfg = get_algorithm("sb3-ppo").make_config("CartPole-v1", ov)
    assert cfg.learning_rate == Schedule("linear", 0.001, 0.0)
    sb3_lr = sb3.sb3_schedule(cfg.learning_rate)
    # rl_zoo3 linear_schedule(x)(progress_remaining) = progress_remaining * x
    for remaining in (1.0, 0.75, 0.5, 0.0):
        assert sb3_lr(remaining) == pytest.approx(remaining * 0.001)
    assert sb3.sb3_schedule(Schedule("constant", 3e-4, 3e-4)) == 3e-4
    with pytest.raises(UserError, match="bad schedule 'lin_x'"):
        sb3.zoo_entry_to_overrides("ppo", "CartPole-v1", {"learning_rate": "lin_x"})
    with pytest.raises(UserError, match="!!float"):
        sb3.zoo_entry_to_overrides("ppo", "CartPole-v1", {"learning_rate": "1e-3"})


def test_policy_kwargs_strings_parse_as_the_zoo_writes_them():
    hopper = """dict(
                    log_std_init=-2,
                    ortho_init=False,
                    activation_fn=nn.ReLU,
                    net_arch=dict(pi=[256, 256], vf=[256, 256])
                  )"""
    assert sb3.parse_policy_kwargs(hopper) == {
        "log_std_init": -2, "ortho_init": False, "activation_fn": "relu", "net_arch": {"pi": [256, 256], "vf": [256, 256]},
    }  # fmt: skip
    assert sb3.parse_policy_kwargs("dict(net_arch=[256, 256])") == {"net_arch": [256, 256]}
    assert sb3.parse_policy_kwargs("{'net_arch': [64], 'activation_fn': th.nn.Tanh}") == {
        "net_arch": [64],
        "activation_fn": "tanh",
    }
    assert sb3.parse_policy_kwargs("dict(optimizer_class=RMSpropTFLike, optimizer_kwargs=dict(eps=1e-5))") == {
        "optimizer_class": "RMSpropTFLike",
        "optimizer_kwargs": {"eps": 1e-5},
    }
    # SB3 < 1.8 format and the shared-list format both map to the per-head fields
    old = sb3.zoo_entry_to_overrides("ppo", "Hopper-v5", {"policy_kwargs": "dict(net_arch=[dict(pi=[32], vf=[16])])"})
    assert (old["net_arch_pi"], old["net_arch_vf"]) == ([32], [16])
    sac = sb3.zoo_entry_to_overrides("sac", "Hopper-v5", {"policy_kwargs": "dict(net_arch=[400, 300])"})
    assert sac == {"net_arch_pi": [400, 300], "net_arch_qf": [400, 300]}


@pytest.mark.parametrize(
    "text, match",
    [
        ("__import__('os').system('true')", "is not allowed"),
        ("dict(activation_fn=nn.Module.__subclasses__())", "is not allowed"),
        ("dict(net_arch=[64] * 2)", "is not allowed"),
        ("dict(**x)", "unpacking"),
        ("[64, 64]", "must be dict"),
        ("dict(net_arch=[64,", "not valid"),
    ],
)
def test_policy_kwargs_parser_never_evaluates_code(text, match):
    with pytest.raises(UserError, match=match):
        sb3.parse_policy_kwargs(text)


def test_unknown_keys_are_clear_errors():
    with pytest.raises(UserError, match=r"unknown key 'n_step' in ppo.yml \[CartPole-v1\]; allowed: .*n_steps"):
        sb3.zoo_entry_to_overrides("ppo", "CartPole-v1", {"n_step": 3})
    with pytest.raises(UserError, match=r"unsupported policy_kwargs \['squash_output'\]"):
        sb3.zoo_entry_to_overrides("ppo", "CartPole-v1", {"policy_kwargs": "dict(squash_output=True)"})
    with pytest.raises(UserError, match="env_wrapper .* is not supported"):
        sb3.zoo_entry_to_overrides("ppo", "CartPole-v1", {"env_wrapper": "sb3_contrib.common.wrappers.TimeFeatureWrapper"})
    with pytest.raises(UserError, match="frame_stack 2"):
        sb3.zoo_entry_to_overrides("ppo", "ALE/Pong-v5", {"frame_stack": 2})
    with pytest.raises(UserError, match="unknown sb3-ppo hyperparameter key 'net_arch'"):
        get_algorithm("sb3-ppo").make_config("CartPole-v1", {"net_arch": [64]})


def test_every_yml_entry_builds_a_config_for_every_env_it_lists():
    envs = ["CartPole-v1", "LunarLander-v3", "ALE/Pong-v5", "Hopper-v5", "TextMatch-v0"]
    built = 0
    for algo in sb3.FLAVOURS:
        table = sb3.load_zoo_file(algo)
        spec = get_algorithm(f"sb3-{algo}")
        for key in table:
            targets = [e for e in envs if get_env_spec(e).family == "atari"] if key == "atari" else [key]
            for env_id in targets:
                assert spec.supports(get_env_spec(env_id).action_space, get_env_spec(env_id).observation), (algo, key)
                cfg = spec.make_config(env_id)
                sb3.sb3_kwargs(sb3.FLAVOURS[algo], cfg, gym.spaces.Box(-1, 1, (3,)))  # every config converts
                assert sb3.zoo_budget(algo, env_id) == int(table[key]["n_timesteps"])
                built += 1
    assert built == 6 + 5 + 4 + 1 + 1  # ppo.yml also has the zoo's Acrobot-v1 entry (examples/reinforce)


def test_configs_carry_the_zoo_values_of_published_md():
    ppo = get_algorithm("sb3-ppo")
    cart = ppo.make_config("CartPole-v1")
    assert (cart.n_envs, cart.n_steps, cart.batch_size, cart.n_epochs) == (8, 32, 256, 20)
    assert (cart.gae_lambda, cart.gamma, cart.ent_coef) == (0.8, 0.98, 0.0)
    assert cart.learning_rate == Schedule("linear", 1e-3, 0.0) and cart.clip_range == Schedule("linear", 0.2, 0.0)
    hop = ppo.make_config("Hopper-v5")
    assert hop.normalize and (hop.n_envs, hop.n_steps, hop.batch_size, hop.n_epochs) == (1, 512, 32, 5)
    assert (hop.max_grad_norm, hop.vf_coef, hop.log_std_init) == (0.7, 0.835671, -2)
    assert (hop.ortho_init, hop.activation_fn, hop.learning_rate.start, hop.ent_coef) == (
        False,
        "relu",
        9.80828e-05,
        0.00229519,
    )
    assert (hop.net_arch_pi, hop.net_arch_vf) == ((256, 256), (256, 256))
    pong = ppo.make_config("ALE/Pong-v5")
    assert pong.policy == "CnnPolicy" and pong.learning_rate == Schedule("linear", 2.5e-4, 0.0) and pong.n_envs == 8
    dqn = get_algorithm("sb3-dqn").make_config("CartPole-v1")
    assert (dqn.learning_rate.start, dqn.batch_size, dqn.buffer_size, dqn.learning_starts, dqn.target_update_interval) == (
        2.3e-3, 64, 100_000, 1000, 10,
    )  # fmt: skip
    assert (dqn.train_freq, dqn.gradient_steps, dqn.exploration_fraction, dqn.exploration_final_eps) == (256, 128, 0.16, 0.04)
    assert dqn.net_arch == (256, 256)
    a2c = get_algorithm("sb3-a2c").make_config("LunarLander-v3")
    assert (a2c.n_envs, a2c.gamma, a2c.n_steps, a2c.ent_coef) == (8, 0.995, 5, 1e-5)
    assert a2c.learning_rate == Schedule("linear", 0.00083, 0.0)
    kw = sb3.policy_kwargs(sb3.FLAVOURS["ppo"], hop)
    assert kw["net_arch"] == {"pi": [256, 256], "vf": [256, 256]} and kw["activation_fn"] is nn.ReLU


@pytest.mark.parametrize("algo", list(sb3.FLAVOURS))
def test_config_defaults_are_sb3s_own(algo):
    flavour = sb3.FLAVOURS[algo]
    params = dict(inspect.signature(flavour.sb3_cls.__init__).parameters)
    # the policy kwargs with a typed field (ortho_init, log_std_init, n_critics) default to the policy class's values
    params.update(inspect.signature(flavour.sb3_cls.policy_aliases["MlpPolicy"].__init__).parameters)
    cfg = flavour.config_cls()
    checked = 0
    for f in dataclasses.fields(cfg):
        if f.name in ("activation_fn", "net_arch"):
            assert getattr(cfg, f.name) is None  # None = the policy class's own default, which depends on the policy
            continue
        if f.name == "optimizer_class":  # A2C replaces the policy's Adam by RMSprop when use_rms_prop (the default)
            assert cfg.optimizer_class == "RMSprop" and params["use_rms_prop"].default is True
            continue
        if f.name in params and params[f.name].default is not inspect.Parameter.empty:
            value = getattr(cfg, f.name)
            value = value.start if isinstance(value, Schedule) else value
            assert value == params[f.name].default, f.name
            checked += 1
    assert checked >= 8


# -- the VecEnv adapter -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("vectorization", ["auto", "sync"])
def test_adapter_reports_truncation_and_terminal_observation(vectorization):
    cap, seed = 8, 123
    recorded: list[tuple[int, list[float], list[int]]] = []
    ctx = SimpleNamespace(train_seed=seed, record_episodes=lambda s, r, l: recorded.append((s, list(r), list(l))))
    envs = make_vec_env("CartPole-v1", 2, vectorization=vectorization, max_episode_steps=cap)
    venv = sb3.SuiteVecEnv(envs, ctx)
    obs = venv.reset()
    # the reset is seeded with train_seed (sub-env k: train_seed + k) exactly as the suite's own algorithms seed it;
    # the same env without the cap, stepped alike, is the reference for the last real observation
    ref = make_vec_env("CartPole-v1", 2, vectorization=vectorization)
    np.testing.assert_array_equal(obs, ref.reset(seed=seed)[0])
    actions = np.array([0, 1])
    for t in range(cap):
        acts = actions if t % 2 == 0 else 1 - actions  # alternate: no pole falls within 8 steps
        expected, _, ref_term, ref_trunc, _ = ref.step(acts)
        assert not (ref_term.any() or ref_trunc.any())
        obs, rewards, dones, infos = venv.step(acts)
        assert rewards.dtype == np.float32
        if t < cap - 1:
            assert not dones.any() and infos == [{}, {}]
    assert dones.all()
    for k in range(2):
        assert infos[k]["TimeLimit.truncated"] is True
        np.testing.assert_allclose(infos[k]["terminal_observation"], expected[k], rtol=1e-6)
        assert not np.allclose(obs[k], expected[k])  # the returned row is already the next episode's first obs
    assert recorded == [(2 * cap, [float(cap)] * 2, [cap] * 2)]


def test_adapter_termination_is_not_a_truncation():
    recorded: list[Any] = []
    ctx = SimpleNamespace(train_seed=0, record_episodes=lambda s, r, l: recorded.append((s, list(r), list(l))))
    venv = sb3.SuiteVecEnv(make_vec_env("CartPole-v1", 1), ctx)
    venv.reset()
    t, dones = 0, np.zeros(1, dtype=bool)
    while not dones[0]:
        _, _, dones, infos = venv.step(np.array([0]))  # always push left: the pole falls within ~10 steps
        t += 1
    assert infos[0]["TimeLimit.truncated"] is False and "terminal_observation" in infos[0]
    assert abs(infos[0]["terminal_observation"][2]) > 0.2095 or abs(infos[0]["terminal_observation"][0]) > 2.4
    assert recorded == [(t, [float(t)], [t])]


# -- trials -------------------------------------------------------------------------------------------------------


def test_smoke_every_sb3_id_runs_through_the_trial_runner(twice):
    assert set(twice) == set(SB3_IDS)
    for algo, (rec, _) in twice.items():
        env_id, steps, _ = SMOKE[algo]
        assert rec["status"] == "ok", (algo, rec["error"])
        # the budget is exact (SB3 alone would run to the end of its rollout / train_freq chunk)
        assert rec["steps"] == steps and rec["algo"] == algo and rec["env_id"] == env_id
        assert rec["evals"][-1]["final"] and len(rec["evals"][-1]["returns"]) == 2
        assert len(rec["updates"]) >= 1 and rec["curve"]["step"]
        assert rec["rollout_time_s"] > 0 and rec["update_time_s"] > 0 and rec["peak_rss_mb"] > 0
    ppo_update = twice["sb3-ppo"][0]["updates"][0]
    assert {"approx_kl", "clip_fraction", "entropy_loss", "value_loss", "loss"} <= set(ppo_update)
    assert ppo_update["n_updates"] == 20  # zoo CartPole: n_epochs 20 per rollout


def test_every_sb3_id_is_deterministic(twice):
    for algo, (a, b) in twice.items():
        assert deterministic_view(a) == deterministic_view(b), algo


def test_sb3_ppo_and_ppo_are_evaluated_from_the_same_start_states(monkeypatch):
    seen: dict[int, list[tuple[list[int], np.ndarray]]] = {}
    original = trial_mod.evaluate_policy

    def spy(predict, env_id, env_kwargs, seeds, **kwargs):
        first: list[np.ndarray] = []

        def wrapped(obs):
            if not first:
                first.append(obs.copy())
            return predict(obs)

        out = original(wrapped, env_id, env_kwargs, seeds, **kwargs)
        seen.setdefault(len(seen), []).append((list(seeds), first[0]))
        return out

    monkeypatch.setattr(trial_mod, "evaluate_policy", spy)
    records = {}
    for algo in ("ppo", "sb3-ppo"):
        seen.clear()
        rec = run_trial(TrialSpec(algo, "CartPole-v1", 0, 512, n_eval_episodes=3, eval_freq=512).resolve())
        assert rec["status"] == "ok", rec["error"]
        records[algo] = [v for rows in seen.values() for v in rows]
    (seeds_a, obs_a), (seeds_b, obs_b) = records["ppo"][0], records["sb3-ppo"][0]
    assert seeds_a == seeds_b == eval_seeds(0, 3)
    np.testing.assert_array_equal(obs_a, obs_b)
    assert obs_a.shape == (3, 4) and len({tuple(r) for r in obs_a}) == 3


def test_saved_policy_with_frozen_normalisation_reproduces_the_final_evaluation(tmp_path):
    # Hopper: VecNormalize (zoo normalize: true) -> the saved agent carries the observation statistics.
    spec = _spec("sb3-ppo", "Hopper-v5", 512, {"n_steps": 256}, eval_freq=512)
    rec = run_trial(spec.resolve(), models_dir=tmp_path)
    assert rec["status"] == "ok", rec["error"]
    policy, payload = load_policy(rec["model_path"])
    assert isinstance(policy, sb3.SB3Agent) and policy.normalize
    assert float(policy.obs_var.sum()) != float(len(policy.obs_var))  # statistics were learned, not the initial ones
    returns, lengths = evaluate_policy(lambda o: policy.predict(o), "Hopper-v5", {}, eval_seeds(0, 2))
    assert returns.tolist() == rec["evals"][-1]["returns"] and lengths.tolist() == rec["evals"][-1]["lengths"]


def test_pong_reaches_sb3_through_the_suites_atari_pipeline_unwrapped():
    # The frame skip is applied once by the suite's env layer (tests/test_envs.py checks 4 frames per step);
    # SB3 must see those (4, 84, 84) uint8 frames as they are: channels first, so no VecTransposeImage, and
    # no AtariWrapper anywhere (its MaxAndSkip on top of v5 would skip 16 frames, published.md).
    resolved = _spec("sb3-ppo", "ALE/Pong-v5", 8, {"n_envs": 1, "n_steps": 8, "batch_size": 8}).resolve()
    ctx = trial_mod.TrialContext(resolved)
    try:
        cfg = resolved.config
        venv = sb3.SuiteVecEnv(ctx.make_envs(cfg.n_envs), ctx)
        model = PPO(cfg.policy, venv, device="cpu", **sb3.sb3_kwargs(sb3.FLAVOURS["ppo"], cfg, venv.action_space))
        assert model.env is venv and cfg.policy == "CnnPolicy"
        assert model.observation_space.shape == (4, 84, 84) and model.observation_space.dtype == np.uint8
        obs = venv.reset()
        assert obs.shape == (1, 4, 84, 84) and obs.dtype == np.uint8
    finally:
        ctx.close()


def test_the_suite_s_own_trials_do_not_load_stable_baselines3():
    """The registry lists the sb3-* entries without importing SB3: a ppo trial process (the local executor's
    forkserver preloads the registry) stays ~22 MB smaller; an sb3-* trial imports it when it builds its model.
    Nor torch's compiler stack (``torch._dynamo``, 69 MB resident), which torch loads with a ``torch.optim``
    optimiser: the suite's trials do not build one, SB3's do."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from suite.executors.local import FORKSERVER_PRELOAD\n"
        "import importlib\n"
        "for name in FORKSERVER_PRELOAD: importlib.import_module(name)\n"
        "from suite.trial import TrialSpec, run_trial\n"
        "run_trial(TrialSpec('ppo', 'CartPole-v1', 0, 256, n_eval_episodes=1).resolve())\n"
        "assert 'stable_baselines3' not in sys.modules, 'ppo loaded SB3'\n"
        "assert 'torch._dynamo' not in sys.modules, 'ppo loaded torch._dynamo'\n"
        "run_trial(TrialSpec('sb3-ppo', 'CartPole-v1', 0, 256, n_eval_episodes=1).resolve())\n"
        "assert 'stable_baselines3' in sys.modules and 'torch._dynamo' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


# -- ppo is SB3's PPO, update for update -------------------------------------------------------------------------
# Suite module name -> SB3 ActorCriticPolicy name (twin MLPs: policy and value networks share no layer).
_SB3_NAMES = {
    "pi.0": "mlp_extractor.policy_net.0", "pi.2": "mlp_extractor.policy_net.2", "pi.4": "action_net",
    "vf.0": "mlp_extractor.value_net.0", "vf.2": "mlp_extractor.value_net.2", "vf.4": "value_net",
}  # fmt: skip


def _as_sb3_state(policy: nn.Module) -> dict[str, Any]:
    out = {}
    for key, value in policy.state_dict().items():
        if key == "log_std":
            if policy.log_std.requires_grad:  # a Gaussian head's; the categorical head keeps an unused one
                out[key] = value.clone()
            continue
        layer, name = key.rsplit(".", 1)
        out[f"{_SB3_NAMES[layer]}.{name}"] = value.clone()
    return out


@pytest.mark.parametrize(
    ("env_id", "overrides"),
    [
        ("CartPole-v1", {}),  # the zoo's: one minibatch of the whole 256-sample rollout, 20 epochs
        ("CartPole-v1", {"batch_size": 64, "ent_coef": 0.01}),  # 4 shuffled minibatches an epoch, entropy bonus
        ("CartPole-v1", {"batch_size": 64, "clip_range_vf": 0.2, "n_epochs": 3}),  # clipped value loss
        ("Hopper-v5", {"normalize": False, "n_steps": 64}),  # Gaussian head, ReLU, 256 units, grad-norm clip 0.7
    ],
)
def test_a_ppo_update_is_sb3_ppos_train_on_the_same_rollout(env_id, overrides, monkeypatch):
    """The suite's ``ppo`` (hand-derived forward/backward, flat Adam, numpy loss) and SB3's ``PPO.train()`` (autograd,
    ``torch.optim.Adam``), started from the same weights, given the same rollout and the same minibatches in the same
    order, end one whole update (all epochs) with the same parameters to float rounding (~1e-7 here), and the same
    advantages, returns and loss metrics. So the two differ only where their random streams do (action sampling,
    shuffling): the steps either needs to reach a score on a given seed are the luck of its trajectory, and the speed
    ratios of benchmarks/bench_ppo_vs_sb3.py compare the same algorithm doing the same work.

    SB3 logs ``approx_kl`` for the last epoch only (its list is reset every epoch); the suite records the update's
    mean, so that one metric is not compared."""
    import torch
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import DummyVecEnv

    from suite.algorithms.ppo import PPOTrainer
    from suite.trial import TrialContext, seed_everything

    resolved = TrialSpec("ppo", env_id, 0, 100_000, overrides=overrides).resolve()
    cfg = resolved.config
    seed_everything(0, 1)
    ctx = TrialContext(resolved)
    try:
        trainer = PPOTrainer(ctx, cfg)
        rollout = trainer.collector.collect()
        progress = ctx.steps / ctx.total_timesteps
        adv, ret = trainer.advantages(rollout)

        scfg = TrialSpec("sb3-ppo", env_id, 0, 100_000, overrides=overrides).resolve().config
        flavour = sb3.FLAVOURS["ppo"]
        venv = DummyVecEnv([lambda: gym.make(env_id)] * scfg.n_envs)
        model = flavour.sb3_cls(scfg.policy, venv, device="cpu", **sb3.sb3_kwargs(flavour, scfg, venv.action_space))
        model.set_logger(Logger(folder=None, output_formats=[]))
        model.policy.load_state_dict(_as_sb3_state(trainer.policy))

        # the same rollout in SB3's buffer: episode_starts[t] = dones[t - 1]
        T, N = rollout.rewards.shape
        obs, actions = rollout.obs.tensor().numpy(), rollout.actions.numpy()
        buf = model.rollout_buffer
        buf.reset()
        starts = np.zeros(N, dtype=np.float32)
        for t in range(T):
            buf.add(obs[t], actions[t].reshape(N, -1), rollout.rewards[t], starts,
                    torch.from_numpy(rollout.values[t].mean(-1)), torch.from_numpy(rollout.log_probs[t]))  # fmt: skip
            starts = rollout.dones[t]
        buf.compute_returns_and_advantage(torch.from_numpy(rollout.last_values.mean(-1)), rollout.dones[T - 1])
        np.testing.assert_allclose(buf.advantages, adv, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(buf.returns, ret, rtol=1e-6, atol=1e-6)

        # the same minibatches in the same order: the suite's flat index is time-major (t N + e), SB3's env-major
        perms = [np.random.default_rng(epoch).permutation(T * N) for epoch in range(cfg.n_epochs)]
        suite_perms = iter(perms)
        sb3_perms = iter([(p % N) * T + p // N for p in perms])
        with monkeypatch.context() as m:
            m.setattr(torch, "randperm", lambda n, *a, **k: torch.from_numpy(next(suite_perms)))
            metrics = trainer.update(rollout, adv, ret, progress)
        with monkeypatch.context() as m:
            m.setattr(np.random, "permutation", lambda n: next(sb3_perms))
            model._current_progress_remaining = 1.0 - progress
            model.train()
        assert next(suite_perms, None) is None and next(sb3_perms, None) is None  # each took every epoch's order

        ours, theirs = _as_sb3_state(trainer.policy), model.policy.state_dict()
        assert ours.keys() <= theirs.keys()
        for key, value in ours.items():
            torch.testing.assert_close(value, theirs[key], rtol=0, atol=1e-6, msg=key)
        logged = model.logger.name_to_value
        for ours_key, sb3_key, sign in [
            ("policy_loss", "policy_gradient_loss", 1), ("value_loss", "value_loss", 1),
            ("entropy", "entropy_loss", -1), ("clip_fraction", "clip_fraction", 1),
            ("learning_rate", "learning_rate", 1), ("clip_range", "clip_range", 1),
            ("explained_variance", "explained_variance", 1),
        ]:  # fmt: skip
            assert metrics[ours_key] == pytest.approx(sign * float(logged[f"train/{sb3_key}"]), rel=1e-5, abs=1e-7)
        assert metrics["n_minibatches"] == cfg.n_epochs * -(-T * N // cfg.batch_size)
    finally:
        ctx.close()
