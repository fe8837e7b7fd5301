"""GRPO's loss with its derivatives by hand: the accelerator of ``grpo`` (CPU, MLP policies).

The specification is :meth:`suite.algorithms.grpo.GRPOTrainer.loss` (:func:`~suite.algorithms.grpo.grpo_loss` by
autograd). Here the policy MLP's forward and backward are the kernel's (:class:`~suite.accel.mlp.PolicyKernel`), and
the clipped surrogate's, the k3 penalty's and the entropy bonus's derivatives per step are numpy arithmetic
(:func:`grpo_loss_derivatives`): no autograd graph. ``docs/accel.md`` has what it saves.
"""

from __future__ import annotations

import math

import numpy as np

from suite.accel import Accelerator, Evaluated, ParityCase, register_accelerator
from suite.algorithms.core import Diverged
from suite.algorithms.grpo import GroupSlice, GRPOTrainer, grpo_loss, k3_kl


def grpo_loss_derivatives(
    log_probs: np.ndarray,
    old_log_probs: np.ndarray,
    ref_log_probs: np.ndarray,
    advantages: np.ndarray,
    weights: np.ndarray,
    entropy: np.ndarray,
    *,
    eps_low: float,
    eps_high: float,
    beta: float,
    ent_coef: float,
) -> tuple[float, np.ndarray, np.ndarray | None, dict[str, float]]:
    """:func:`~suite.algorithms.grpo.grpo_loss` with its derivatives by hand: ``(loss, d loss / d log_probs (S,),
    d loss / d entropy (S,) or None when ``ent_coef`` is 0, metrics)``, the metrics of ``grpo_loss`` as floats
    (``policy_loss`` the weighted sum).

    Per step, with ``rho = exp(log_probs - old_log_probs)``: the surrogate ``min(rho A, clip(rho) A)`` has derivative
    ``rho A`` where the unclipped term is the smaller or ``rho`` is inside the clip range (where both terms are equal
    autograd gives each half of it; outside the range the clipped term's derivative is 0), else 0; the k3 penalty
    ``exp(ref - logp) - (ref - logp) - 1`` has ``1 - exp(ref - logp)``.
    """
    ratio = np.exp(log_probs - old_log_probs)
    lo, hi = 1.0 - eps_low, 1.0 + eps_high
    unclipped = ratio * advantages
    clipped = np.clip(ratio, lo, hi) * advantages
    inside = (ratio >= lo) & (ratio <= hi)
    surrogate = np.minimum(unclipped, clipped)
    log_ref_ratio = ref_log_probs - log_probs
    ref_ratio = np.exp(log_ref_ratio)
    kl = ref_ratio - log_ref_ratio - 1.0
    d_surrogate = np.where((unclipped < clipped) | inside, unclipped, 0.0)
    dlogp = (weights * (beta * (1.0 - ref_ratio) - d_surrogate)).astype(np.float32, copy=False)
    dent = None if ent_coef == 0.0 else (-ent_coef * weights).astype(np.float32, copy=False)
    policy_loss = -float((weights * surrogate).sum())
    loss = policy_loss + beta * float((weights * kl).sum()) - ent_coef * float((weights * entropy).sum())
    if not math.isfinite(loss):
        raise Diverged(f"non-finite loss {loss}")
    metrics = {
        "policy_loss": policy_loss,
        "kl_ref": float(kl.mean()),
        "clip_fraction": float(((ratio < lo) | (ratio > hi)).mean()),
        "entropy": float((weights * entropy).sum() / weights.sum()),
    }
    return loss, dlogp, dent, metrics


class GRPOHandDerived:
    """The accelerated loss of a ``grpo`` trainer."""

    def __init__(self, trainer: GRPOTrainer):
        self.trainer, self.kernel = trainer, trainer.kernel

    def forward(self, s: GroupSlice) -> Evaluated:
        cfg, kernel = self.trainer.cfg, self.kernel
        assert kernel is not None
        logp, entropy, _, state = kernel.evaluate(s.obs, s.actions, need_values=False)
        loss, dlogp, dent, metrics = grpo_loss_derivatives(
            logp, s.old_log_probs, s.ref_log_probs, s.advantages, s.weights, entropy, eps_low=cfg.eps_low,
            eps_high=cfg.eps_high, beta=cfg.beta, ent_coef=cfg.ent_coef,
        )  # fmt: skip
        return Evaluated(loss, metrics, lambda accumulate: kernel.backward(state, dlogp, dent, None, accumulate=accumulate))


def _applies(trainer: GRPOTrainer) -> bool:
    return trainer.kernel is not None and trainer.cfg.hand_derived


register_accelerator(
    Accelerator(
        name="grpo-hand-derived",
        specification=GRPOTrainer.loss,
        algorithms=("grpo",),
        covers=(GRPOTrainer.loss, grpo_loss, k3_kl),
        fingerprint="30d95f0e91756242",
        applies=_applies,
        build=GRPOHandDerived,
        summary="the clipped surrogate's, k3 penalty's and entropy's derivatives per step in numpy, the MLP by hand",
        parity=(
            ParityCase("grpo", "CartPole-v1", {"ent_coef": 0.01, "ref_update_interval": 1}),
            ParityCase("grpo", "TextMatch-v0", {"loss_agg": "dapo", "eps_high": 0.28, "grad_accumulation": 2}),
            ParityCase("grpo", "Hopper-v5", {"max_episode_steps": 40, "loss_agg": "dr_grpo", "n_minibatches": 2}),
        ),
    )
)
