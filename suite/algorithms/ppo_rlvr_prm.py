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

The update takes the JS term's and the penalty's derivatives by hand in the shared core (``hand_derived = true``, the
default since version 1.3.0; equal to autograd's double backward up to float rounding; 1.5-1.75x faster trials on
CartPole and LunarLander, ``benchmarks/bench_rlvr_hand_derived.py``; with ``smooth_probes > 0``, Hutchinson's estimate,
since 2026-12-02: TextMatch-v0); ``hand_derived = false`` is the autograd path (versions up to 1.2.0), and image
observations always use it (the penalty is off there). Version 1.4.0 (2026-12-04) runs the penalty's passes in
another layout and orientation (:func:`~suite.algorithms.fused.jacobian_penalty`): the same maths with other float
rounding, 707 -> ~430 us per 256-sample CartPole step, so results move by rounding and 1.3.0's records are not reused.
Version 1.5.0 (2026-12-05): the penalty's part through the activation derivatives is carried by the network's own
backward (one backprop instead of two), its narrow forward product runs zero-padded (fast on both CPUs measured), and a
policy with no hidden layer gets its penalty right (1.4.0 failed on it, or with probes summed the wrong axis and
dropped the gradient); other rounding again, so 1.4.0's records are not reused;

(c) the document's settings as defaults: learning rate 5e-4 -> 2e-5 with cosine decay, GAE lambda 0.9
    (its advice: 0.85-0.92, "because RLVR already reduces variance").

The document's score table (CartPole 500.0, LunarLander 315.2, Pong 21.5, Hopper 3789.1) has no seeds,
budgets or protocol, and Pong above 21 is impossible; the suite measures instead of quoting it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from suite.algorithms.actor_critic import (
    ActorCriticConfig,
    ActorCriticTrainer,
    FusedLoss,
    actor_critic_policy,
    ppo_fused_loss,
    ppo_policy_value_loss,
)
from suite.algorithms.core import Minibatch, Rollout, compute_gae
from suite.algorithms.fused import JacobianPenaltyGrad, fast_mean, jacobian_penalty
from suite.algorithms.networks import ActorCritic, CategoricalHead, GaussianHead
from suite.config import Schedule, identity_unless_default
from suite.registry import register

LOG_2 = math.log(2.0)


@dataclass(frozen=True)
class RlvrPrmConfig(ActorCriticConfig):
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
    hand_derived: bool = field(default=True, metadata=identity_unless_default(but_when="smooth_probes"))
    """True: the update's derivatives by hand in the shared core (PPO's loss, the JS term, and the input-gradient
    penalty's second derivatives, exact or Hutchinson's: :func:`suite.algorithms.fused.jacobian_penalty`), equal to the
    autograd path up to float rounding (tested); False: autograd with a double backward (the only path up to version
    1.2.0). Needs an MLP policy (vector observations); otherwise autograd is used. Part of a trial's key when false,
    and when ``smooth_probes > 0``: with probes the hand-derived path is new (2026-12-02; autograd before, at the same
    version 1.3.0), so those records (TextMatch-v0's defaults) are made again while every exact-penalty config keeps
    its key and records (its arithmetic did not change)."""

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


