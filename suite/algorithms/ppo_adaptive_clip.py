"""``ppo-adaptive-clip``: PPO whose clip range follows the spread of the raw advantages.

Source: 000_2d5fee972b6defb7.txt, which calls it "GRPO" and places it in TRL (``grpo/adaptive.py``); TRL has
no such algorithm (its ``GRPOTrainer`` is DeepSeekMath's GRPO). What the document does describe:

* a clip range ``delta`` recomputed every batch from the standard deviation of the advantages, wider when
  they vary a lot, narrower as training settles. It gives no formula; this module uses

      eps_k = clip(base(progress) * (s_k / s_ref) ** clip_std_exponent, clip_min, clip_max)

  with ``s_k`` the std of the RAW advantages of update ``k`` (taken before any normalisation, which would
  make it 1), ``base`` the ``clip_range`` schedule and ``s_ref`` either ``clip_std_ref`` or, by default, an
  exponential moving average (momentum ``clip_std_momentum``) of the previous updates' ``s`` (the first
  update uses ``s_ref = s_0``, so ``eps_0 = base``). The ratio makes the rule scale-free: an env whose
  returns are 100x larger gets the same clip range for the same *relative* change of spread;
* a decay ``delta_lr = base_lr * 0.9 ** (epoch // 10)`` (its ``adapt_delta_lr``). Read literally, and with its
  hyperparameter ``delta_init``, it is the learning rate *of the clip parameter delta*: delta is a state that
  starts at ``delta_init`` and moves toward the std-dependent target at a rate that decays. That reading is
  ``clip_rule = "tracking"``::

      target_k = clip(base(progress) * (s_k / s_ref) ** clip_std_exponent, clip_min, clip_max)
      delta_{k+1} = delta_k + delta_lr * delta_lr_decay_factor ** (k // delta_lr_decay_every) * (target_k - delta_k)

  with ``k`` the update index ("epoch"), ``delta_0 = base(0)`` and the clip of update k = ``delta_k`` after the
  move. The default ``clip_rule = "ratio"`` uses the target directly (delta_lr = 1, no memory). A claim set says
  which rule a row uses. The earlier reading of the decay as a *policy* learning-rate decay is kept as an option
  (``lr_decay_every = 10``, off by default) for comparison;
* "EnhancedGAE" (an LSTM cell over the trajectory inside GAE): no such published method exists. The honest
  reading, option ``critic = "lstm"``: a recurrent value network run over the rollout's time axis, its
  memory reset at episode boundaries, whose values feed ordinary GAE;
* a Beta policy head for bounded continuous actions (``action_dist = "beta"``, Chou et al. 2017, ICML);
* a value head "with automatic scaling": PopArt (``popart = true``, van Hasselt et al. 2016, arXiv
  1602.07714): value targets normalised by running moments, last critic layer rescaled so outputs are
  preserved when the moments move.

The document's claimed text-generation numbers (CNN/DailyMail, 12k vs 15k steps, reward 2.45 vs 2.31) have
no protocol; the suite measures the algorithm on its own envs instead. The loss is PPO's
(:func:`~suite.algorithms.ppo.ppo_policy_value_loss`) with this update's clip range: :meth:`AdaptiveClipTrainer.loss`.

Longer than one screen: the document's options (two readings of its clip rule, the recurrent critic's pass over the
rollout, PopArt's moments, a learning-rate decay) each need config and update code of their own; the critics' modules
are in :mod:`suite.algorithms.networks`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from suite.algorithms.actor_critic import ActorCriticTrainer
from suite.algorithms.core import Minibatch, Rollout, net_config
from suite.algorithms.networks import ActorCritic, PopArtValue, RecurrentCritic
from suite.algorithms.ppo import PPOConfig, ppo_policy_value_loss
from suite.registry import register


@dataclass(frozen=True)
class AdaptiveClipConfig(PPOConfig):
    """PPO's config (SB3 names; ``clip_range`` is the *base* of the adaptive rule) plus the document's options."""

    clip_std_exponent: float = 0.5
    """``k`` in ``eps = base * (s / s_ref) ** k``; 0 gives plain PPO (up to the clamp)."""
    clip_min: float = 0.05
    """Lower bound of the adaptive clip range (also keeps it above 0 when ``clip_range`` decays to 0)."""
    clip_max: float = 0.4
    """Upper bound of the adaptive clip range."""
    clip_std_ref: float | None = None
    """Fixed reference std ``s_ref``; None = moving average of the previous updates' raw-advantage std."""
    clip_std_momentum: float = 0.9
    """Momentum of that moving average (``s_ref <- m * s_ref + (1 - m) * s`` after each update)."""
    clip_rule: str = "ratio"
    """``ratio``: the clip range is the target ``clip(base * (s / s_ref) ** k, clip_min, clip_max)`` itself;
    ``tracking``: document 000's literal reading, delta follows the target at a decaying rate (module docstring)."""
    delta_lr: float = 0.5
    """``tracking`` only: the rate at which delta moves toward its target (the document gives no value; suite choice)."""
    delta_lr_decay_every: int = 10
    """``tracking`` only: ``delta_lr`` is multiplied by ``delta_lr_decay_factor`` every this many updates (document: 10)."""
    delta_lr_decay_factor: float = 0.9
    """``tracking`` only: the document's 0.9."""
    lr_decay_every: int = 0
    """A step decay of the *policy* learning rate every this many updates (an earlier reading of the document's
    decay, kept for comparison); 0 = off."""
    lr_decay_factor: float = 0.9
    """Factor of each step decay (the document's 0.9)."""
    action_dist: str = "auto"
    """``auto`` (categorical / Gaussian), ``gaussian`` or ``beta`` (boxes; Chou et al. 2017)."""
    popart: bool = False
    """PopArt value normalisation with output-preserving rescaling (van Hasselt et al. 2016)."""
    popart_beta: float = 0.1
    """Step size of PopArt's moving moments, per update (the first update sets them from its batch)."""
    critic: str = "mlp"
    """``mlp`` (PPO's critic) or ``lstm`` (recurrent critic over the rollout's time axis feeding GAE)."""
    lstm_hidden: int = 64
    """Hidden size of the LSTM critic."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.clip_min <= self.clip_max:
            raise ValueError("need 0 < clip_min <= clip_max")
        if self.clip_std_ref is not None and self.clip_std_ref <= 0:
            raise ValueError("clip_std_ref must be > 0 (or None for the moving average)")
        if not 0 <= self.clip_std_momentum < 1 or not 0 < self.popart_beta <= 1:
            raise ValueError("clip_std_momentum must be in [0, 1) and popart_beta in (0, 1]")
        if self.lr_decay_every < 0 or not 0 < self.lr_decay_factor <= 1:
            raise ValueError("lr_decay_every must be >= 0 and lr_decay_factor in (0, 1]")
        if self.action_dist not in ("auto", "gaussian", "beta"):
            raise ValueError("action_dist must be auto, gaussian or beta")
        if self.critic not in ("mlp", "lstm") or self.lstm_hidden < 1:
            raise ValueError("critic must be mlp or lstm, lstm_hidden >= 1")
        if self.clip_rule not in ("ratio", "tracking"):
            raise ValueError("clip_rule must be ratio or tracking")
        if not 0 < self.delta_lr <= 1 or self.delta_lr_decay_every < 1 or not 0 < self.delta_lr_decay_factor <= 1:
            raise ValueError("delta_lr must be in (0, 1], delta_lr_decay_every >= 1, delta_lr_decay_factor in (0, 1]")


def adaptive_clip_range(
    raw_adv_std: float, std_ref: float, base: float, exponent: float, clip_min: float, clip_max: float
) -> float:
    """``clip(base * (raw_adv_std / std_ref) ** exponent, clip_min, clip_max)`` (see the module docstring)."""
    ratio = raw_adv_std / std_ref if std_ref > 0 else 1.0
    return float(min(max(base * ratio**exponent, clip_min), clip_max))


def adaptive_clip_policy(observation_space: Any, action_space: Any, cfg: AdaptiveClipConfig) -> ActorCritic:
    """:class:`ActorCritic` with the configured action head, optionally an LSTM critic and/or PopArt."""
    policy = ActorCritic(observation_space, action_space, net_config(cfg, normalize_obs=cfg.normalize))
    assert policy.vf is not None
    critic: nn.Module = policy.vf
    last: nn.Linear = policy.vf[-1]  # type: ignore[assignment]
    if cfg.critic == "lstm":
        in_features: int = policy.vf[0].in_features  # type: ignore[assignment]
        critic = RecurrentCritic(in_features, cfg.lstm_hidden, last.out_features)
        last = critic.head
    if cfg.popart:
        critic = PopArtValue(critic, last, cfg.popart_beta)
    policy.vf = critic  # type: ignore[assignment]
    return policy


class StepDecay:
    """``learning_rate(progress) * factor ** (n_updates // every)``: the document's ``0.9 ** (epoch // 10)``."""

    def __init__(self, base: Callable[[float], float], trainer: ActorCriticTrainer, every: int, factor: float):
        self.base, self.trainer, self.every, self.factor = base, trainer, every, factor

    def __call__(self, progress: float) -> float:
        return self.base(progress) * self.factor ** (self.trainer.n_updates // self.every)


class AdaptiveClipTrainer(ActorCriticTrainer):
    """PPO with :func:`adaptive_clip_range`; the LSTM critic's rollout pass and PopArt live in the hooks."""

    cfg: AdaptiveClipConfig

    def __init__(self, ctx: Any, cfg: AdaptiveClipConfig):
        super().__init__(ctx, cfg)
        if cfg.lr_decay_every:
            self.stepper.learning_rate = StepDecay(cfg.learning_rate, self, cfg.lr_decay_every, cfg.lr_decay_factor)  # type: ignore[assignment]
        self.std_ref: float | None = cfg.clip_std_ref
        self.delta = cfg.clip_range(0.0)  # tracking rule: delta_0 = delta_init = the base at progress 0
        self.recurrent = self._find(RecurrentCritic)
        self.popart = self._find(PopArtValue)
        n = self.collector.n_envs
        hidden = cfg.lstm_hidden
        self.critic_state = (torch.zeros(n, hidden, device=self.device), torch.zeros(n, hidden, device=self.device))
        self._stored_state: dict[str, torch.Tensor] = {}

    def build_policy(self) -> ActorCritic:
        return adaptive_clip_policy(self.envs.single_observation_space, self.envs.single_action_space, self.cfg)

    def _find(self, kind: type) -> Any:
        return next((m for m in self.policy.modules() if isinstance(m, kind)), None)

    # -- advantages: the recurrent critic's pass over the rollout ----------------------------------------
    @torch.no_grad()
    def recurrent_values(self, rollout: Rollout) -> None:
        """Recompute ``rollout.values (T, N, 1)`` and ``last_values (N, 1)`` with the LSTM critic run along
        time (memory reset after every ``done``), and keep each step's input memory for the minibatches.

        The collector evaluated the critic from a fresh memory (it calls the policy on one step at a time);
        those values only served the time-limit bootstrap, where a fresh memory is an approximation (exact for
        a Markov observation, as in every env of the suite). The memory carried from the previous rollout was
        computed with the previous weights (the usual stale-state compromise).
        """
        rec, policy, device = self.recurrent, self.policy, self.device
        T, N = rollout.rewards.shape
        h, c = self.critic_state
        hs, cs = torch.zeros(T, N, rec.hidden), torch.zeros(T, N, rec.hidden)
        for t in range(T):
            hs[t], cs[t] = h, c
            rec.memory = (h, c)
            rollout.values[t] = policy.values(rollout.obs.at(t).to(device)).cpu().numpy()
            h, c = rec.last_state
            keep = torch.from_numpy(1.0 - rollout.dones[t]).unsqueeze(-1).to(device)
            h, c = h * keep, c * keep
        rec.memory = (h, c)
        rollout.last_values[:] = policy.values(policy.prepare_obs(self.collector.obs).to(device)).cpu().numpy()
        rec.memory = None
        self.critic_state = (h, c)
        self._stored_state = {"h": hs.reshape(T * N, -1), "c": cs.reshape(T * N, -1)}

    def advantages(self, rollout: Rollout) -> tuple[np.ndarray, np.ndarray]:
        if self.recurrent is not None:
            self.recurrent_values(rollout)
        return super().advantages(rollout)

    def minibatch_extra(self, rollout: Rollout) -> dict[str, torch.Tensor]:
        return dict(self._stored_state)

    # -- the adaptive clip range -------------------------------------------------------------------------
    def begin_update(self, rollout: Rollout, advantages: np.ndarray, progress: float) -> dict[str, float]:
        """Set ``self.clip`` from the std of the raw advantages ``(T, N)``; update PopArt's moments."""
        cfg = self.cfg
        std = float(np.std(advantages))
        ref = self.std_ref if self.std_ref is not None else std
        target = adaptive_clip_range(std, ref, cfg.clip_range(progress), cfg.clip_std_exponent, cfg.clip_min, cfg.clip_max)
        metrics = {"adv_std_raw": std, "adv_std_ref": ref, "clip_target": target}
        if cfg.clip_rule == "tracking":
            rate = cfg.delta_lr * cfg.delta_lr_decay_factor ** (self.n_updates // cfg.delta_lr_decay_every)
            self.delta += rate * (target - self.delta)
            self.clip = self.delta
            metrics["delta_lr"] = rate
        else:
            self.clip = target
        metrics["clip_range"] = self.clip
        metrics["clip_at_floor"] = float(self.clip <= cfg.clip_min)
        if cfg.clip_std_ref is None:
            m = cfg.clip_std_momentum
            self.std_ref = std if self.std_ref is None else m * self.std_ref + (1 - m) * std
        if self.popart is not None:
            returns = advantages + rollout.values.mean(-1)  # the value targets (GAE's lambda-returns)
            self.popart.update_stats(torch.from_numpy(returns).reshape(-1).to(self.device))
            metrics.update(popart_mu=float(self.popart.mu[0]), popart_sigma=float(self.popart.sigma[0]))
        return metrics

    @contextlib.contextmanager
    def _critic_memory(self, mb: Minibatch) -> Iterator[None]:
        if self.recurrent is None:
            yield
            return
        self.recurrent.memory = (mb.extra["h"], mb.extra["c"])
        try:
            yield
        finally:
            self.recurrent.memory = None

    def loss(self, mb: Minibatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """PPO's loss (:func:`~suite.algorithms.ppo.ppo_policy_value_loss`) with this update's adaptive clip range."""
        with self._critic_memory(mb):
            loss, metrics, _, _ = ppo_policy_value_loss(self, mb, self.clip)
        return loss, metrics

    def loss_draws_random(self) -> bool:
        return False  # PPO's loss with another clip: nothing drawn


@register(
    "ppo-adaptive-clip",
    version="1.2.0",
    summary="PPO whose clip range scales with the std of the raw advantages (document 000's 'GRPO')",
    reference=(
        "000_2d5fee972b6defb7.txt (described as 'GRPO' in TRL; no such TRL algorithm); PPO: Schulman et al. 2017, "
        "arXiv 1707.06347; Beta policy: Chou et al. 2017 (ICML); PopArt: van Hasselt et al. 2016, arXiv 1602.07714"
    ),
    action_spaces=("discrete", "box"),
    observations=("vector", "image"),
    config=AdaptiveClipConfig,
    hyperparams="ppo-adaptive-clip.toml",
    notes=(
        "Clip range per update: clip(base * (s / s_ref) ** clip_std_exponent, clip_min, clip_max), s = std of the "
        "raw GAE advantages, s_ref = moving average of past s (or clip_std_ref). clip_rule='tracking' is the "
        "document's literal reading: delta follows that target at the rate delta_lr * 0.9 ** (update // 10). "
        "critic='lstm' is the honest reading of its 'EnhancedGAE': a recurrent critic whose values feed ordinary GAE. "
        "Logged per update: clip_range, clip_target, clip_at_floor, adv_std_raw, adv_std_ref (delta_lr with "
        "tracking), and popart_mu/popart_sigma with PopArt."
    ),
    policy_factory=adaptive_clip_policy,
)
def train_ppo_adaptive_clip(ctx: Any, cfg: AdaptiveClipConfig) -> Any:
    return AdaptiveClipTrainer(ctx, cfg).train()
