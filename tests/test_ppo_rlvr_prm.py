"""ppo-rlvr-prm: variance-weighted advantages and JS by hand, the smoothness penalty, aliases, determinism, learning."""

import math

import numpy as np
import pytest
import torch

from suite.algorithms.ppo_rlvr_prm import (
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