def policy_jacobian_penalty(cfg: RlvrPrmConfig, kernel: Any, coef: float) -> tuple[np.ndarray, JacobianPenaltyGrad]:
    """:func:`jacobian_penalty` of the policy network as the kernel's last evaluate left it (``coef``: the factor on
    the sum over samples), its Hutchinson probes (``cfg.smooth_probes``) drawn as :func:`input_gradient_penalty`
    draws them: same stream, same order."""
    acts, layers = kernel.policy_network()
    probes = None
    if cfg.smooth_probes:
        B, P = acts[0].shape[0], layers[-1][0].shape[0]
        probes = torch.stack([torch.randn(B, P) for _ in range(cfg.smooth_probes)])
    return jacobian_penalty(acts, layers, kernel.tanh, coef, probes)


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
        """pi_old's raw policy outputs ``(n, P)`` (``old_params``; with the hand-derived loss of a categorical head
        also their log-probabilities, ``old_logq``): called before the first step, so the policy is still pi_old.
        Computed in chunks, so image rollouts are never converted to float all at once."""
        out = torch.empty(rollout.n_samples, self.policy.head.n_params)
        for sl, obs in rollout.obs_all():
            out[sl] = self.policy.policy_params(obs)
        extra = {"old_params": out}
        if self.fused and isinstance(self.policy.head, CategoricalHead):
            # pi_old's log-probabilities for the hand-derived JS, once per update rather than once per minibatch
            # (n_epochs times): the same rows (categorical_log_probs), ~100 us less per step at 128 x 26
            extra["old_logq"] = torch.from_numpy(categorical_log_probs(out.numpy()))
        return extra

    def supports_fused_loss(self) -> bool:
        return self.cfg.hand_derived

    def update_draws_random(self) -> bool:
        # Hutchinson's probes and the Gaussian heads' Monte Carlo JS draw in the loss; the exact penalty and the
        # categorical JS draw nothing
        return self.cfg.smooth_probes > 0 or not self.policy.discrete

    def fused_loss(self, mb: Minibatch, logp: np.ndarray, entropy: np.ndarray, values: np.ndarray | None) -> FusedLoss:
        """:meth:`loss` with its derivatives by hand: PPO's part from :func:`ppo_fused_loss`, the JS term's derivative
        w.r.t. the policy's outputs (and log std), the smoothness penalty's gradient from :func:`jacobian_penalty`."""
        cfg, kernel = self.cfg, self.kernel
        assert kernel is not None
        fl = ppo_fused_loss(cfg, mb, logp, entropy, values, self.clip)
        B, w = logp.shape[0], mb.weight
        old = mb.extra["old_params"].numpy()
        state = self.fused_state
        if kernel.gaussian:
            assert state.mu is not None
            js, dmu, dls = js_gaussian_mc_grad(
                state.mu, self.policy.log_std.detach().numpy(), old, self.old_log_std.numpy(), cfg.js_samples
            )
            fl.dlog_std_extra = dls * np.float32(cfg.js_coef * w / B)
        else:
            assert state.p is not None and state.logp_all is not None
            logq = mb.extra.get("old_logq")
            js, dmu = js_categorical_grad(
                state.p, state.logp_all, categorical_log_probs(old) if logq is None else logq.numpy()
            )
        fl.dparams_extra = dmu * np.float32(cfg.js_coef * w / B)
        js_mean = float(fast_mean(js))
        smooth = 0.0
        if cfg.smooth_coef > 0:
            per_sample, grad = policy_jacobian_penalty(cfg, kernel, cfg.smooth_coef * w / B)
            fl.before_backward = grad.before_backward
            smooth = float(fast_mean(per_sample))
        fl.loss += (cfg.js_coef * js_mean + cfg.smooth_coef * smooth) * w
        fl.metrics.update(js=js_mean, smooth_penalty=smooth)
        return fl

    def network_extra(self) -> tuple[str, Callable[[], list[torch.Tensor] | None] | None] | None:
        """The smoothness penalty's passes (forward and backward through the policy network's Jacobian, per sample);
        ``run`` where the hand-derived update makes them (autograd's double backward otherwise)."""
        cfg = self.cfg
        if cfg.smooth_coef <= 0 or self.policy.image:
            return None

        def run() -> list[torch.Tensor] | None:
            B = self.kernel.policy_network()[0][0].shape[0]  # type: ignore[union-attr]
            return policy_jacobian_penalty(cfg, self.kernel, cfg.smooth_coef / B)[1].before_backward()

        k = cfg.smooth_probes
        what = f"Hutchinson, {k} probe{'s' if k > 1 else ''}" if k else "exact"
        return f"input-gradient penalty ({what})", run if self.fused else None

    def loss(self, mb: Minibatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
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


def categorical_log_probs(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities ``(B, n)`` of categorical logits, ``logits - logaddexp.reduce(logits)`` row by row. A row's
    values depend on that row alone (numpy folds ``logaddexp`` along it in order), so the rows of one call over a
    whole rollout equal those of a call over any minibatch of it, bit for bit (tested)."""
    return logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)


def js_categorical_grad(p: np.ndarray, logp: np.ndarray, logq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`js_categorical` per sample ``(B,)`` and its derivative w.r.t. the current logits ``(B, n)``, from the
    current log-probabilities and pi_old's ``logq`` (:func:`categorical_log_probs` of its logits): with
    ``m = (p + q) / 2``, ``dJS/dp_i = (log p_i - log m_i) / 2``, through the softmax ``p (g - sum p g)``."""
    log_m = np.logaddexp(logp, logq) - np.float32(LOG_2)
    q = np.exp(logq)
    js = 0.5 * (p * (logp - log_m)).sum(-1) + 0.5 * (q * (logq - log_m)).sum(-1)
    g = 0.5 * (logp - log_m)
    return js, p * (g - (p * g).sum(-1, keepdims=True))


def js_gaussian_mc_grad(
    mean: np.ndarray, log_std: np.ndarray, old_mean: np.ndarray, old_log_std: np.ndarray, n_samples: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`js_gaussian_mc` (the same random draws, in the same order) and its derivatives by hand: per sample
    ``(B,)``, w.r.t. the means ``(B, A)`` and w.r.t. the log std ``(A,)`` summed over samples.

    For ``x_p = mu + eps std`` the term ``(log p - log m)(x_p) / 2`` has derivative ``w_q (d log p - d log q) / 2``
    with ``w_q = q / (p + q)`` at ``x_p``, where ``d log p = (0, -1)`` (mean, log std; ``eps`` fixed) and
    ``d log q = -(x_p - mu_q) / std_q^2 (1, eps std)``; the term at ``x_q`` (no gradient through ``x_q``) gives
    ``-w_p (d log p) / 2`` with ``d log p = ((x - mu) / std^2, ((x - mu) / std)^2 - 1)``.
    """
    std, old_std = np.exp(log_std), np.exp(old_log_std)

    def logpdf(x: np.ndarray, mu: np.ndarray, ls: np.ndarray, inv: np.ndarray) -> np.ndarray:
        return (-0.5 * ((x - mu) * inv) ** 2 - ls - np.float32(0.5 * math.log(2 * math.pi))).sum(-1)

    inv, old_inv = np.exp(-log_std), np.exp(-old_log_std)
    total = np.zeros(mean.shape[0], dtype=np.float32)
    dmu = np.zeros_like(mean)
    dls = np.zeros_like(log_std)
    for _ in range(n_samples):
        eps_p = torch.randn(mean.shape).numpy()
        eps_q = torch.randn(old_mean.shape).numpy()
        xp, xq = mean + eps_p * std, old_mean + eps_q * old_std
        lp_p, lq_p = logpdf(xp, mean, log_std, inv), logpdf(xp, old_mean, old_log_std, old_inv)
        lp_q, lq_q = logpdf(xq, mean, log_std, inv), logpdf(xq, old_mean, old_log_std, old_inv)
        lm_p, lm_q = np.logaddexp(lp_p, lq_p), np.logaddexp(lp_q, lq_q)
        total += 0.5 * (lp_p - (lm_p - np.float32(LOG_2))) + 0.5 * (lq_q - (lm_q - np.float32(LOG_2)))
        wq = np.exp(lq_p - lm_p)[:, None]  # q / (p + q) at x_p
        wp = np.exp(lp_q - lm_q)[:, None]  # p / (p + q) at x_q
        rq = (xp - old_mean) * old_inv * old_inv
        rp = (xq - mean) * inv * inv
        dmu += 0.5 * wq * rq - 0.5 * wp * rp
        dls += (0.5 * wq * (rq * eps_p * std - 1.0) - 0.5 * wp * ((xq - mean) * inv) ** 2 + 0.5 * wp).sum(0)
    return total / n_samples, dmu / n_samples, dls / n_samples


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
