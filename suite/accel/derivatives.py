"""Losses evaluated for the policy kernel's hand-derived backward: per-sample derivatives, and PPO's.

A loss accelerator on an MLP policy (:mod:`suite.accel.ppo`, :mod:`suite.accel.ppo_rlvr_prm`, a plugin's) evaluates
the policy with :meth:`~suite.accel.mlp.PolicyKernel.evaluate`, computes its loss and the loss's derivatives w.r.t. each
sample's log-probability, entropy and values in numpy (:class:`LossDerivatives`; PPO's: :func:`ppo_loss_derivatives`),
and returns :func:`kernel_evaluated`, whose backward is the kernel's. Like the kernels, this module imports no
algorithm, so every accelerator can build on it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from suite.accel import Evaluated
from suite.accel.mlp import HeadState, PolicyKernel
from suite.accel.reductions import fast_clip, fast_mean

if TYPE_CHECKING:
    from suite.algorithms.core import Minibatch


@dataclass
class LossDerivatives:
    """A loss evaluated for the kernel's hand-derived backward: its value, metrics and per-sample derivatives."""

    loss: float
    """This (micro-)batch's share of the minibatch loss."""
    metrics: dict[str, float]
    dlogp: np.ndarray
    """``(B,)`` d loss / d log pi(a|s)."""
    dentropy: np.ndarray | float | None
    """``(B,)``, one value for every sample, or None (no entropy term)."""
    dvalues: np.ndarray | None
    """``(B, H)`` d loss / d V, or None (no value term)."""
    dparams_extra: np.ndarray | None = None
    """``(B, P)`` d loss / d policy params (logits or means) from terms beyond log pi(a|s) and the entropy."""
    dlog_std_extra: np.ndarray | None = None
    """``(A,)`` d loss / d log std from such terms (Gaussian heads)."""
    before_backward: Callable[[], list[torch.Tensor] | None] | None = None
    """For terms that are not functions of the policy's outputs alone (an input-gradient penalty): called before the
    kernel's backward, it adds their direct gradient to the parameters' gradients and returns their extra ``dL/dz`` per
    hidden layer of the policy network (or None); the kernel's backward then adds those and accumulates
    (:class:`~suite.accel.jacobian.JacobianPenaltyGrad`)."""


def kernel_evaluated(kernel: PolicyKernel, state: HeadState, d: LossDerivatives) -> Evaluated:
    """The :class:`~suite.accel.Evaluated` of a loss whose derivatives ``d`` are w.r.t. the kernel's last
    :meth:`~suite.accel.mlp.PolicyKernel.evaluate` (``state``); its backward is the kernel's.

    Raises:
        Diverged: the loss is not finite.
    """
    if not math.isfinite(d.loss):
        from suite.algorithms.core import Diverged  # here: this module imports no algorithm (suite.accel's docstring)

        raise Diverged(f"non-finite loss {d.loss}")

    def backward(accumulate: bool) -> None:
        pre, extra_dz = d.before_backward, None
        if pre is not None:
            extra_dz = pre()  # writes into the gradients: the kernel's backward then accumulates
        kernel.backward(
            state, d.dlogp, d.dentropy, d.dvalues, accumulate=accumulate or pre is not None,
            extra_dparams=d.dparams_extra, extra_dls=d.dlog_std_extra, extra_dz=extra_dz,
        )  # fmt: skip

    return Evaluated(d.loss, d.metrics, backward)


def ppo_loss_derivatives(
    cfg: Any, mb: Minibatch, logp: np.ndarray, entropy: np.ndarray, values: np.ndarray | None, clip: float
) -> LossDerivatives:
    """:func:`~suite.algorithms.ppo.ppo_policy_value_loss` with its derivatives by hand (equal to autograd's up to float
    rounding), in numpy on the per-sample arrays of :meth:`~suite.accel.mlp.PolicyKernel.evaluate`.

    With ``r = exp(logp - logp_old)``, ``u = r A`` and ``c = clip(r, 1 - eps, 1 + eps) A``, the surrogate
    ``-mean(min(u, c))`` has ``d/dlogp_i = -u_i / B`` where ``u_i <= c_i`` (the unclipped term is the minimum, or
    both are equal inside the clip range) and 0 elsewhere. The value loss ``mean((V - R)^2)`` over ``B x H`` gives
    ``2 (V - R) / (B H)`` (0 where value clipping is active), the entropy bonus ``-ent_coef / B`` per sample.
    """
    B = logp.shape[0]
    w = mb.weight
    adv = mb.advantages.numpy()
    log_ratio = logp - mb.old_log_probs.numpy()
    ratio = np.exp(log_ratio)
    bounded = fast_clip(ratio, 1 - clip, 1 + clip)
    unclipped = ratio * adv
    clipped = bounded * adv
    surrogate = np.minimum(unclipped, clipped)
    dlogp = np.where(unclipped <= clipped, unclipped, np.float32(0.0)) * np.float32(-w / B)
    assert values is not None
    target = mb.returns.numpy()
    target = target if target.ndim == 2 else target[:, None]
    if cfg.clip_range_vf is not None:
        old_values = mb.old_values.numpy()
        moved = values - old_values
        diff = old_values + np.clip(moved, -cfg.clip_range_vf, cfg.clip_range_vf) - target
        dvalues = diff * (np.abs(moved) <= cfg.clip_range_vf)
    else:
        diff = values - target
        dvalues = diff
    dvalues = dvalues * np.float32(2.0 * cfg.vf_coef * w / diff.size)
    squared = diff * diff
    policy_loss = -float(fast_mean(surrogate))
    value_loss = float(fast_mean(squared))
    entropy_mean = float(fast_mean(entropy))
    loss = (policy_loss - cfg.ent_coef * entropy_mean + cfg.vf_coef * value_loss) * w
    metrics = {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy_mean,
        "approx_kl": float(fast_mean(ratio - log_ratio)) - 1.0,  # mean((r - 1) - log r)
        "clip_fraction": float(fast_mean(bounded != ratio)),
    }
    dent = -cfg.ent_coef * w / B if cfg.ent_coef else None
    return LossDerivatives(loss, metrics, dlogp, dent, dvalues)
