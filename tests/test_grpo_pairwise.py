"""grpo-pairwise: the loss and its gradient at ratio 1 by hand, collection, determinism, learning, early stop."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from suite.algorithms.grpo_pairwise import PairwiseTrainer, flatten_episodes, pairwise_group_losses, trajectory_log_weights
from suite.config import config_identity
from suite.trial import TrialContext, TrialSpec, deterministic_view, run_trial

# Document 003's defaults plateau on TextMatch "hello" (the policy writes "lllll", then "helll": one scalar
# input barely separates the positions); inside the document's own troubleshooting ranges for temperature
# (0.1-1.0) and entropy (0.05-0.1), with a larger step, it writes the target (see the report in the registry notes).
TUNED_TEXT = {"temperature": 1.0, "ent_coef": 0.1, "learning_rate": 5e-3}


def test_pairwise_loss_of_one_group_of_three_by_hand():
    returns = torch.tensor([1.0, 0.0, 2.0])
    log_w = torch.tensor([0.1, -0.2, 0.3])
    T = 0.5
    want = 0.0
    for i in range(3):
        for j in range(3):
            if i != j:
                d = float(returns[i] - returns[j]) / T
                want += -math.log(1 / (1 + math.exp(-d))) * float(log_w[i] - log_w[j])
    want /= 3 * 2
    got = pairwise_group_losses(log_w, returns, torch.tensor([[0, 1, 2]]), T)
    assert got.shape == (1,) and float(got[0]) == pytest.approx(want, rel=1e-6)
    # two groups: the mean of the group losses is the document's sum / (G k (k-1))
    two = pairwise_group_losses(
        torch.tensor([0.1, -0.2, 0.5, 0.0]), torch.tensor([1.0, 0.0, 3.0, 3.0]), torch.tensor([[0, 1], [2, 3]]), T
    )
    c = -math.log(1 / (1 + math.exp(-2.0)))  # R 1 vs 0
    c_rev = -math.log(1 / (1 + math.exp(2.0)))
    assert two.tolist() == pytest.approx([(c * 0.3 + c_rev * -0.3) / 2, (math.log(2) * 0.5 + math.log(2) * -0.5) / 2])


def test_trajectory_log_weight_is_the_log_of_the_mean_ratio():
    log_ratio = torch.tensor([math.log(2.0), math.log(0.5), 0.0])
    episode = torch.tensor([0, 0, 1])
    got = trajectory_log_weights(log_ratio, episode, torch.tensor([2, 1]))
    assert got.tolist() == pytest.approx([math.log(1.25), 0.0])


def test_gradient_at_ratio_one_is_nonzero_and_a_group_baselined_policy_gradient():
    # one state, logits theta; the batch was sampled by pi_old = pi_theta, so every ratio is exactly 1
    theta = torch.tensor([0.2, -0.1, 0.4], requires_grad=True)
    actions = [[0, 2], [1], [2, 2, 0]]  # three trajectories
    returns = torch.tensor([1.0, -0.5, 3.0])
    T = 0.2
    flat = torch.tensor([a for traj in actions for a in traj])
    episode = torch.tensor([i for i, traj in enumerate(actions) for _ in traj])
    lengths = torch.tensor([len(t) for t in actions])
    logp = F.log_softmax(theta, -1)[flat]
    log_w = trajectory_log_weights(logp - logp.detach(), episode, lengths)
    loss = pairwise_group_losses(log_w, returns, torch.tensor([[0, 1, 2]]), T).mean()
    assert float(loss.detach()) == 0.0 and torch.equal(log_w.detach(), torch.zeros(3))
    (grad,) = torch.autograd.grad(loss, theta)
    # by hand: d log w_i = mean_t (onehot(a_t) - softmax(theta)); loss = sum_{i!=j} c_ij (log w_i - log w_j) / 6
    p = F.softmax(theta.detach(), -1)
    g = torch.stack([torch.stack([F.one_hot(torch.tensor(a), 3).float() - p for a in traj]).mean(0) for traj in actions])
    want = torch.zeros(3)
    for i in range(3):
        for j in range(3):
            if i != j:
                want += -F.logsigmoid((returns[i] - returns[j]) / T) * (g[i] - g[j]) / 6
    torch.testing.assert_close(grad, want)
    assert float(grad.norm()) > 0.1
    # logsigmoid(x) - logsigmoid(-x) = x, so at ratio 1 this is REINFORCE with the group-mean baseline:
    # -sum_i (R_i - mean R) g_i / ((k - 1) T)
    torch.testing.assert_close(grad, -((returns - returns.mean())[:, None] * g).sum(0) / (2 * T))


def test_collection_counts_only_real_steps_and_one_episode_per_trajectory():
    rec = run_trial(TrialSpec("grpo-pairwise", "CartPole-v1", 0, 1000, n_eval_episodes=2).resolve())
    assert rec["status"] == "ok", rec["traceback"]
    full = [u for u in rec["updates"] if u["episodes"] == 8]
    assert len(full) >= len(rec["updates"]) - 1  # only the batch the budget cut may hold fewer
    # ... but at least one group of 4 (the loss forms whole random groups of the episodes that finished; any
    # remainder is left out of it: PairwiseTrainer.loss)
    assert all(u["episodes"] >= 4 for u in rec["updates"])
    n = 8 * len(full)
    assert [u["return_mean"] for u in full] == pytest.approx(
        [np.mean(rec["curve"]["return"][8 * k : 8 * k + 8]) for k in range(len(full))]
    )
    # the budget: stops within one lockstep of the 8 sub-envs; every finished episode is recorded, the steps of
    # episodes still running at the budget are counted but not recorded (they never finished)
    assert 1000 <= rec["steps"] < 1008
    assert sum(rec["curve"]["length"][:n]) == rec["curve"]["step"][n - 1] <= rec["steps"]


@pytest.mark.parametrize("env_id", ["CartPole-v1", "TextMatch-v0"])
def test_trial_is_deterministic(env_id):
    spec = TrialSpec("grpo-pairwise", env_id, seed=4, total_timesteps=3000, n_eval_episodes=2)
    a, b = run_trial(spec.resolve()), run_trial(spec.resolve())
    assert a["status"] == "ok", a["traceback"]
    assert deterministic_view(a) == deterministic_view(b)
    last = a["updates"][-1]
    assert last["grad_norm"] > 0 and last["grad_var"] > 0
    # one step: pi = pi_old, up to float rounding: the update's batched forward and the rollout's batch-of-8 inference
    # may take different kernel paths (bitwise equal on an AVX2 EPYC, 9.5e-10 apart on an AVX-512 Xeon)
    assert last["approx_kl"] == pytest.approx(0.0, abs=1e-6)


def test_writes_hello():
    # One seed's outcome depends on the CPU's kernels through float rounding (seed 0 at 12,000 steps wrote 'hello' on
    # an AVX2 EPYC and stopped at 3.9 on an AVX-512 Xeon), so the test asks what the algorithm does across seeds:
    # on the Xeon, 11 of seeds 0-11 reach the maximum at 20,000 steps (seed 4 stays at 3.9).
    finals = []
    for seed in range(5):
        rec = run_trial(TrialSpec("grpo-pairwise", "TextMatch-v0", seed, 20_000, overrides=TUNED_TEXT).resolve())
        assert rec["status"] == "ok", rec["traceback"]
        finals.append(rec["final_eval_mean"])
    assert sum(f == pytest.approx(5.0) for f in finals) >= 3, finals


def test_early_stop_option_stops_at_95_percent_of_the_maximum():
    over = {**TUNED_TEXT, "early_stop_fraction": 0.95}
    rec = run_trial(TrialSpec("grpo-pairwise", "TextMatch-v0", 0, 40_000, overrides=over).resolve())
    assert rec["status"] == "ok" and rec["steps"] < 40_000
    assert rec["updates"][-1]["return_mean"] >= 0.95 * 5 and all(u["return_mean"] < 4.75 for u in rec["updates"][:-1])
    bad = run_trial(TrialSpec("grpo-pairwise", "LunarLander-v3", 0, 100, overrides={"early_stop_fraction": 0.9}).resolve())
    assert bad["status"] == "failed" and "maximum return" in bad["error"]


def test_learns_cartpole():
    rec = run_trial(TrialSpec("grpo-pairwise", "CartPole-v1", 1, 30_000).resolve())
    assert rec["status"] == "ok", rec["traceback"]
    assert rec["final_eval_mean"] >= 150.0  # random ~22


@pytest.mark.parametrize(
    ("env_id", "overrides"),
    [
        ("CartPole-v1", {}),
        ("TextMatch-v0", {}),
        ("Hopper-v5", {"max_episode_steps": 40}),  # a Gaussian head (log std gradient too), normalised observations
        ("CartPole-v1", {"n_trajectories": 12, "group_size": 3, "n_epochs": 2}),  # 4 groups, a second epoch at ratio != 1
    ],
)
def test_hand_derived_update_equals_autograds(env_id, overrides):
    """The update by hand (the default since 1.4.0) takes the autograd path's step (``hand_derived = false``) within
    float rounding: the gradient, the per-group gradients' variance and every metric, from the same batch and
    parameters, with the same random groups."""
    results = []
    for hand in (False, True):
        resolved = TrialSpec("grpo-pairwise", env_id, 3, 10_000, overrides={**overrides, "hand_derived": hand}).resolve()
        torch.manual_seed(0)  # the same initial network and the same sampled batch
        trainer = PairwiseTrainer(TrialContext(resolved), resolved.config)
        assert (trainer.kernel is not None) and resolved.config.hand_derived == hand
        batch = flatten_episodes(trainer.collector.collect(2_000).complete_groups())
        torch.manual_seed(11)  # the random groups
        before = trainer.stepper.flat.data.clone()
        metrics = trainer.update(batch, progress=0.5)
        grad = trainer.stepper.flat.grad.clone()  # the last epoch's gradient, clipped as the step used it
        results.append((metrics, grad, trainer.stepper.flat.data - before))
        for envs in trainer.ctx._envs:
            envs.close()
    (m0, g0, d0), (m1, g1, d1) = results
    assert set(m0) == set(m1)
    for name in m0:
        assert m1[name] == pytest.approx(m0[name], rel=1e-4, abs=1e-7), name
    assert m0["grad_var"] > 0 and m0["grad_norm"] > 0
    torch.testing.assert_close(g1, g0, rtol=1e-4, atol=1e-7)
    # Adam's first step is ~ lr * g / (|g| + eps) per entry: where a gradient entry is at eps's scale, rounding moves
    # the step by up to a percent of lr (1e-3)
    torch.testing.assert_close(d1, d0, rtol=1e-3, atol=1e-5)


def test_hand_derived_is_part_of_the_key_and_image_observations_take_autograd():
    on, off = (TrialSpec("grpo-pairwise", "CartPole-v1", 0, 100, overrides={"hand_derived": h}) for h in (True, False))
    on, off = on.resolve(), off.resolve()
    assert on.key != off.key and config_identity(on.config)["hand_derived"] is True
    # Pong's Nature CNN has no kernel: the update stays on autograd whatever the option says
    resolved = TrialSpec("grpo-pairwise", "ALE/Pong-v5", 0, 1_000, overrides={"max_episode_steps": 8}).resolve()
    trainer = PairwiseTrainer(TrialContext(resolved), resolved.config)
    assert trainer.kernel is None and resolved.config.hand_derived
    metrics = trainer.update(flatten_episodes(trainer.collector.collect(64).complete_groups()), progress=0.0)
    assert metrics["grad_norm"] > 0 and metrics["episodes"] == 8
    for envs in trainer.ctx._envs:
        envs.close()
