"""ppo-rlvr-prm: variance-weighted advantages and JS by hand, the smoothness penalty, aliases, determinism, learning."""

import math

import numpy as np
import pytest
import torch

from suite.accel.ppo_rlvr_prm import categorical_log_probs, js_categorical_grad
from suite.algorithms.ppo_rlvr_prm import (
    RlvrPrmConfig,
    RlvrPrmTrainer,
    input_gradient_penalty,
    js_categorical,
    js_gaussian_mc,
    variance_weighted_advantages,
)
from suite.config import config_identity
from suite.errors import UserError
from suite.registry import get_algorithm
from suite.trial import TrialSpec, deterministic_view, run_trial


def test_variance_weighted_advantages_by_hand_t3():
    gamma, lam = 0.9, 0.5
    rewards = np.array([[1.0], [0.0], [2.0]], dtype=np.float32)
    # two heads: means 1, 2, 0; variances (population) 1, 0, 4
    values = np.array([[[0.0, 2.0]], [[2.0, 2.0]], [[-2.0, 2.0]]], dtype=np.float32)
    last = np.array([[3.0, 1.0]], dtype=np.float32)  # mean 2, variance 1
    dones = np.zeros((3, 1), dtype=np.float32)
    adv, s2 = variance_weighted_advantages(rewards, values, dones, last, gamma, lam)
    d0, d1, d2 = 1 + 0.9 * 2 - 1, 0 + 0.9 * 0 - 2, 2 + 0.9 * 2 - 0  # TD errors of the head means
    w0, w1, w2 = d0 / (1 + 1), d1 / (1 + 0), d2 / (1 + 4)
    a2 = w2
    a1 = w1 + gamma * lam * a2
    a0 = w0 + gamma * lam * a1
    np.testing.assert_allclose(adv[:, 0], [a0, a1, a2], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(s2[:, 0], [1.0, 0.0, 4.0])
    # an episode ending at t=1 cuts both the bootstrap and the sum
    dones[1, 0] = 1.0
    adv, _ = variance_weighted_advantages(rewards, values, dones, last, gamma, lam)
    np.testing.assert_allclose(adv[:, 0], [w0 + gamma * lam * (0 - 2) / 1, (0 - 2) / 1, w2], rtol=1e-6, atol=1e-6)


def test_js_of_two_known_categoricals():
    p, q = torch.tensor([[0.5, 0.5]]), torch.tensor([[0.9, 0.1]])
    m = [0.7, 0.3]
    want = 0.5 * (0.5 * math.log(0.5 / m[0]) + 0.5 * math.log(0.5 / m[1])) + 0.5 * (
        0.9 * math.log(0.9 / m[0]) + 0.1 * math.log(0.1 / m[1])
    )
    got = js_categorical(p.log(), q.log())
    assert float(got) == pytest.approx(want, rel=1e-6)
    assert float(js_categorical(q.log(), p.log())) == pytest.approx(want, rel=1e-6)  # symmetric
    assert float(js_categorical(p.log(), p.log())) == pytest.approx(0.0, abs=1e-7)
    assert float(js_categorical(torch.tensor([[0.0, -1e9]]), torch.tensor([[-1e9, 0.0]]))) == pytest.approx(math.log(2))


def test_js_gaussian_monte_carlo_matches_quadrature():
    torch.manual_seed(0)
    mu, ls, mu_old, ls_old = torch.tensor([[0.0]]), torch.tensor([0.0]), torch.tensor([[1.0]]), torch.tensor([math.log(2.0)])
    x = np.linspace(-20, 20, 200_001)
    p = np.exp(-0.5 * x**2) / math.sqrt(2 * math.pi)
    q = np.exp(-0.5 * ((x - 1) / 2) ** 2) / (2 * math.sqrt(2 * math.pi))
    m = (p + q) / 2
    want = 0.5 * np.trapezoid(p * np.log(p / m), x) + 0.5 * np.trapezoid(q * np.log(q / m), x)
    got = js_gaussian_mc(mu.expand(20_000, 1), ls, mu_old.expand(20_000, 1), ls_old, n_samples=5).mean()
    assert float(got) == pytest.approx(want, abs=3e-3)
    assert float(js_gaussian_mc(mu, ls, mu, ls, 3)) == 0.0


def test_input_gradient_penalty_is_the_jacobian_norm():
    torch.manual_seed(0)
    w = torch.randn(3, 4)  # outputs = x @ w.T: Jacobian w, ||w||_F^2 at every sample
    x = torch.randn(6, 4, requires_grad=True)
    exact = input_gradient_penalty(x @ w.T, x)
    torch.testing.assert_close(exact, torch.full((6,), float(w.square().sum())))
    hutch = input_gradient_penalty(x @ w.T, x, probes=4000).mean()
    assert float(hutch) == pytest.approx(float(w.square().sum()), rel=0.05)
    # nonlinear: y = x0^2 -> dy/dx = (2 x0, 0)
    y = x[:, :1] ** 2
    torch.testing.assert_close(input_gradient_penalty(y, x), (2 * x[:, 0]).square())


@pytest.mark.parametrize("n", [2, 10, 26])  # CartPole, TextMatch 'code', TextMatch 'english'
def test_old_log_probs_made_once_per_update_equal_each_minibatchs_own_bit_for_bit(n):
    """pi_old's log-probabilities are computed once over the whole rollout (``old_logq``) instead of once per
    minibatch: the rows a minibatch takes of them equal what its own rows give, and so do the JS and its derivative,
    bit for bit, at every minibatch size."""
    rng = np.random.default_rng(n)
    old = (3 * rng.standard_normal((2048, n))).astype(np.float32)
    whole = categorical_log_probs(old)
    logp = categorical_log_probs(old + (0.3 * rng.standard_normal(old.shape)).astype(np.float32))
    p = np.exp(logp)
    for b in (1, 7, 64, 128, 256):
        idx = rng.permutation(2048)[:b]
        own = categorical_log_probs(np.ascontiguousarray(old[idx]))
        assert whole[idx].tobytes() == own.tobytes()
        ref = js_categorical_grad(p[idx], logp[idx], own)
        got = js_categorical_grad(p[idx], logp[idx], whole[idx])
        assert [a.tobytes() for a in got] == [a.tobytes() for a in ref]
    # and they are the log-softmax (torch's, within rounding)
    torch.testing.assert_close(torch.from_numpy(whole), torch.log_softmax(torch.from_numpy(old), -1))


@pytest.mark.parametrize("accelerated", [True, False])
def test_minibatch_extra_carries_old_log_probs_only_for_the_hand_derived_categorical_js(accelerated):
    import types

    import gymnasium as gym

    from suite.accel.ppo_rlvr_prm import RlvrPrmHandDerived
    from suite.algorithms.core import net_config
    from suite.algorithms.networks import ActorCritic

    cfg = RlvrPrmConfig()
    obs = torch.rand(300, 1)
    rollout = types.SimpleNamespace(n_samples=300, obs_all=lambda: iter([(slice(0, 300), obs)]))
    for action_space in (gym.spaces.Discrete(26), gym.spaces.Box(-1, 1, (3,), np.float32)):
        policy = ActorCritic(gym.spaces.Box(0, 1, (1,), np.float32), action_space, net_config(cfg))
        trainer = types.SimpleNamespace(policy=policy, kernel=None, off_cpu=False)
        extra = RlvrPrmTrainer.minibatch_extra(trainer, rollout)  # the specification's: pi_old's outputs
        if accelerated:  # the accelerator adds pi_old's log-probabilities, once per update
            extra = RlvrPrmHandDerived(trainer).minibatch_extra(extra)  # type: ignore[arg-type]
        with torch.no_grad():
            assert torch.equal(extra["old_params"], policy.policy_params(obs))
        categorical = isinstance(action_space, gym.spaces.Discrete)
        assert ("old_logq" in extra) == (accelerated and categorical)
        if "old_logq" in extra:
            assert extra["old_logq"].numpy().tobytes() == categorical_log_probs(extra["old_params"].numpy()).tobytes()


def test_aliases_and_validation():
    assert get_algorithm("grpo-rlvr-prm").id == "ppo-rlvr-prm" and get_algorithm("rlvr-prm").id == "ppo-rlvr-prm"
    cfg = get_algorithm("ppo-rlvr-prm").make_config("CartPole-v1")
    assert cfg.learning_rate.kind == "cosine" and (cfg.learning_rate.start, cfg.learning_rate.end) == (5e-4, 2e-5)
    assert 0.85 <= cfg.gae_lambda <= 0.92 and cfg.n_value_heads >= 2
    with pytest.raises(UserError, match="n_value_heads"):
        get_algorithm("ppo-rlvr-prm").make_config("CartPole-v1", {"n_value_heads": 1})


def test_trial_is_deterministic_and_logs_the_regulariser():
    spec = TrialSpec("ppo-rlvr-prm", "CartPole-v1", seed=1, total_timesteps=2048, n_eval_episodes=2)
    a, b = run_trial(spec.resolve()), run_trial(spec.resolve())
    assert a["status"] == "ok", a["traceback"]
    assert deterministic_view(a) == deterministic_view(b)
    last = a["updates"][-1]
    assert last["js"] > 0 and last["smooth_penalty"] > 0 and last["sigma2_mean"] > 0
    assert np.isfinite(last["grad_norm"]) and last["grad_var"] > 0


def test_gaussian_box_smoke():
    small = {"n_steps": 64, "batch_size": 32}
    rec = run_trial(TrialSpec("ppo-rlvr-prm", "Hopper-v5", 0, 128, overrides=small, n_eval_episodes=1).resolve())
    assert rec["status"] == "ok", rec["traceback"]
    last = rec["updates"][-1]
    assert abs(last["js"]) < 0.05 and last["smooth_penalty"] > 0  # Monte Carlo JS: unbiased, may dip below 0


def test_learns_cartpole():
    rec = run_trial(TrialSpec("ppo-rlvr-prm", "CartPole-v1", seed=0, total_timesteps=25_000).resolve())
    assert rec["status"] == "ok", rec["traceback"]
    assert rec["final_eval_mean"] >= 150.0  # random ~22


@pytest.mark.parametrize("env", ["CartPole-v1", "Hopper-v5", "TextMatch-v0"])
def test_hand_derived_update_equals_autograds(env):
    """The hand-derived update (JS term and input-gradient penalty by hand, the default) takes the same first update
    as autograd (``hand_derived = false``) within float rounding; the option is part of a trial's key only when off."""
    spec = TrialSpec("ppo-rlvr-prm", env, 0, 256, overrides={"n_steps": 256, "batch_size": 64, "n_epochs": 1, "n_envs": 1})
    fused = spec.resolve()
    plain = TrialSpec(spec.algo, env, 0, 256, overrides={**spec.overrides, "hand_derived": False}).resolve()
    assert plain.key != fused.key and fused.config_dict["hand_derived"] is True
    assert config_identity(plain.config)["hand_derived"] is False
    # TextMatch's defaults use Hutchinson's estimate (smooth_probes = 1), hand-derived only since 2026-12-02: the option
    # is in its key, so the records made by autograd before are not reused; the exact penalty's keys are unchanged
    assert ("hand_derived" in config_identity(fused.config)) == (fused.config.smooth_probes > 0) == (env == "TextMatch-v0")
    first = [run_trial(r)["updates"][0] for r in (plain, fused)]
    assert first[1]["n_minibatches"] == first[0]["n_minibatches"] == 4
    for name in ("policy_loss", "value_loss", "entropy", "approx_kl", "js", "smooth_penalty", "grad_norm"):
        assert first[1][name] == pytest.approx(first[0][name], rel=2e-3, abs=1e-6), name
