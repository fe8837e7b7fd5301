"""ppo-adaptive-clip: the clip-range rule by hand, the lr step decay, PopArt, the LSTM critic, determinism, learning."""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from suite.algorithms.ppo_adaptive_clip import (
    AdaptiveClipTrainer,
    PopArtValue,
    RecurrentCritic,
    adaptive_clip_policy,
    adaptive_clip_range,
)
from suite.registry import get_algorithm
from suite.trial import TrialContext, TrialSpec, deterministic_view, run_trial


def make_trainer(**overrides):
    resolved = TrialSpec("ppo-adaptive-clip", "CartPole-v1", 0, 1024, overrides=overrides, n_eval_episodes=1).resolve()
    torch.manual_seed(0)
    ctx = TrialContext(resolved)
    return AdaptiveClipTrainer(ctx, resolved.config), ctx


def test_clip_range_formula_by_hand():
    # base 0.2, s = 2, s_ref = 0.5, k = 0.5: 0.2 * 4 ** 0.5 = 0.4, inside [0.05, 0.5]
    assert adaptive_clip_range(2.0, 0.5, 0.2, 0.5, 0.05, 0.5) == pytest.approx(0.4)
    assert adaptive_clip_range(2.0, 0.5, 0.2, 0.5, 0.05, 0.3) == pytest.approx(0.3)  # clamped above
    assert adaptive_clip_range(0.01, 1.0, 0.2, 1.0, 0.05, 0.3) == pytest.approx(0.05)  # 0.002 clamped below
    assert adaptive_clip_range(3.0, 3.0, 0.17, 2.0, 0.05, 0.3) == pytest.approx(0.17)  # same spread: the base


def test_clip_range_uses_the_std_of_the_raw_advantages_and_its_moving_average():
    trainer, ctx = make_trainer(clip_range=0.2, clip_std_exponent=0.5, clip_min=0.05, clip_max=0.5, clip_std_momentum=0.9)
    try:
        adv = np.array([[1.0, -1.0], [3.0, -3.0]], dtype=np.float32)  # raw std sqrt(5), never normalised here
        m = trainer.begin_update(None, adv, progress=0.0)
        assert m["adv_std_raw"] == pytest.approx(math.sqrt(5.0), rel=1e-6)
        assert m["clip_range"] == pytest.approx(0.2) and trainer.clip == pytest.approx(0.2)  # first update: s_ref = s
        m = trainer.begin_update(None, 2 * adv, progress=0.0)  # twice the spread against s_ref = sqrt(5)
        assert m["adv_std_ref"] == pytest.approx(math.sqrt(5.0), rel=1e-6)
        assert m["clip_range"] == pytest.approx(0.2 * math.sqrt(2.0), rel=1e-6)
        # s_ref moved to 0.9 * sqrt5 + 0.1 * 2 sqrt5 = 1.1 sqrt5; s = sqrt5 / 2 -> 0.2 * (1 / 2.2) ** 0.5
        m = trainer.begin_update(None, adv / 2, progress=0.0)
        assert m["clip_range"] == pytest.approx(0.2 * (1 / 2.2) ** 0.5, rel=1e-6)
    finally:
        ctx.close()


def test_fixed_reference_std():
    trainer, ctx = make_trainer(clip_range=0.1, clip_std_ref=0.5, clip_std_exponent=1.0, clip_max=1.0)
    try:
        m = trainer.begin_update(None, np.array([[1.0], [-1.0]], dtype=np.float32), progress=0.0)
        assert m["clip_range"] == pytest.approx(0.2) and m["adv_std_ref"] == 0.5
    finally:
        ctx.close()


def test_tracking_rule_moves_delta_toward_the_target_at_a_decaying_rate():
    """Document 000's literal reading: delta starts at delta_init (the base), moves toward the ratio rule's target
    by delta_lr * 0.9 ** (update // 10) of the gap each update."""
    trainer, ctx = make_trainer(
        clip_rule="tracking", clip_range=0.2, clip_std_ref=1.0, clip_std_exponent=1.0, clip_max=1.0, delta_lr=0.5
    )
    try:
        adv = np.array([[2.0], [-2.0]], dtype=np.float32)  # std 2: target 0.2 * 2 = 0.4
        m = trainer.begin_update(None, adv, progress=0.0)
        assert m["clip_target"] == pytest.approx(0.4) and m["delta_lr"] == 0.5
        assert trainer.clip == pytest.approx(0.2 + 0.5 * (0.4 - 0.2))
        trainer.n_updates = 10  # the 11th update: rate 0.5 * 0.9
        before = trainer.delta
        m = trainer.begin_update(None, adv, progress=0.0)
        assert m["delta_lr"] == pytest.approx(0.45)
        assert trainer.clip == pytest.approx(before + 0.45 * (0.4 - before))
        assert m["clip_at_floor"] == 0.0
    finally:
        ctx.close()


