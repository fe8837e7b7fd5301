"""The shared on-policy core: GAE in closed form, reward normalisation, gradient statistics, bootstrapping."""

import numpy as np
import pytest
import torch

from suite.algorithms.core import Diverged, GradientStepper, RewardNormalizer, compute_gae
from suite.config import Schedule


def test_gae_constant_value_closed_form():
    # SB3 tests/test_gae.py idea: reward 1 per step, V = 0 everywhere, one env, episode of 4 steps.
    # With V = 0, delta_t = r_t and A_t = sum_k (gamma*lam)^k r_{t+k} up to the episode end.
    gamma, lam = 0.9, 0.8
    rewards = np.ones((4, 1), dtype=np.float32)
    values = np.zeros((4, 1), dtype=np.float32)
    dones = np.array([[0], [0], [0], [1]], dtype=np.float32)
    adv, ret = compute_gae(rewards, values, dones, np.array([123.0]), gamma, lam)
    g = gamma * lam
    expected = [1 + g + g**2 + g**3, 1 + g + g**2, 1 + g, 1.0]
    np.testing.assert_allclose(adv[:, 0], expected, rtol=1e-6)
    np.testing.assert_allclose(ret, adv + values)


def test_gae_lambda_one_gives_discounted_return_with_bootstrap():
    gamma = 0.5
    rewards = np.array([[1.0], [2.0], [3.0]], dtype=np.float32)
    values = np.array([[0.5], [0.25], [1.0]], dtype=np.float32)
    dones = np.zeros((3, 1), dtype=np.float32)
    last = np.array([8.0], dtype=np.float32)
    _, ret = compute_gae(rewards, values, dones, last, gamma, 1.0)
    # Monte-Carlo return bootstrapped with V(s_3) = 8: 1 + .5*2 + .25*3 + .125*8 = 3.75
    assert ret[0, 0] == pytest.approx(3.75)
    assert ret[2, 0] == pytest.approx(3 + 0.5 * 8)


def test_gae_does_not_leak_across_episode_boundary():
    rewards = np.array([[0.0, 0.0], [10.0, 0.0]], dtype=np.float32)
    values = np.zeros((2, 2), dtype=np.float32)
    dones = np.array([[1.0, 0.0], [0.0, 0.0]], dtype=np.float32)
    adv, _ = compute_gae(rewards, values, dones, np.zeros(2, dtype=np.float32), 0.99, 0.95)
    assert adv[0, 0] == 0.0  # the reward 10 belongs to the next episode
    assert adv[1, 0] == pytest.approx(10.0)


def test_reward_normalizer_scales_by_running_return_std_and_resets_on_done():
    norm = RewardNormalizer(n_envs=1, gamma=1.0)
    out = norm(np.array([2.0]), np.array([False]))
    # After one update the running var is dominated by the single return 2 (count 1e-4 prior of var 1).
    expected_var = (1.0 * 1e-4 + 0.0 * 1 + (2.0 - 0.0) ** 2 * 1e-4 * 1 / (1 + 1e-4)) / (1 + 1e-4)
    assert out[0] == pytest.approx(np.clip(2.0 / np.sqrt(expected_var + 1e-8), -10, 10))
    norm(np.array([1.0]), np.array([True]))
    assert norm.ret[0] == 0.0


def test_gradient_stepper_variance_across_minibatches():
    w = torch.nn.Parameter(torch.zeros(2))
    stepper = GradientStepper([w], Schedule("constant", 0.0, 0.0), max_grad_norm=0.0)
    stepper.begin_update(0.0)
    # Loss a.w has gradient a: minibatch grads (1, 0) and (3, 0): mean (2, 0), E||g - mean||^2 = 1.
    stepper.step((torch.tensor([1.0, 0.0]) * w).sum())
    stepper.step((torch.tensor([3.0, 0.0]) * w).sum())
    m = stepper.end_update()
    assert m["grad_var"] == pytest.approx(1.0)
    assert m["grad_norm"] == pytest.approx(2.0)


def test_gradient_stepper_flags_non_finite_loss():
    w = torch.nn.Parameter(torch.zeros(1))
    stepper = GradientStepper([w], Schedule("constant", 1e-3, 1e-3), max_grad_norm=0.5)
    with pytest.raises(Diverged):
        stepper.step(w.sum() * float("nan"))
