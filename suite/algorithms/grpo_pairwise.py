"""``grpo-pairwise``: the pairwise "Group Relative Policy Optimization" of 003_1e009463e86a4a6d.txt.

Not DeepSeekMath's GRPO (``grpo``): here groups are *random* subsets of the batch's trajectories (not
samples from one state), and the signal is a pairwise logistic comparison of their returns. Per update:

1. collect ``n_trajectories`` whole episodes with the current policy (pi_old);
2. per trajectory ``i``: ``w_i = mean_t pi(a_t|s_t) / pi_old(a_t|s_t)`` and its return ``R_i``;
3. shuffle the trajectories into groups of ``group_size``; for every ordered pair ``(i, j), i != j`` of a group

       loss_ij = -logsigmoid((R_i - R_j) / temperature) * (log w_i - log w_j)

   averaged over groups and pairs, minus ``ent_coef`` times the mean entropy; one Adam step with the gradient
   norm clipped to 0.5.

The document takes ONE gradient step per batch (``n_epochs = 1``, its ``GRPO.update``), so pi = pi_old when the
loss is evaluated: every ``w_i = 1`` and the loss VALUE is 0, but its gradient is not: since
``d log w_i = mean_t d log pi(a_t|s_t)`` at ratio 1, the update is ``sum_ij c_ij (g_i - g_j)``, ``c_ij =
-logsigmoid((R_i - R_j)/T) >= 0``, ``g_i`` the mean score function of trajectory i. A pair pushes the
probability of the *worse* trajectory down (``c_ij`` is large when ``R_i << R_j``) and the better one up.

Deviations from the document's code, each for a stated reason:

* entropy: the exact entropy of the policy at each visited state, averaged; the document computes
  ``-(p(a) log p(a)).mean()`` of the sampled action only, which is not the entropy (and its printed
  "entropy 3.258 = ln 26" at the start is the true entropy, not what that code prints);
* ``log w_i``: ``log(mean_t exp(log ratio))`` computed directly instead of ``log(w_i + 1e-8)`` (w_i > 0);
* trajectories of unequal length (CartPole) are averaged per trajectory; the document reshapes the batch into
  ``(n_trajectories, length)``, which only works for its fixed-length text env;
* the document's early stop ("mean batch return >= 95% of the maximum") is ``early_stop_fraction``, OFF by
  default: a suite trial spends its whole budget so that every algorithm is compared at the same step count,
  and a stop triggered by a stochastic training batch would make the budget itself depend on the outcome;
* grad_var: with one step per update, the variance "across minibatches" of the shared stepper is 0 by
  construction; the logged ``grad_var`` is the variance of the per-GROUP gradients of the pairwise loss
  (each group is an independent sample of the loss, the role minibatches play elsewhere).

The specification is :meth:`PairwiseTrainer.loss` (autograd); on MLP policies the update runs its accelerator
(:mod:`suite.accel.grpo_pairwise`) unless ``hand_derived = false``.

Nearest published relatives: pairwise policy gradients, P3O (Wu et al. 2023, arXiv 2310.00212), and ranking
losses on sampled responses, RRHF (Yuan et al. 2023, arXiv 2304.05302).

Longer than one screen: the document's deviations above, and the per-group gradient variance it reports, are part of
what the algorithm is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from suite.accel import Evaluated
from suite.accel.mlp import in_kernel_mode, kernel_for
from suite.algorithms.core import GradientStepper, net_config
from suite.algorithms.episodes import EpisodeGroupCollector, EpisodeGroups, episode_cap
from suite.algorithms.networks import ActorCritic
from suite.algorithms.trainer import Trainer
from suite.config import Schedule, engineering
from suite.envs import TEXTMATCH_ID
from suite.registry import register
from suite.textmatch import MATCH_REWARD

if TYPE_CHECKING:
    from suite.trial import TrialContext


@dataclass(frozen=True)
class PairwiseConfig:
    """Hyperparameters; defaults are document 003's (``config`` of its ``train.py``)."""

    n_trajectories: int = 8
    """Whole episodes per update (``num_trajectories_per_update``); one sub-env per trajectory."""
    group_size: int = 4
    """Trajectories per random group; must divide ``n_trajectories``."""
    temperature: float = 0.2
    """Return differences are divided by this inside the logistic comparison."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient (``entropy_coef``)."""
    learning_rate: Schedule = Schedule("constant", 1e-3, 1e-3)
    """Adam step size."""
    n_epochs: int = 1
    """Gradient steps per batch (the document: 1); groups are reshuffled before each."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    adam_eps: float = 1e-8
    """Adam epsilon (the document uses torch's default)."""
    pi_arch: tuple[int, ...] = (64, 64)
    """Policy MLP hidden sizes (the document: 2 x 64)."""
    activation: str = "relu"
    """Hidden activation (the document: ReLU)."""
    ortho_init: bool = False
    """Orthogonal init; the document keeps torch's default Linear init."""
    log_std_init: float = 0.0
    """Initial log std of a Gaussian policy (box action spaces)."""
    normalize_obs: bool = False
    """Running observation normalisation (useful on MuJoCo)."""
    max_episode_steps: int | None = None
    """Per-episode step cap (truncation) for long-episode envs; None = the env's own limit."""
    early_stop_fraction: float | None = None
    """Stop training once a batch's mean return reaches this fraction of the env's maximum (document: 0.95);
    None = off (the suite's default, see the module docstring). Needs an env with a known maximum."""
    # -- engineering knobs: how the computation runs, not what it computes (suite.config.ENGINEERING) --
    hand_derived: bool = field(default=True, metadata=engineering())
    """True runs the accelerator of this loss where it applies (:mod:`suite.accel.grpo_pairwise`: one forward and
    one backward pass of the policy MLP per group and one for the whole loss, by hand); False, the specification by
    autograd, which image observations (the Nature CNN) always take. The two agree up to float rounding (the parity
    harness checks the loss, the gradient and the per-group gradients' variance)."""
    vectorization: str = field(default="sync", metadata=engineering())
    """How the sub-envs are vectorised: sync or async (each trajectory is reset with its own seed, which the
    CartPole numpy fast path cannot do)."""

    def __post_init__(self) -> None:
        if self.n_trajectories < 2 or self.group_size < 2 or self.n_trajectories % self.group_size:
            raise ValueError("need group_size >= 2 dividing n_trajectories")
        if self.temperature <= 0 or self.n_epochs < 1:
            raise ValueError("temperature must be > 0 and n_epochs >= 1")
        if self.early_stop_fraction is not None and not 0 < self.early_stop_fraction <= 1:
            raise ValueError("early_stop_fraction must be in (0, 1] or None")
        if self.activation not in ("tanh", "relu") or self.vectorization not in ("sync", "async"):
            raise ValueError("activation must be tanh or relu; vectorization sync or async")


def pairwise_policy(observation_space: Any, action_space: Any, cfg: PairwiseConfig) -> ActorCritic:
    """Policy-only :class:`ActorCritic` (``n_value_heads = 0``: no critic)."""
    return ActorCritic(observation_space, action_space, net_config(cfg, n_value_heads=0))


# -- collection -------------------------------------------------------------------------------------------
@dataclass
class EpisodeBatch:
    """Whole episodes, flattened step-major. ``S`` steps in all, ``E`` episodes."""

    obs: torch.Tensor
    """``(S, *obs_shape)`` network inputs."""
    actions: torch.Tensor
    """``(S, *action_shape)``."""
    log_probs: torch.Tensor
    """``(S,)`` log pi_old(a|s)."""
    episode: torch.Tensor
    """``(S,)`` int64 index of each step's episode in ``[0, E)``."""
    returns: torch.Tensor
    """``(E,)`` undiscounted sum of training rewards."""
    lengths: torch.Tensor
    """``(E,)`` int64 steps per episode."""

    def to(self, device: torch.device) -> EpisodeBatch:
        """The same batch with every tensor on ``device`` (a specification running off the CPU)."""
        return EpisodeBatch(*(getattr(self, f).to(device) for f in self.__dataclass_fields__))


def flatten_episodes(groups: EpisodeGroups) -> EpisodeBatch:
    """The real steps of padded, time-major episodes (``EpisodeGroups`` from the shared collector), flattened.

    The collector (``suite.algorithms.episodes.EpisodeGroupCollector``, here with groups of one: every trajectory
    from its own seed, as the document samples them) steps every sub-env until each has finished one episode;
    steps a finished sub-env takes meanwhile are masked out and not counted in ``ctx.steps``.
    """
    mask = torch.from_numpy(groups.mask)
    _, episode = mask.nonzero(as_tuple=True)
    return EpisodeBatch(
        obs=groups.obs[mask],
        actions=groups.actions[mask],
        log_probs=torch.from_numpy(groups.log_probs)[mask],
        episode=episode,
        returns=torch.from_numpy(groups.returns).float(),
        lengths=torch.from_numpy(groups.lengths),
    )


# -- the loss ---------------------------------------------------------------------------------------------
def trajectory_log_weights(log_ratio: torch.Tensor, episode: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``log w_i = log(mean_t exp(log_ratio_t))`` over the steps of each episode.

    Args:
        log_ratio: ``(S,)`` log pi - log pi_old per step; episode: ``(S,)`` episode index; lengths: ``(E,)``.

    Returns:
        ``(E,)``.
    """
    w = log_ratio.new_zeros(lengths.shape[0]).index_add(0, episode, torch.exp(log_ratio))
    return torch.log(w / lengths.to(log_ratio.dtype))


def pairwise_group_losses(
    log_w: torch.Tensor, returns: torch.Tensor, groups: torch.Tensor, temperature: float
) -> torch.Tensor:
    """Mean over the ordered pairs ``i != j`` of each group of ``-logsigmoid((R_i - R_j)/T) * (log w_i - log w_j)``.

    Args:
        log_w: ``(E,)``; returns: ``(E,)``; groups: ``(G, k)`` episode indices, each episode in one group.

    Returns:
        ``(G,)``; their mean is the document's loss (its sum divided by ``G * k * (k - 1)``).
    """
    lw, r = log_w[groups], returns[groups]
    coef = -F.logsigmoid((r[:, :, None] - r[:, None, :]) / temperature)
    k = groups.shape[1]
    off_diagonal = 1.0 - torch.eye(k, dtype=lw.dtype, device=lw.device)
    return (coef * (lw[:, :, None] - lw[:, None, :]) * off_diagonal).sum((1, 2)) / (k * (k - 1))


def max_return(env_id: str, env_kwargs: dict[str, Any]) -> float | None:
    """The best possible episode return where it is known (for the optional early stop), else None."""
    if env_id == TEXTMATCH_ID:
        return len(env_kwargs["target"]) * MATCH_REWARD
    if env_id == "CartPole-v1":
        return 500.0
    return None


class PairwiseTrainer(Trainer):
    """Collect whole episodes, one pairwise-loss step per batch (``n_epochs``), record, evaluate."""

    cfg: PairwiseConfig

    def __init__(self, ctx: TrialContext, cfg: PairwiseConfig):
        super().__init__(ctx, cfg)
        max_len, cap = episode_cap(ctx, cfg.max_episode_steps or 0)
        self.envs = ctx.make_envs(cfg.n_trajectories, vectorization=cfg.vectorization, max_episode_steps=cap)
        self.policy = pairwise_policy(self.envs.single_observation_space, self.envs.single_action_space, cfg)
        if self.off_cpu:
            self.policy.to_device(self.device)
        self.stepper = GradientStepper(list(self.policy.parameters()), cfg.learning_rate, cfg.max_grad_norm, cfg.adam_eps)
        self.kernel = kernel_for(self.policy, self.stepper.flat)  # hand-derived inference (and the accelerator's passes)
        self.collector = EpisodeGroupCollector(
            ctx, self.envs, self.policy, group_size=1, max_len=max_len, cap=cap, kernel=self.kernel
        )
        self.use_specification(type(self).loss)
        self.collector.clock = self.clock
        self.stop_at: float | None = None
        if cfg.early_stop_fraction is not None:
            best = max_return(ctx.env_id, dict(ctx.env_kwargs))
            if best is None:
                raise ValueError(f"early_stop_fraction needs a known maximum return; {ctx.env_id} has none")
            self.stop_at = cfg.early_stop_fraction * best

    def prepare(self) -> EpisodeBatch | None:
        """Whole episodes (stops at the budget; unfinished episodes are dropped); None when fewer than a group finished
        within it. The pairwise loss needs no advantages."""
        with self.ctx.phase("rollout"):
            episodes = self.collector.collect(self.ctx.remaining_steps).complete_groups()
            batch = flatten_episodes(episodes) if episodes is not None else None
        return None if batch is None or batch.lengths.shape[0] < self.cfg.group_size else batch

    def optimise(self, prepared: EpisodeBatch, progress: float) -> dict[str, float]:
        return self.update(prepared, progress=progress)

    def stop(self, metrics: dict[str, float]) -> bool:
        return self.stop_at is not None and metrics["return_mean"] >= self.stop_at

    def loss(self, batch: EpisodeBatch) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """(total loss, per-group pairwise losses ``(G,)``, metrics) with freshly shuffled groups."""
        cfg = self.cfg
        logp, entropy, _, _ = self.policy.evaluate_actions(batch.obs, batch.actions)
        log_ratio = logp - batch.log_probs
        log_w = trajectory_log_weights(log_ratio, batch.episode, batch.lengths)
        groups = self.shuffled_groups(batch.lengths.shape[0]).to(log_w.device)  # fewer than n_trajectories if cut
        group_losses = pairwise_group_losses(log_w, batch.returns, groups, cfg.temperature)
        loss = group_losses.mean() - cfg.ent_coef * entropy.mean()
        metrics = {
            "pairwise_loss": group_losses.mean().detach(),
            "entropy": entropy.mean().detach(),
            "approx_kl": (batch.log_probs - logp).mean().detach(),  # the document's monitor
            "log_w_abs_max": log_w.abs().max().detach(),
        }
        return loss, group_losses, metrics

    def group_gradient_variance(self, group_losses: torch.Tensor) -> float:
        """Trace of the covariance of the per-group gradients, ``mean_g ||g_g||^2 - ||mean_g g_g||^2``."""
        params = self.stepper.params
        flats = []
        for g in range(group_losses.shape[0]):
            grads = torch.autograd.grad(group_losses[g], params, retain_graph=True)
            flats.append(torch.cat([gr.reshape(-1) for gr in grads]))
        stacked = torch.stack(flats)
        return float(stacked.square().sum(1).mean() - stacked.mean(0).square().sum())

    def shuffled_groups(self, n: int) -> torch.Tensor:
        """``(G, group_size)`` episode indices: a fresh random partition (whole groups only) of ``n`` episodes."""
        k = self.cfg.group_size
        return torch.randperm(n)[: n - n % k].reshape(-1, k)

    def spec_forward(self, batch: EpisodeBatch) -> Evaluated:
        """One epoch's loss by autograd, with the per-group gradients' variance (``group_grad_var``) in its metrics."""
        loss, group_losses, m = self.loss(batch.to(self.device) if self.off_cpu else batch)
        clock = self.clock
        clock.lap("forward", int(batch.episode.shape[0]))
        group_var = self.group_gradient_variance(group_losses)
        clock.lap("group_gradients")
        metrics = {k: float(v) for k, v in m.items()}
        metrics["group_grad_var"] = group_var

        def backward(accumulate: bool) -> None:
            if not accumulate:
                self.stepper.zero_grad()
            self.stepper.backward(loss)

        return Evaluated(loss, metrics, backward)

    @in_kernel_mode(lambda self: self.accelerator is not None)
    def update(self, batch: EpisodeBatch, progress: float) -> dict[str, float]:
        lr = self.stepper.begin_update(progress)
        sums: dict[str, float] = {}
        group_vars = []
        clock = self.clock
        forward = self.accelerator.forward if self.accelerator is not None else self.spec_forward
        for _ in range(self.cfg.n_epochs):
            evaluated = forward(batch)
            evaluated.backward(False)
            clock.lap("backward")
            self.stepper.apply()
            clock.lap("optimizer")
            metrics = dict(evaluated.metrics)
            group_vars.append(metrics.pop("group_grad_var"))
            for name, value in metrics.items():
                sums[name] = sums.get(name, 0.0) + value
        self.stepper.check_finite()
        out = {k: v / self.cfg.n_epochs for k, v in sums.items()}
        out.update(self.stepper.end_update())
        out["grad_var"] = float(np.mean(group_vars))  # across groups (see the module docstring)
        returns = batch.returns.numpy()
        out.update(
            return_mean=float(returns.mean()),
            return_max=float(returns.max()),
            return_min=float(returns.min()),
            learning_rate=lr,
            episodes=float(len(returns)),
        )
        return out


@register(
    "grpo-pairwise",
    version="1.4.0",
    summary="Pairwise logistic comparison of returns within random groups of trajectories (document 003's 'GRPO')",
    reference=(
        "003_1e009463e86a4a6d.txt ('Group Relative Policy Optimization', pairwise form; not DeepSeekMath GRPO); "
        "nearest published relatives: P3O, arXiv 2310.00212; RRHF, arXiv 2304.05302"
    ),
    action_spaces=("discrete", "box"),
    observations=("vector", "image"),
    config=PairwiseConfig,
    hyperparams="grpo-pairwise.toml",
    notes=(
        "Random groups (not same-state) of whole episodes; w_i = mean_t pi/pi_old; loss = mean over groups and ordered "
        "pairs of -logsigmoid((R_i - R_j)/T) * (log w_i - log w_j) - ent_coef * entropy; one Adam step per batch as "
        "in the document (ratio 1, nonzero gradient). No critic. Early stop at 95% of the max return is "
        "early_stop_fraction (off: trials spend their budget). grad_var is across groups. Relatives: P3O "
        "(arXiv 2310.00212), RRHF (arXiv 2304.05302)."
    ),
    policy_factory=pairwise_policy,
)
def train_grpo_pairwise(ctx: Any, cfg: PairwiseConfig) -> Any:
    return PairwiseTrainer(ctx, cfg).train()