def test_learning_rate_step_decay_every_ten_updates():
    trainer, ctx = make_trainer(learning_rate=1e-3, lr_decay_every=10, lr_decay_factor=0.9)
    try:
        got = []
        for k in (0, 9, 10, 25):
            trainer.n_updates = k
            got.append(trainer.stepper.begin_update(0.5))
        assert got == pytest.approx([1e-3, 1e-3, 9e-4, 1e-3 * 0.81])
    finally:
        ctx.close()
    off, ctx = make_trainer(learning_rate=1e-3)
    off.n_updates = 50
    assert off.stepper.begin_update(0.5) == 1e-3  # off by default
    ctx.close()


def test_popart_preserves_outputs_and_trains_in_normalised_units():
    torch.manual_seed(0)
    inner = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    pop = PopArtValue(inner, inner[-1], beta=0.5)
    x = torch.randn(5, 3)
    before = pop(x).detach().clone()
    pop.update_stats(torch.tensor([10.0, 12.0, 14.0]))  # first batch: mu 12, nu 146.67, sigma sqrt(8/3)
    assert float(pop.mu) == pytest.approx(12.0) and float(pop.sigma) == pytest.approx(math.sqrt(8 / 3), rel=1e-5)
    torch.testing.assert_close(pop(x).detach(), before, rtol=1e-5, atol=1e-5)
    pop.update_stats(torch.tensor([30.0, 50.0]))  # mu 0.5 * 12 + 0.5 * 40 = 26
    assert float(pop.mu) == pytest.approx(26.0)
    torch.testing.assert_close(pop(x).detach(), before, rtol=1e-4, atol=1e-4)
    # gradient of the raw-unit MSE == gradient of the MSE in normalised units
    target = torch.full((5, 1), 30.0)
    sigma, mu = pop.sigma.detach(), pop.mu.detach()
    g_raw = torch.autograd.grad((pop(x) - target).square().mean(), inner[-1].bias)[0]
    g_norm = torch.autograd.grad((inner(x) - (target - mu) / sigma).square().mean(), inner[-1].bias)[0]
    torch.testing.assert_close(g_raw, g_norm)


def test_lstm_critic_memory_runs_along_time_and_resets_at_episode_boundaries():
    trainer, ctx = make_trainer(critic="lstm", n_envs=2, n_steps=4)
    try:
        rollout = trainer.collector.collect()
        rollout.dones[:] = 0.0
        rollout.dones[1, 0] = 1.0  # env 0's episode ends at t=1: its memory restarts at t=2
        trainer.recurrent_values(rollout)
        rec = trainer.recurrent
        assert isinstance(rec, RecurrentCritic)
        with torch.no_grad():
            fresh = trainer.policy.values(rollout.obs.at(2)).numpy()  # memory None = zeros
        assert rollout.values[2, 0, 0] == pytest.approx(fresh[0, 0], abs=1e-6)  # reset
        assert abs(rollout.values[2, 1, 0] - fresh[1, 0]) > 1e-6  # env 1 carries its memory
        h = trainer._stored_state["h"].reshape(4, 2, -1)
        assert torch.count_nonzero(h[0]) == 0 and torch.count_nonzero(h[2, 0]) == 0 and torch.count_nonzero(h[2, 1]) > 0
    finally:
        ctx.close()


def test_beta_policy_acts_inside_the_bounds():
    space = gym.spaces.Box(-2.0, 3.0, (2,), np.float32)
    cfg = get_algorithm("ppo-adaptive-clip").make_config("Hopper-v5", {"action_dist": "beta", "popart": True})
    policy = adaptive_clip_policy(gym.spaces.Box(-1, 1, (4,), np.float32), space, cfg)
    a = policy.predict(np.zeros((64, 4), np.float32), deterministic=False)
    assert a.shape == (64, 2) and a.min() >= -2.0 and a.max() <= 3.0


@pytest.mark.parametrize("overrides", [{}, {"critic": "lstm", "popart": True, "lr_decay_every": 10}])
def test_trial_is_deterministic(overrides):
    spec = TrialSpec("ppo-adaptive-clip", "CartPole-v1", seed=2, total_timesteps=2048, overrides=overrides, n_eval_episodes=2)
    a, b = run_trial(spec.resolve()), run_trial(spec.resolve())
    assert a["status"] == "ok", a["traceback"]
    assert deterministic_view(a) == deterministic_view(b)
    for key in ("clip_range", "adv_std_raw", "grad_norm", "grad_var"):
        assert np.isfinite(a["updates"][-1][key]), key


def test_learns_cartpole():
    rec = run_trial(TrialSpec("ppo-adaptive-clip", "CartPole-v1", seed=0, total_timesteps=20_000).resolve())
    assert rec["status"] == "ok", rec["traceback"]
    # random ~22; the zoo's PPO needs ~100k for 500. At 20k the final evaluation spreads widely with the seed:
    # 112-500 over seeds 0-23 (mean 342 with the hand-derived update, 353 with autograd; version 1.2.0)
    assert rec["final_eval_mean"] >= 100.0
