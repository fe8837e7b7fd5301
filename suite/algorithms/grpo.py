"""``grpo``: Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300), episodic.

DeepSeekMath samples G outputs per prompt, scores them and gives every token of output i the advantage
``(r_i - mean(r)) / std(r)``, optimised with PPO's clipped ratio plus a per-token KL penalty to a frozen
reference policy; there is no critic. Adapted to episodic envs as stable-baselines3-contrib issue 301
proposes: a "prompt" is an initial state, a *group* is G episodes started from one shared reset seed,
an "output" is an episode and one env step is one "token". K groups (K distinct seeds) make one update.

Options (:class:`GRPOConfig`) cover the published variants: outcome or process supervision (paper section
4.1.2 / 4.1.3), the loss aggregation of GRPO, Dr. GRPO (Liu et al. 2025, arXiv 2503.20783) and DAPO (Yu et al.
2025, arXiv 2503.14476, token-level mean + dynamic sampling), group/batch/no reward scaling (TRL's
``scale_rewards``) and asymmetric clipping (DAPO's clip-higher).

Collection (:mod:`suite.algorithms.episodes`): the G*K sub-envs are stepped together until each has finished its
first episode; ``ctx.steps`` counts only the transitions of the recorded episodes, the padding steps are reported per
update as ``padding_frac``, and only the groups whose episodes all finished within the budget are trained on.

Truncation: an episode cut by ``max_episode_steps`` (or the env's own limit) has the return it got; there is
no critic to bootstrap from, so a truncated episode is scored as if it had ended (``truncated_frac`` says how
often that happens). Keep the cap long enough that good and bad episodes still differ before it. An episode
cut by the suite's cap (below the env's own limit, e.g. Pong games capped at 1000 steps) is a partial game: it
is trained on but NOT recorded in the learning curve, which holds whole episodes only (the same quantity the
PPO family records); the trial's ``metrics`` say how many were left out (``capped_episodes``) and the cap.

The loss is :func:`grpo_loss` (autograd; :meth:`GRPOTrainer.loss` applies it to a slice of steps); on MLP policies the
update runs its accelerator (:mod:`suite.accel.grpo`) unless ``hand_derived = false``.

Longer than one screen: GRPO's options (two supervisions, three aggregations, three reward scalings, DAPO's dynamic
sampling, a refreshed reference policy) each need their own lines of config, advantage or update code.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from suite.accel import Evaluated
from suite.accel.mlp import in_kernel_mode, kernel_for
from suite.algorithms.core import ROLLOUT_STORAGES, GradientStepper, micro_batches, net_config
from suite.algorithms.episodes import EpisodeGroupCollector, EpisodeGroups, episode_cap
from suite.algorithms.networks import ActorCritic
from suite.algorithms.trainer import Trainer
from suite.config import Schedule, engineering
from suite.registry import register

if TYPE_CHECKING:
    from suite.trial import TrialContext

ADV_EPS = 1e-4
"""Added to the std in advantage normalisation (the issue's formula; TRL's GRPOTrainer uses the same 1e-4)."""

REF_CHUNK, REF_CHUNK_IMAGES = 4096, 256
"""Steps per forward of the reference policy (images: 256 frames are ~29 MB as float; 4096 would be ~460 MB)."""


@dataclass(frozen=True)
class GRPOConfig:
    """Hyperparameters of ``grpo``; SB3 names where SB3 has the concept, the papers' names otherwise."""

    group_size: int = 8
    """G: episodes per group, all reset with one seed (DeepSeekMath uses 64 outputs per question). >= 2."""
    n_groups: int = 4
    """K: groups (distinct reset seeds) per update; an update trains on G*K episodes."""
    supervision: Literal["outcome", "process"] = "outcome"
    """``outcome``: every step of episode i gets the group-normalised return (paper 4.1.2). ``process``:
    per-step rewards normalised over the group, advantage = sum of normalised rewards to go (paper 4.1.3)."""
    loss_agg: Literal["grpo", "dr_grpo", "dapo"] = "grpo"
    """How per-step losses become one number: ``grpo`` mean over episodes of the per-episode step mean;
    ``dr_grpo`` sum over steps / (episodes * max_episode_steps); ``dapo`` sum over steps / total steps
    (and dynamic sampling: zero-spread groups are dropped and resampled)."""
    scale_rewards: Literal["auto", "group", "batch", "none"] = "auto"
    """Divide the centred rewards by the std of the ``group``, of the whole ``batch``, or not at all (``none``);
    ``auto`` = ``none`` for ``dr_grpo`` (its fix of the std bias) and ``group`` otherwise (the paper)."""
    eps_low: float = 0.2
    """Lower clip: ratios below 1 - eps_low are clipped (0.2 is PPO's convention; the paper states none)."""
    eps_high: float = 0.2
    """Upper clip: ratios above 1 + eps_high are clipped (DAPO's clip-higher uses 0.28)."""
    beta: float = 0.04
    """Weight of the k3 KL penalty to the reference policy (paper: 0.04)."""
    ref_update_interval: int = 10
    """Refresh the frozen reference policy to the current one every this many updates; 0 = never (the
    reference stays the initial policy, as in the paper's single-iteration setting)."""
    max_resample_rounds: int = 3
    """``dapo`` only: extra batches of K groups drawn to replace zero-spread groups; after that many rounds the
    batch is topped up with zero-spread groups (advantage 0) so every update has K groups."""
    n_epochs: int = 1
    """mu: optimisation passes over each batch (paper: 1, i.e. a pure on-policy step)."""
    n_minibatches: int = 1
    """Minibatches per epoch; the batch is split by episodes (whole episodes stay together)."""
    learning_rate: Schedule = Schedule("constant", 3e-4, 3e-4)
    """Adam step size (a schedule over training progress)."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip (0 = none)."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient (the paper has none)."""
    adam_eps: float = 1e-5
    """Adam epsilon (SB3's 1e-5)."""
    pi_arch: tuple[int, ...] = (64, 64)
    """Policy MLP hidden sizes (empty on Atari: linear head on the Nature CNN)."""
    activation: str = "tanh"
    """Hidden activation: tanh or relu."""
    ortho_init: bool = True
    """Orthogonal initialisation (SB3 gains)."""
    log_std_init: float = 0.0
    """Initial log std of the Gaussian policy (continuous actions)."""
    normalize_obs: bool = False
    """Running mean/std observation normalisation (vector observations; rewards are normalised per group)."""
    max_episode_steps: int = 0
    """Per-episode step cap (truncation, scored honestly: see the module docstring); 0 = the env's own limit.
    Also the length of the rollout buffers and Dr. GRPO's constant normaliser."""
    # -- engineering knobs: how the computation runs, not what it computes (suite.config.ENGINEERING) --
    vectorization: Literal["sync", "async"] = field(default="sync", metadata=engineering())
    """How the G*K sub-envs are vectorised (CartPole's numpy fast path takes no per-env seeds, so no ``auto``)."""
    rollout_storage: str = field(default="numpy", metadata=engineering())
    """Memory toggle: episode buffers allocated and written by ``numpy`` or as ``torch`` tensors (exact: the same
    values either way)."""
    grad_accumulation: int = field(default=1, metadata=engineering())
    """Memory toggle: each minibatch step sums the gradients of this many slices of its steps (activations are held
    for a slice at a time: Pong's minibatches are thousands of frames); the same gradient up to float rounding."""
    hand_derived: bool = field(default=True, metadata=engineering())
    """True runs the accelerator of this loss where it applies (:mod:`suite.accel.grpo`: the policy MLP's forward and
    backward by hand, the loss's derivatives in numpy); False, the specification by autograd, which image
    observations (the Nature CNN) always take. The two agree up to float rounding (the parity harness checks it)."""

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError(
                f"group_size must be >= 2 (the group std of a single episode is undefined), got {self.group_size}"
            )
        for name in ("n_groups", "n_epochs", "n_minibatches"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.n_minibatches > self.group_size * self.n_groups:
            raise ValueError("n_minibatches cannot exceed the episodes per update (group_size * n_groups)")
        for name in ("ref_update_interval", "max_resample_rounds", "max_episode_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.eps_low < 1 or self.eps_high < 0:
            raise ValueError("eps_low must be in [0, 1) and eps_high >= 0")
        if self.beta < 0 or self.ent_coef < 0:
            raise ValueError("beta and ent_coef must be >= 0")
        if self.activation not in ("tanh", "relu"):
            raise ValueError("activation must be tanh or relu")
        if self.rollout_storage not in ROLLOUT_STORAGES:
            raise ValueError(f"rollout_storage must be one of {', '.join(ROLLOUT_STORAGES)}")
        if self.grad_accumulation < 1:
            raise ValueError(f"grad_accumulation must be >= 1, got {self.grad_accumulation}")

    @property
    def reward_scaling(self) -> str:
        """The resolved ``scale_rewards``: ``group``, ``batch`` or ``none``."""
        if self.scale_rewards == "auto":
            return "none" if self.loss_agg == "dr_grpo" else "group"
        return self.scale_rewards

    @property
    def batch_episodes(self) -> int:
        """Episodes per update (G * K)."""
        return self.group_size * self.n_groups


def grpo_policy(observation_space: Any, action_space: Any, cfg: GRPOConfig) -> ActorCritic:
    """The critic-free policy for a config (also the registry's ``policy_factory`` for saved policies)."""
    return ActorCritic(observation_space, action_space, net_config(cfg, n_value_heads=0))


# -- advantages -------------------------------------------------------------------------------------------
def _std(x: np.ndarray, axis: Any = None) -> np.ndarray:
    # Sample std (ddof=1), as torch.std in TRL's GRPOTrainer; the paper does not say which.
    return np.std(x, axis=axis, ddof=1)


def outcome_advantages(returns: np.ndarray, scaling: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Outcome supervision (paper 4.1.2): A_i = (R_i - mean_G R) / (std_G R + 1e-4), one value per episode.

    Args:
        returns: ``(K, G)`` undiscounted episode returns, one row per group.
        scaling: ``group`` (std of the group), ``batch`` (std of all K*G returns) or ``none``.

    Returns:
        ``(advantages (K, G), zero_spread (K,) bool, group_std (K,))``; a zero-spread group (all returns equal)
        has advantage 0 for every episode.
    """
    returns = np.asarray(returns, dtype=np.float64)
    centred = returns - returns.mean(1, keepdims=True)
    group_std = _std(returns, axis=1)
    zero = np.ptp(returns, axis=1) == 0
    if scaling == "group":
        adv = centred / (group_std[:, None] + ADV_EPS)
    elif scaling == "batch":
        adv = centred / (_std(returns) + ADV_EPS)
    elif scaling == "none":
        adv = centred
    else:
        raise ValueError(f"unknown reward scaling {scaling!r}")
    adv[zero] = 0.0
    return adv, zero, group_std


def process_advantages(
    rewards: np.ndarray, mask: np.ndarray, group_size: int, scaling: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Process supervision (paper 4.1.3): r~ = (r - mean) / (std + 1e-4) over all step rewards of the group,
    A_t = sum_{t' >= t} r~_{t'} within the episode.

    Args:
        rewards: ``(T, K * G)`` per-step rewards, episode n in group n // G.
        mask: ``(T, K * G)`` bool, True on real steps (a prefix of each column).
        group_size: G.
        scaling: ``group``, ``batch`` (std of every step reward of the batch) or ``none``.

    Returns:
        ``(advantages (T, K * G) float64 (0 on padding), zero_spread (K,) bool, group_std (K,))``.
    """
    T, N = rewards.shape
    K = N // group_size
    r = np.asarray(rewards, dtype=np.float64)
    norm = np.zeros((T, N))
    zero = np.zeros(K, dtype=bool)
    group_std = np.zeros(K)
    batch_std = _std(r[mask]) if scaling == "batch" else 0.0
    for k in range(K):
        cols = slice(k * group_size, (k + 1) * group_size)
        m = mask[:, cols]
        vals = r[:, cols][m]
        group_std[k] = _std(vals) if vals.size > 1 else 0.0
        zero[k] = np.ptp(vals) == 0
        centred = np.where(m, r[:, cols] - vals.mean(), 0.0)
        if zero[k]:
            continue
        if scaling == "group":
            centred /= group_std[k] + ADV_EPS
        elif scaling == "batch":
            centred /= batch_std + ADV_EPS
        elif scaling != "none":
            raise ValueError(f"unknown reward scaling {scaling!r}")
        norm[:, cols] = centred
    adv = np.flip(np.cumsum(np.flip(norm, 0), 0), 0)  # rewards-to-go; padding (after the end) adds zeros
    return np.where(mask, adv, 0.0), zero, group_std


def batch_advantages(batch: EpisodeGroups, supervision: str, scaling: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-step advantages of a batch by :func:`outcome_advantages` or :func:`process_advantages`.

    Returns:
        ``(advantages (T, N) float32, 0 on padding; zero_spread (K,) bool; group_std (K,))``.
    """
    if supervision == "outcome":
        adv, zero, std = outcome_advantages(batch.returns.reshape(-1, batch.group_size), scaling)
        per_step = np.where(batch.mask, adv.reshape(1, -1), 0.0)
    elif supervision == "process":
        per_step, zero, std = process_advantages(batch.rewards, batch.mask, batch.group_size, scaling)
    else:
        raise ValueError(f"unknown supervision {supervision!r}")
    return per_step.astype(np.float32), zero, std


# -- loss -------------------------------------------------------------------------------------------------
def episode_weights(lengths: torch.Tensor, loss_agg: str, max_episode_steps: int) -> torch.Tensor:
    """Weight of every step of each episode so that the loss is ``sum_steps weight * per_step_loss``.

    Args:
        lengths: ``(B,)`` episode lengths of the (mini)batch.
        loss_agg: ``grpo`` 1 / (B * L_i) (mean over episodes of the per-episode mean, DeepSeekMath eq. 3);
            ``dr_grpo`` 1 / (B * max_episode_steps) (Liu et al. 2025: a constant in place of the length);
            ``dapo`` 1 / sum_i L_i (Yu et al. 2025: token-level mean).
        max_episode_steps: The constant of ``dr_grpo``.

    Returns:
        ``(B,)`` float32 weights.
    """
    B = lengths.shape[0]
    L = lengths.to(torch.float32)
    if loss_agg == "grpo":
        return 1.0 / (B * L)
    if loss_agg == "dr_grpo":
        return torch.full_like(L, 1.0 / (B * max_episode_steps))
    if loss_agg == "dapo":
        return torch.full_like(L, 1.0 / float(L.sum()))
    raise ValueError(f"unknown loss_agg {loss_agg!r}")


def k3_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || pi_ref) per step: pi_ref/pi - log(pi_ref/pi) - 1 (DeepSeekMath eq. 4).

    The gradient flows through ``log_probs`` (pi), never detached; it is exactly 0 with zero gradient when
    pi = pi_ref, and >= 0 otherwise.
    """
    log_ratio = ref_log_probs - log_probs
    return torch.exp(log_ratio) - log_ratio - 1.0


def grpo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    beta: float,
    entropy: torch.Tensor | None = None,
    ent_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The GRPO objective (DeepSeekMath eq. 3), negated: per step ``-[min(rho A, clip(rho) A) - beta k3]``.

    Args:
        log_probs: ``(S,)`` log pi(a_t|s_t) of the current policy (with gradient), summed over action dims.
        old_log_probs: ``(S,)`` log pi_old at collection time.
        ref_log_probs: ``(S,)`` log pi_ref of the frozen reference policy.
        advantages: ``(S,)`` per-step advantages.
        weights: ``(S,)`` per-step aggregation weights (:func:`episode_weights` repeated over each episode).
        eps_low: Lower clip (ratio >= 1 - eps_low).
        eps_high: Upper clip (ratio <= 1 + eps_high).
        beta: KL penalty weight.
        entropy: ``(S,)`` policy entropy, for the optional bonus.
        ent_coef: Entropy bonus weight.

    Returns:
        (loss, metrics): ``policy_loss`` (the clipped surrogate part), ``kl_ref`` (plain mean k3),
        ``clip_fraction`` (share of steps whose ratio is outside the clip range).
    """
    ratio = torch.exp(log_probs - old_log_probs)
    surrogate = torch.min(ratio * advantages, torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages)
    kl = k3_kl(log_probs, ref_log_probs)
    policy_loss = -(weights * surrogate).sum()
    loss = policy_loss + beta * (weights * kl).sum()
    metrics: dict[str, torch.Tensor] = {}
    if entropy is not None:
        ent = (weights * entropy).sum() / weights.sum()
        loss = loss - ent_coef * (weights * entropy).sum()
        metrics["entropy"] = ent.detach()
    with torch.no_grad():
        metrics["policy_loss"] = policy_loss.detach()
        metrics["kl_ref"] = kl.mean()
        metrics["clip_fraction"] = ((ratio < 1.0 - eps_low) | (ratio > 1.0 + eps_high)).float().mean()
    return loss, metrics


@dataclass
class GroupSlice:
    """The steps of one gradient slice (a minibatch of whole episodes, or one of its ``grad_accumulation`` slices),
    flattened episode-major. ``S`` steps."""

    obs: torch.Tensor
    """``(S, *obs_shape)`` network inputs."""
    actions: torch.Tensor
    """``(S, *action_shape)``."""
    old_log_probs: np.ndarray
    """``(S,)`` float32 log pi_old at collection time."""
    ref_log_probs: np.ndarray
    """``(S,)`` float32 log pi_ref of the frozen reference policy."""
    advantages: np.ndarray
    """``(S,)`` float32."""
    weights: np.ndarray
    """``(S,)`` float32 aggregation weights (:func:`episode_weights` of the minibatch, repeated over each episode)."""


# -- training ---------------------------------------------------------------------------------------------
class GRPOTrainer(Trainer):
    """Collect K groups of G episodes, compute group-relative advantages, take clipped steps with a KL penalty."""

    cfg: GRPOConfig

    def __init__(self, ctx: TrialContext, cfg: GRPOConfig):
        super().__init__(ctx, cfg)
        max_len, cap = episode_cap(ctx, cfg.max_episode_steps)
        envs = ctx.make_envs(cfg.batch_episodes, vectorization=cfg.vectorization, max_episode_steps=cap)
        self.policy = grpo_policy(envs.single_observation_space, envs.single_action_space, cfg)
        if self.off_cpu:
            self.policy.to_device(self.device)
        self.reference = copy.deepcopy(self.policy).requires_grad_(False)
        self.stepper = GradientStepper(list(self.policy.parameters()), cfg.learning_rate, cfg.max_grad_norm, cfg.adam_eps)
        self.kernel = kernel_for(self.policy, self.stepper.flat)  # hand-derived inference (and the accelerator's passes)
        self.collector = EpisodeGroupCollector(
            ctx, envs, self.policy, cfg.group_size, max_len, cap, kernel=self.kernel, storage=cfg.rollout_storage
        )
        self.use_specification(type(self).loss)
        self.collector.clock = self.clock

    def prepare(self) -> tuple[EpisodeGroups, tuple[np.ndarray, np.ndarray, np.ndarray], dict[str, float]] | None:
        """K complete groups (stops at the budget; None when no group finished within it), their advantages and the
        collection's metrics."""
        ctx = self.ctx
        with ctx.phase("rollout"):
            batch, collect_metrics = self.collect()
        if batch is None:
            return None
        with ctx.phase("advantages"):
            advantages = batch_advantages(batch, self.cfg.supervision, self.cfg.reward_scaling)
        return batch, advantages, collect_metrics

    def optimise(self, prepared: Any, progress: float) -> dict[str, float]:
        batch, advantages, collect_metrics = prepared
        metrics = self.update(batch, advantages, progress=progress)
        metrics.update(collect_metrics)
        return metrics

    def _collect_complete(self) -> tuple[EpisodeGroups | None, int, int]:
        """One collection within the budget: (its complete groups or None, env steps executed, steps used)."""
        raw = self.collector.collect(self.ctx.remaining_steps)
        used = int(raw.mask.sum())
        return raw.complete_groups(), raw.env_steps, used

    def collect(self) -> tuple[EpisodeGroups | None, dict[str, float]]:
        """One batch of K groups; under ``dapo``, zero-spread groups are replaced from extra batches (DAPO's
        dynamic sampling, Yu et al. 2025 Algorithm 1), at most ``max_resample_rounds`` of them. When the budget
        runs out, the batch holds only the groups completed within it (None: no group completed).

        Returns:
            (batch, metrics): ``resampled_groups`` (groups drawn to replace zero-spread ones) and
            ``padding_frac`` (share of executed sub-env steps that were masked out, all rounds together).
        """
        cfg = self.cfg
        batch, env_steps, used = self._collect_complete()
        if batch is None:
            return None, {}
        kept: list[EpisodeGroups] = []
        n_kept, resampled, rounds = 0, 0, 0
        while cfg.loss_agg == "dapo":
            zero = self.zero_spread(batch)
            if rounds == 0 and not zero.any():
                break  # nothing to replace: train on the batch as collected
            good = np.flatnonzero(~zero)[: cfg.n_groups - n_kept]
            if good.size:
                kept.append(batch.select_groups(good))
                n_kept += good.size
            if n_kept == cfg.n_groups:
                break
            if rounds == cfg.max_resample_rounds or self.ctx.remaining_steps == 0:
                # cap (or budget) reached: top up with zero-spread groups (advantage 0), up to K groups
                kept.append(batch.select_groups(np.flatnonzero(zero)[: cfg.n_groups - n_kept]))
                break
            rounds += 1
            resampled += cfg.n_groups - n_kept
            nxt, more_env_steps, more_used = self._collect_complete()
            env_steps += more_env_steps
            used += more_used
            if nxt is None:
                kept.append(batch.select_groups(np.flatnonzero(zero)[: cfg.n_groups - n_kept]))
                break
            batch = nxt
        if kept:
            batch = EpisodeGroups.concat(kept)
        metrics = {"resampled_groups": float(resampled), "padding_frac": 1.0 - used / env_steps}
        return batch, metrics

    def zero_spread(self, batch: EpisodeGroups) -> np.ndarray:
        """``(K,)`` True for groups whose rewards do not vary (their advantages are all 0)."""
        return batch_advantages(batch, self.cfg.supervision, self.cfg.reward_scaling)[1]

    def loss(self, s: GroupSlice) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The specification: :func:`grpo_loss` of a slice's steps under the current policy (weighted by the minibatch's
        aggregation weights, so the slices' losses sum to the minibatch's)."""
        cfg, device = self.cfg, self.device
        logp, entropy, _, _ = self.policy.evaluate_actions(s.obs.to(device), s.actions.to(device))
        old, ref, adv, weights = (torch.from_numpy(a).to(device) for a in (s.old_log_probs, s.ref_log_probs,
                                                                           s.advantages, s.weights))  # fmt: skip
        return grpo_loss(
            logp,
            old,
            ref,
            adv,
            weights,
            eps_low=cfg.eps_low,
            eps_high=cfg.eps_high,
            beta=cfg.beta,
            entropy=entropy,
            ent_coef=cfg.ent_coef,
        )

    def spec_forward(self, s: GroupSlice) -> Evaluated:
        loss, metrics = self.loss(s)

        def backward(accumulate: bool) -> None:
            if not accumulate:
                self.stepper.zero_grad()
            self.stepper.backward(loss)

        return Evaluated(loss, metrics, backward)

    @in_kernel_mode(lambda self: self.accelerator is not None)
    def update(
        self, batch: EpisodeGroups, advantages: tuple[np.ndarray, np.ndarray, np.ndarray], progress: float
    ) -> dict[str, float]:
        """Clipped steps with the KL penalty on ``batch``; ``advantages`` = :func:`batch_advantages` of it."""
        cfg, policy = self.cfg, self.policy
        if cfg.ref_update_interval and self.n_updates % cfg.ref_update_interval == 0 and self.n_updates > 0:
            self.reference.load_state_dict(policy.state_dict())
        adv, zero, group_std = advantages
        # flatten the real steps episode-major: steps of episode 0, then episode 1, ...
        n_idx, t_idx = np.nonzero(batch.mask.T)
        t_flat, n_flat = torch.from_numpy(t_idx), torch.from_numpy(n_idx)
        lengths = torch.from_numpy(batch.lengths)
        offsets = torch.cumsum(lengths, 0) - lengths
        actions = batch.actions[t_flat, n_flat]
        old_logp = torch.from_numpy(batch.log_probs[t_idx, n_idx])
        t_adv = torch.from_numpy(adv[t_idx, n_idx])
        ref_logp = torch.empty_like(old_logp)
        chunk = REF_CHUNK_IMAGES if policy.image else REF_CHUNK
        with torch.no_grad():
            for s in range(0, len(t_idx), chunk):
                sl = slice(s, s + chunk)
                obs, acts = batch.obs[t_flat[sl], n_flat[sl]], actions[sl]
                if self.off_cpu:
                    obs, acts = obs.to(self.device), acts.to(self.device)
                params = self.reference.policy_params(obs)
                ref_logp[sl] = self.reference.head.log_prob(params, self.reference.log_std, acts)
        old_np, ref_np, adv_np = old_logp.numpy(), ref_logp.numpy(), t_adv.numpy()
        lr = self.stepper.begin_update(progress)
        forward = self.accelerator.forward if self.accelerator is not None else self.spec_forward
        clock = self.clock
        N = batch.lengths.shape[0]
        sums: dict[str, float] = {}
        count = 0
        for _epoch in range(cfg.n_epochs):
            for eps in torch.tensor_split(torch.randperm(N), cfg.n_minibatches):
                L = lengths[eps]
                sel = torch.cat([torch.arange(int(o), int(o) + int(n)) for o, n in zip(offsets[eps], L, strict=True)])
                weights = torch.repeat_interleave(episode_weights(L, cfg.loss_agg, self.collector.max_len), L)
                w_np = weights.numpy()
                S = int(sel.shape[0])
                self.stepper.zero_grad()
                # grad_accumulation: the minibatch's steps in k slices; the aggregation weights are the minibatch's,
                # so the slices' losses sum to its loss and their gradients to its gradient
                parts = [(0, S)] if cfg.grad_accumulation == 1 else micro_batches(S, cfg.grad_accumulation)
                w_total = float(weights.sum())
                m: dict[str, float] = {}
                for i, (lo, hi) in enumerate(parts):
                    ps = sel[lo:hi]
                    at = ps.numpy()
                    obs = batch.obs[t_flat[ps], n_flat[ps]]
                    evaluated = forward(GroupSlice(obs, actions[ps], old_np[at], ref_np[at], adv_np[at], w_np[lo:hi]))
                    clock.lap("forward", hi - lo)
                    evaluated.backward(i > 0)
                    clock.lap("backward")
                    part_m = {key: float(v) for key, v in evaluated.metrics.items()}
                    # policy_loss is a weighted sum (adds up), entropy a weighted mean, kl_ref / clip_fraction means
                    shares = {"policy_loss": 1.0, "entropy": float(weights[lo:hi].sum()) / w_total}
                    for key, part_v in part_m.items():
                        m[key] = m.get(key, 0.0) + part_v * shares.get(key, (hi - lo) / S)
                self.stepper.apply()
                clock.lap("optimizer")
                for key, value in m.items():
                    sums[key] = sums.get(key, 0.0) + value
                count += 1
        self.stepper.check_finite()
        self.n_updates += 1
        out = {k: v / count for k, v in sums.items()}
        out.update(self.stepper.end_update())
        returns = batch.returns
        out.update(
            learning_rate=lr,
            zero_spread_frac=float(zero.mean()),
            mean_group_std=float(group_std.mean()),
            ep_return_mean=float(returns.mean()),
            ep_length_mean=float(batch.lengths.mean()),
            truncated_frac=float(batch.truncated.mean()),
        )
        return out


@register(
    "grpo",
    version="1.3.0",
    summary="Group Relative Policy Optimization: G same-seed episodes per group, group-normalised returns, no critic",
    reference=(
        "Shao et al. 2024, arXiv 2402.03300 (DeepSeekMath); episodic adaptation as in stable-baselines3-contrib issue 301"
    ),
    action_spaces=("discrete", "box"),
    observations=("vector", "image"),
    config=GRPOConfig,
    hyperparams="grpo.toml",
    notes=(
        "DeepSeekMath's GRPO, not the algorithms some blog posts call 'GRPO' (see grpo-pairwise, ppo-rlvr-prm). "
        "Variants: loss_agg=dr_grpo (Liu et al. 2025, arXiv 2503.20783), loss_agg=dapo (Yu et al. 2025, "
        "arXiv 2503.14476; set eps_high=0.28 for its clip-higher). ctx.steps counts the transitions of the "
        "training episodes only (not the masked steps of sub-envs waiting for the rest of their batch)."
    ),
    policy_factory=grpo_policy,
)
def train_grpo(ctx: Any, cfg: GRPOConfig) -> Any:
    return GRPOTrainer(ctx, cfg).train()
