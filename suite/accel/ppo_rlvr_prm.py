"""``ppo-rlvr-prm``'s loss with its derivatives by hand: its accelerator (CPU, MLP policies).

The specification is :meth:`suite.algorithms.ppo_rlvr_prm.RlvrPrmTrainer.loss` (autograd, with a double backward for the
input-gradient penalty). Here PPO's part is :func:`suite.accel.ppo.ppo_loss_derivatives`, the JS term's derivative
w.r.t. the policy's outputs (and log std) is numpy arithmetic (:func:`js_categorical_grad`, :func:`js_gaussian_mc_grad`,
the same random draws as the specification's), and the smoothness penalty's value and gradient come from
:func:`suite.accel.jacobian.jacobian_penalty`, whose part through the activation derivatives the network's own backward
carries. ``docs/accel.md`` has what it saves.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from suite.accel import Accelerator, Evaluated, ParityCase, register_accelerator
from suite.accel.derivatives import kernel_evaluated, ppo_loss_derivatives
from suite.accel.jacobian import JacobianPenaltyGrad, jacobian_penalty
from suite.accel.mlp import PolicyKernel
from suite.accel.reductions import fast_mean
from suite.algorithms.core import Minibatch
from suite.algorithms.networks import CategoricalHead
from suite.algorithms.ppo import ppo_policy_value_loss
from suite.algorithms.ppo_rlvr_prm import (
    LOG_2,
    RlvrPrmConfig,
    RlvrPrmTrainer,
    input_gradient_penalty,
    js_categorical,
    js_gaussian_mc,
    prm_js,
)


def policy_jacobian_penalty(cfg: RlvrPrmConfig, kernel: PolicyKernel, coef: float) -> tuple[np.ndarray, JacobianPenaltyGrad]:
    """:func:`jacobian_penalty` of the policy network as the kernel's last evaluate left it (``coef``: the factor on
    the sum over samples), its Hutchinson probes (``cfg.smooth_probes``) drawn as the specification's
    :func:`~suite.algorithms.ppo_rlvr_prm.input_gradient_penalty` draws them: same stream, same order."""
    acts, layers = kernel.policy_network()
    probes = None
    if cfg.smooth_probes:
        B, P = acts[0].shape[0], layers[-1][0].shape[0]
        probes = torch.stack([torch.randn(B, P) for _ in range(cfg.smooth_probes)])
    return jacobian_penalty(acts, layers, kernel.tanh, coef, probes)


def categorical_log_probs(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities ``(B, n)`` of categorical logits, ``logits - logaddexp.reduce(logits)`` row by row. A row's
    values depend on that row alone (numpy folds ``logaddexp`` along it in order), so the rows of one call over a
    whole rollout equal those of a call over any minibatch of it, bit for bit (tested)."""
    return logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)


