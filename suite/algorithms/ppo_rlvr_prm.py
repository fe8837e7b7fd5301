"""``ppo-rlvr-prm``: the "GRPO = PPO + RLVR + PRM" of 004_f1fcbbd2bdebb4e5.txt, named for what it is.

The document expands its modules' names as "RLVR = Reinforcement Learning with Variance Reduction" and
"PRM = Policy Regularization Module". In the literature those acronyms mean something else: RLVR is
*reinforcement learning with verifiable rewards* (rewards from a programmatic checker, e.g. a maths answer
or unit tests; Lambert et al. 2024, Tulu 3, arXiv 2411.15124) and a PRM is a *process reward model*
(a learned model scoring each intermediate reasoning step; Lightman et al. 2023, arXiv 2305.20050).
This algorithm is neither: it is PPO with

(a) variance-weighted advantages ("RLVR")::

        A_t = sum_k (gamma * lambda)^k * delta_{t+k} / (1 + sigma^2_{t+k})

    ``delta`` the TD error of the ensemble-mean value, ``sigma^2`` the disagreement (population variance)
    of an ensemble of ``n_value_heads`` value heads, every head regressed on the same lambda-return. The
    document writes ``lambda^k`` without gamma, presumably by mistake (with gamma < 1 the sum would not be
    a discounted advantage); the closest published idea is inverse-variance weighting (Mai et al. ICLR
    2022, arXiv 2201.01666). ``sigma^2`` is in return units, so the weighting depends on the reward scale
    (as in the document). Its "multi-timescale advantages" and "mixed exploration policy" come with no
    definition and are not implemented;

(b) a regulariser ("PRM") added to PPO's loss::

        - ent_coef * H(pi) + js_coef * JS(pi || pi_old) + smooth_coef * E ||d mu_theta(s) / d s||^2

    with JS exact for categorical policies and a Monte Carlo estimate for Gaussians, and the smoothness
    term the squared Frobenius norm of the Jacobian of the policy's logits / mean w.r.t. the network's
    (normalised) observation input (input-gradient smoothness, arXiv 2410.11825); skipped (0) for image
    observations, where a double backward through the CNN would cost more than the rest of the update;

The specification is :meth:`RlvrPrmTrainer.loss` (autograd, a double backward for the penalty); on MLP policies the
update runs its accelerator (:mod:`suite.accel.ppo_rlvr_prm`, the same loss with its derivatives by hand) unless
``hand_derived = false``. Image observations take the specification, with the penalty off;

(c) the document's settings as defaults: learning rate 5e-4 -> 2e-5 with cosine decay, GAE lambda 0.9
    (its advice: 0.85-0.92, "because RLVR already reduces variance").

The document's score table (CartPole 500.0, LunarLander 315.2, Pong 21.5, Hopper 3789.1) has no seeds,
budgets or protocol, and Pong above 21 is impossible; the suite measures instead of quoting it.

Longer than one screen: its two modules are each a specification of their own (the ensemble's variance weighting; a
regulariser with an exact and a Monte Carlo JS and an input-gradient penalty by double backward).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from suite.algorithms.actor_critic import ActorCriticTrainer, actor_critic_policy
from suite.algorithms.core import Minibatch, Rollout, compute_gae
from suite.algorithms.networks import ActorCritic, CategoricalHead, GaussianHead
from suite.algorithms.ppo import PPOConfig, ppo_policy_value_loss
from suite.config import Schedule, engineering, identity_unless_default
from suite.registry import register

LOG_2 = math.log(2.0)


@dataclass(frozen=True)
class RlvrPrmConfig(PPOConfig):
    """PPO's config (SB3 names) with the document's defaults and the two modules' coefficients."""

    learning_rate: Schedule = Schedule("cosine", 5e-4, 2e-5)
    """Document 004: 5e-4 -> 2e-5, cosine decay."""
    gae_lambda: float = 0.9
    """Document 004: 0.85-0.92."""
    ent_coef: float = 0.01
    """``alpha``: entropy bonus (document 004's PPO uses 0.01; it gives no value for alpha)."""
    n_value_heads: int = 5
    """Value heads on the critic's trunk; their variance is ``sigma^2`` (>= 2)."""
    variance_weighting: bool = True
    """Module (a): weight each TD error by ``1 / (1 + sigma^2)``; false = ordinary GAE on the heads' mean (for
    ablations that switch each of the document's changes on alone)."""
    js_coef: float = 0.5
    """``beta``: weight of JS(pi || pi_old), pi_old = the policy that collected the rollout (no value given)."""
    smooth_coef: float = 1e-3
    """``gamma_s``: weight of E||d mu / d s||^2 (no value given; 0 turns the term off)."""
    smooth_probes: int = 0
    """0: exact Jacobian norm (one backward per policy output); k > 0: Hutchinson estimate with k probes."""
    js_samples: int = 1
    """Monte Carlo samples per state for the Gaussian JS estimate."""
    hand_derived: bool = field(default=True, metadata=engineering(**identity_unless_default(but_when="smooth_probes")))
    """Engineering: True runs the accelerator of this loss where it applies (:mod:`suite.accel.ppo_rlvr_prm`: PPO's,
    the JS term's and the input-gradient penalty's derivatives by hand, equal to the specification up to float
    rounding); False, the specification by autograd with its double backward. Image observations always take the
    latter. Part of a trial's key when false, and when ``smooth_probes > 0`` (the hand-derived Hutchinson path came
    after records of those configs existed, so they are not reused; ``docs/accel.md``); every other config keeps the
    key it had before the option existed."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_value_heads < 2:
            raise ValueError("n_value_heads must be >= 2 (sigma^2 is the ensemble's variance)")
        if self.js_coef < 0 or self.smooth_coef < 0 or self.smooth_probes < 0 or self.js_samples < 1:
            raise ValueError("js_coef, smooth_coef, smooth_probes must be >= 0 and js_samples >= 1")


# -- (a) variance-weighted advantages ---------------------------------------------------------------------
def variance_weighted_advantages(
    rewards: np.ndarray,
    values: np.ndarray,
    dones: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``A_t = sum_k (gamma lambda)^k delta_{t+k} / (1 + sigma^2_{t+k})`` within each episode.

    Args:
        rewards: ``(T, N)``; dones: ``(T, N)`` 1 where the episode ended at step t.
        values: ``(T, N, H)`` every head's V(s_t); last_values: ``(N, H)`` at the observation after step T-1.

    Returns:
        ``(advantages (T, N), sigma2 (T, N))``; delta uses the heads' mean, sigma2 their population variance.
    """
    sigma2 = values.var(-1)
    adv, _ = compute_gae(
        rewards, values.mean(-1), dones, last_values.mean(-1), gamma, gae_lambda, delta_weights=1.0 / (1.0 + sigma2)
    )
    return adv, sigma2.astype(np.float32)


# -- (b) the regulariser ----------------------------------------------------------------------------------
def js_categorical(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """Exact Jensen-Shannon divergence (nats) between categoricals given as log-probabilities ``(B, n)``."""
    log_m = torch.logsumexp(torch.stack([logp, logq]), 0) - LOG_2
    return 0.5 * (logp.exp() * (logp - log_m)).sum(-1) + 0.5 * (logq.exp() * (logq - log_m)).sum(-1)


def js_gaussian_mc(
    mean: torch.Tensor, log_std: torch.Tensor, old_mean: torch.Tensor, old_log_std: torch.Tensor, n_samples: int
) -> torch.Tensor:
    """Monte Carlo JS between diagonal Gaussians ``p = N(mean, std)`` and ``q = N(old_mean, old_std)``.

    ``JS = 1/2 E_p[log p - log m] + 1/2 E_q[log q - log m]``, ``m = (p + q) / 2``: the plain log-ratio
    estimator, unbiased but slightly negative at times when p ~ q. (The non-negative ``k3 = (r - 1) - log r``
    is not used: ``r = m/p`` has infinite variance under p when q is wider than sqrt(2) p.) Samples of p are
    reparameterised, so the estimate is differentiable in p's parameters. Shapes: means ``(B, A)``, log-stds
    ``(A,)`` or ``(B, A)``. Returns ``(B,)``.
    """

    def logpdf(x: torch.Tensor, mu: torch.Tensor, ls: torch.Tensor) -> torch.Tensor:
        return (-0.5 * ((x - mu) * torch.exp(-ls)).square() - ls - 0.5 * math.log(2 * math.pi)).sum(-1)

    total = mean.new_zeros(mean.shape[0])
    for _ in range(n_samples):
        xp = mean + torch.randn_like(mean) * log_std.exp()
        xq = old_mean + torch.randn_like(old_mean) * old_log_std.exp()
        for x, own in ((xp, "p"), (xq, "q")):
            lp, lq = logpdf(x, mean, log_std), logpdf(x, old_mean, old_log_std)
            log_m = torch.logaddexp(lp, lq) - LOG_2
            total = total + 0.5 * ((lp if own == "p" else lq) - log_m)
    return total / n_samples


def input_gradient_penalty(outputs: torch.Tensor, inputs: torch.Tensor, probes: int = 0) -> torch.Tensor:
    """``||d outputs / d inputs||_F^2`` per sample, differentiable (double backward).

    Args:
        outputs: ``(B, P)`` policy logits or means, computed from ``inputs`` ``(B, F)`` (requires grad).
        probes: 0 = exact (one backward per output column); k > 0 = Hutchinson, ``mean_k ||J^T v_k||^2`` with
            ``v_k ~ N(0, I)``, unbiased for ``||J||_F^2``.

    Returns:
        ``(B,)``.
    """
    if probes:
        rows = [torch.randn_like(outputs) for _ in range(probes)]
    else:
        rows = [F.one_hot(torch.tensor(j), outputs.shape[-1]).to(outputs) for j in range(outputs.shape[-1])]
    total = outputs.new_zeros(outputs.shape[0])
    for v in rows:
        (g,) = torch.autograd.grad((outputs * v).sum(), inputs, create_graph=True)
        total = total + g.reshape(g.shape[0], -1).square().sum(-1)
    return total / (probes or 1)


def prm_js(
    policy: ActorCritic, params: torch.Tensor, old_params: torch.Tensor, old_log_std: torch.Tensor, n_samples: int
) -> torch.Tensor:
    """JS(pi || pi_old) per sample ``(B,)``: exact for categorical heads, Monte Carlo for Gaussian heads.

    Args:
        params: ``(B, P)`` current logits / means; old_params: pi_old's, no grad; old_log_std: ``(P,)`` pi_old's.
    """
    head = policy.head
    if isinstance(head, CategoricalHead):
        return js_categorical(head.log_probs_all(params), head.log_probs_all(old_params))
    if isinstance(head, GaussianHead):
        return js_gaussian_mc(params, policy.log_std, old_params, old_log_std, n_samples)
    raise ValueError(f"ppo-rlvr-prm has no JS for {type(head).__name__}")


class RlvrPrmTrainer(ActorCriticTrainer):
    """PPO's loop; its own: the advantages (a), the regulariser (b) and pi_old's parameters per sample."""

    cfg: RlvrPrmConfig

    def advantages(self, rollout: Rollout) -> tuple[np.ndarray, np.ndarray]:
        """Variance-weighted advantages for the policy; ordinary lambda-returns as every head's target."""
        cfg = self.cfg
        weighted, self.sigma2 = variance_weighted_advantages(
            rollout.rewards, rollout.values, rollout.dones, rollout.last_values, cfg.gamma, cfg.gae_lambda
        )
        adv, returns = super().advantages(rollout)
        return (weighted if cfg.variance_weighting else adv), returns

    def begin_update(self, rollout: Rollout, advantages: np.ndarray, progress: float) -> dict[str, float]:
        metrics = super().begin_update(rollout, advantages, progress)
        self.old_log_std = self.policy.log_std.detach().clone()  # pi_old's (state-independent) Gaussian std
        metrics["sigma2_mean"] = float(self.sigma2.mean())
        metrics["sigma2_max"] = float(self.sigma2.max())
        return metrics

    @torch.no_grad()
    def minibatch_extra(self, rollout: Rollout) -> dict[str, torch.Tensor]:
        """pi_old's raw policy outputs ``(n, P)`` (``old_params``): called before the first step, so the policy is still
        pi_old. Computed in chunks, so image rollouts are never converted to float all at once."""
        out = torch.empty(rollout.n_samples, self.policy.head.n_params)
        for sl, obs in rollout.obs_all():
            out[sl] = self.policy.policy_params(obs.to(self.device) if self.off_cpu else obs)
        return {"old_params": out}

    def loss_network_passes(self) -> str | None:
        """The network passes the loss makes beyond the network's forward and backward (``suite profile speed`` names
        them): the smoothness penalty's, through the policy network's Jacobian. None without it."""
        cfg = self.cfg
        if cfg.smooth_coef <= 0 or self.policy.image:
            return None
        k = cfg.smooth_probes
        return f"input-gradient penalty ({f'Hutchinson, {k} probe' + ('s' if k > 1 else '') if k else 'exact'})"

    def loss_draws_random(self) -> bool:
        # Hutchinson's probes and the Gaussian heads' Monte Carlo JS draw in the loss; the exact penalty and the
        # categorical JS draw nothing
        return self.cfg.smooth_probes > 0 or not self.policy.discrete

    def loss(self, mb: Minibatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """PPO's loss + ``js_coef * JS(pi || pi_old) + smooth_coef * E||d mu / d s||^2`` (the document's regulariser;
        its entropy term is PPO's bonus)."""
        cfg, policy = self.cfg, self.policy
        smooth_on = cfg.smooth_coef > 0 and not policy.image
        if smooth_on:
            mb.obs = mb.obs.detach().requires_grad_(True)
        loss, metrics, _, params = ppo_policy_value_loss(self, mb, self.clip)
        js = prm_js(policy, params, mb.extra["old_params"], self.old_log_std, cfg.js_samples).mean()
        smooth = input_gradient_penalty(params, mb.obs, cfg.smooth_probes).mean() if smooth_on else params.new_zeros(())
        loss = loss + (cfg.js_coef * js + cfg.smooth_coef * smooth) * mb.weight
        metrics.update(js=js.detach(), smooth_penalty=smooth.detach())
        return loss, metrics


@register(
    "ppo-rlvr-prm",
    version="1.5.0",
    summary="PPO + variance-weighted advantages (value ensemble) + entropy/JS/smoothness regulariser (document 004)",
    reference=(
        "004_f1fcbbd2bdebb4e5.txt ('GRPO = PPO + RLVR + PRM'); PPO: Schulman et al. 2017, arXiv 1707.06347; "
        "inverse-variance weighting: Mai et al. 2022, arXiv 2201.01666; input-gradient smoothness: arXiv 2410.11825"
    ),
    action_spaces=("discrete", "box"),
    observations=("vector", "image"),
    config=RlvrPrmConfig,
    hyperparams="ppo-rlvr-prm.toml",
    aliases=("grpo-rlvr-prm", "rlvr-prm"),
    notes=(
        "Document 004 calls this GRPO and names its parts RLVR ('RL with Variance Reduction') and PRM ('Policy "
        "Regularization Module'). Usually RLVR means reinforcement learning with verifiable rewards (rewards from a "
        "programmatic checker) and PRM a process reward model (a learned per-step scorer of reasoning); this algorithm "
        "is neither. A_t = sum_k (gamma*lambda)^k delta_{t+k} / (1 + sigma^2_{t+k}) with sigma^2 the variance of "
        "n_value_heads value heads (the document drops gamma from the exponent, presumably by mistake); loss = PPO "
        "- ent_coef*H + js_coef*JS(pi||pi_old) + smooth_coef*E||d mu/ds||^2 (0 on image observations). Defaults: "
        "cosine lr 5e-4 -> 2e-5, gae_lambda 0.9. Logged: js, smooth_penalty, sigma2_mean, sigma2_max."
    ),
    policy_factory=actor_critic_policy,
)
def train_ppo_rlvr_prm(ctx: Any, cfg: RlvrPrmConfig) -> Any:
    return RlvrPrmTrainer(ctx, cfg).train()