def js_categorical_grad(p: np.ndarray, logp: np.ndarray, logq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~suite.algorithms.ppo_rlvr_prm.js_categorical` per sample ``(B,)`` and its derivative w.r.t. the current
    logits ``(B, n)``, from the current log-probabilities and pi_old's ``logq`` (:func:`categorical_log_probs` of its
    logits): with ``m = (p + q) / 2``, ``dJS/dp_i = (log p_i - log m_i) / 2``, through the softmax ``p (g - sum p g)``."""
    log_m = np.logaddexp(logp, logq) - np.float32(LOG_2)
    q = np.exp(logq)
    js = 0.5 * (p * (logp - log_m)).sum(-1) + 0.5 * (q * (logq - log_m)).sum(-1)
    g = 0.5 * (logp - log_m)
    return js, p * (g - (p * g).sum(-1, keepdims=True))


def js_gaussian_mc_grad(
    mean: np.ndarray, log_std: np.ndarray, old_mean: np.ndarray, old_log_std: np.ndarray, n_samples: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`~suite.algorithms.ppo_rlvr_prm.js_gaussian_mc` (the same random draws, in the same order) and its
    derivatives by hand: per sample ``(B,)``, w.r.t. the means ``(B, A)`` and w.r.t. the log std ``(A,)`` summed over samples.

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


class RlvrPrmHandDerived:
    """The accelerated loss of a ``ppo-rlvr-prm`` trainer."""

    def __init__(self, trainer: RlvrPrmTrainer):
        self.trainer = trainer
        self.kernel: PolicyKernel = trainer.kernel  # type: ignore[assignment]

    def minibatch_extra(self, extra: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """pi_old's log-probabilities ``old_logq`` for a categorical head's JS, once per update rather than once per
        minibatch (the same rows: :func:`categorical_log_probs` of each row alone)."""
        if isinstance(self.trainer.policy.head, CategoricalHead):
            extra["old_logq"] = torch.from_numpy(categorical_log_probs(extra["old_params"].numpy()))
        return extra

    def forward(self, mb: Minibatch) -> Evaluated:
        t, kernel = self.trainer, self.kernel
        cfg = t.cfg
        logp, entropy, values, state = kernel.evaluate(mb.obs, mb.actions)
        d = ppo_loss_derivatives(cfg, mb, logp, entropy, values, t.clip)
        B, w = logp.shape[0], mb.weight
        old = mb.extra["old_params"].numpy()
        if kernel.gaussian:
            assert state.mu is not None
            js, dmu, dls = js_gaussian_mc_grad(
                state.mu, t.policy.log_std.detach().numpy(), old, t.old_log_std.numpy(), cfg.js_samples
            )
            d.dlog_std_extra = dls * np.float32(cfg.js_coef * w / B)
        else:
            assert state.p is not None and state.logp_all is not None
            logq = mb.extra.get("old_logq")
            js, dmu = js_categorical_grad(
                state.p, state.logp_all, categorical_log_probs(old) if logq is None else logq.numpy()
            )
        d.dparams_extra = dmu * np.float32(cfg.js_coef * w / B)
        js_mean = float(fast_mean(js))
        smooth = 0.0
        if cfg.smooth_coef > 0:
            per_sample, grad = policy_jacobian_penalty(cfg, kernel, cfg.smooth_coef * w / B)
            d.before_backward = grad.before_backward
            smooth = float(fast_mean(per_sample))
        d.loss += (cfg.js_coef * js_mean + cfg.smooth_coef * smooth) * w
        d.metrics.update(js=js_mean, smooth_penalty=smooth)
        return kernel_evaluated(kernel, state, d)

    def network_extra(self) -> Callable[[], list[torch.Tensor] | None] | None:
        """The smoothness penalty's passes on the kernel's last evaluate (forward and backward through the policy
        network's Jacobian), as a train step makes them before its backward: ``suite profile speed`` adds them to its
        limit. None without the penalty."""
        cfg, kernel = self.trainer.cfg, self.kernel
        if cfg.smooth_coef <= 0:
            return None

        def run() -> list[torch.Tensor] | None:
            B = kernel.policy_network()[0][0].shape[0]
            return policy_jacobian_penalty(cfg, kernel, cfg.smooth_coef / B)[1].before_backward()

        return run


def _applies(trainer: RlvrPrmTrainer) -> bool:
    return trainer.kernel is not None and trainer.cfg.hand_derived


register_accelerator(
    Accelerator(
        name="ppo-rlvr-prm-hand-derived",
        specification=RlvrPrmTrainer.loss,
        algorithms=("ppo-rlvr-prm",),
        covers=(
            RlvrPrmTrainer.loss,
            ppo_policy_value_loss,
            prm_js,
            js_categorical,
            js_gaussian_mc,
            input_gradient_penalty,
        ),  # fmt: skip
        fingerprint="aee0d94b2d53fae3",
        applies=_applies,
        build=RlvrPrmHandDerived,
        summary="PPO's, the JS term's and the input-gradient penalty's derivatives by hand (no double backward)",
        parity=(
            ParityCase("ppo-rlvr-prm", "CartPole-v1", {"smooth_coef": 0.05}),  # the exact penalty, twin tanh MLPs
            ParityCase("ppo-rlvr-prm", "TextMatch-v0"),  # Hutchinson, one probe
            ParityCase(
                "ppo-rlvr-prm",
                "CartPole-v1",
                {"activation": "relu", "pi_arch": [32, 16], "vf_arch": [64, 64], "grad_accumulation": 2},
            ),
            ParityCase("ppo-rlvr-prm", "Hopper-v5", {"n_steps": 128, "smooth_probes": 2, "js_samples": 2}),
            ParityCase("ppo-rlvr-prm", "CartPole-v1", {"pi_arch": [], "vf_arch": [64, 64]}),  # a linear policy
        ),  # fmt: skip
    )
)
