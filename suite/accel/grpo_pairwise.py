"""The pairwise loss with its derivatives by hand: the accelerator of ``grpo-pairwise`` (CPU, MLP policies).

The specification is :meth:`suite.algorithms.grpo_pairwise.PairwiseTrainer.loss` (autograd), with the per-group
gradients' variance by one autograd pass per group. Here the policy MLP's forward and backward are the kernel's
(:class:`~suite.accel.mlp.PolicyKernel`) and the loss's derivative per step's log-probability is numpy arithmetic:
one forward, one backward pass per group (for ``grad_var``) and one for the whole loss. ``docs/accel.md`` has what it
saves.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from suite.accel import Accelerator, Evaluated, ParityCase, register_accelerator
from suite.algorithms.core import Diverged
from suite.algorithms.grpo_pairwise import (
    EpisodeBatch,
    PairwiseTrainer,
    pairwise_group_losses,
    trajectory_log_weights,
)


class PairwiseHandDerived:
    """The accelerated loss of a ``grpo-pairwise`` trainer."""

    def __init__(self, trainer: PairwiseTrainer):
        self.trainer, self.kernel = trainer, trainer.kernel

    def forward(self, batch: EpisodeBatch) -> Evaluated:
        """One epoch's loss by hand, with the per-group gradients' variance (``group_grad_var``) in its metrics.

        ``L = mean_g L_g - c mean_t H_t`` with ``L_g`` of :func:`~suite.algorithms.grpo_pairwise.pairwise_group_losses`.
        Per episode ``i`` of group ``g`` (``k`` episodes): ``dL_g/dlog w_i = sum_{j != i} (c_ij - c_ji) / (k (k - 1))``;
        per step ``t`` of episode ``i``: ``dlog w_i / dlog pi_t = rho_t / sum_{t' in i} rho_t'`` with
        ``rho = pi / pi_old``. The kernel turns ``dL/dlog pi_t`` and ``dL/dH_t = -c / S`` into the parameters' gradient;
        each group's gradient alone (for ``grad_var``) is one more backward pass of its ``dL_g/dlog pi``, made here
        (it writes over the gradients, which the returned backward then sets).
        """
        t, kernel = self.trainer, self.kernel
        cfg, flat = t.cfg, t.stepper.flat
        assert kernel is not None
        logp, entropy, _, state = kernel.evaluate(batch.obs, batch.actions, need_values=False)
        episode, lengths = batch.episode.numpy(), batch.lengths.numpy()
        log_ratio = logp - batch.log_probs.numpy()
        rho = np.exp(log_ratio)
        rho_sum = np.zeros(lengths.shape[0], dtype=rho.dtype)
        np.add.at(rho_sum, episode, rho)
        log_w = np.log(rho_sum / lengths.astype(rho.dtype))
        groups = t.shuffled_groups(lengths.shape[0]).numpy()
        k = groups.shape[1]
        r = batch.returns.numpy()[groups]
        coef = np.logaddexp(0.0, -(r[:, :, None] - r[:, None, :]) / cfg.temperature).astype(rho.dtype)
        coef *= 1.0 - np.eye(k, dtype=coef.dtype)  # ordered pairs i != j only
        lw = log_w[groups]
        group_losses = (coef * (lw[:, :, None] - lw[:, None, :])).sum((1, 2)) / (k * (k - 1))
        d_log_w = np.zeros((groups.shape[0], lengths.shape[0]), dtype=rho.dtype)  # dL_g / dlog w_i
        np.put_along_axis(d_log_w, groups, (coef.sum(2) - coef.sum(1)) / (k * (k - 1)), axis=1)
        d_logp_groups = d_log_w[:, episode] * (rho / rho_sum[episode])  # (G, S): dL_g / dlog pi_t
        loss = float(group_losses.mean() - cfg.ent_coef * entropy.mean())
        if not math.isfinite(loss):
            raise Diverged(f"non-finite loss {loss}")
        clock = t.clock
        clock.lap("forward", int(episode.shape[0]))
        grads = torch.empty(groups.shape[0], flat.grad.shape[0])
        for g in range(groups.shape[0]):
            kernel.backward(state, d_logp_groups[g], None, None)
            grads[g].copy_(flat.grad)
        group_var = float(grads.square().sum(1).mean() - grads.mean(0).square().sum())
        clock.lap("group_gradients")
        metrics = {
            "pairwise_loss": float(group_losses.mean()),
            "entropy": float(entropy.mean()),
            "approx_kl": float((batch.log_probs.numpy() - logp).mean()),  # the document's monitor
            "log_w_abs_max": float(np.abs(log_w).max()),
            "group_grad_var": group_var,
        }

        def backward(accumulate: bool) -> None:  # dL/dH_t = -c/S
            kernel.backward(state, d_logp_groups.mean(0), -cfg.ent_coef / episode.shape[0], None, accumulate=accumulate)

        return Evaluated(loss, metrics, backward)


def _applies(trainer: PairwiseTrainer) -> bool:
    return trainer.kernel is not None and trainer.cfg.hand_derived


register_accelerator(
    Accelerator(
        name="grpo-pairwise-hand-derived",
        specification=PairwiseTrainer.loss,
        algorithms=("grpo-pairwise",),
        covers=(
            PairwiseTrainer.loss,
            trajectory_log_weights,
            pairwise_group_losses,
            PairwiseTrainer.shuffled_groups,
            PairwiseTrainer.group_gradient_variance,
        ),  # fmt: skip
        fingerprint="9a60bac6c4f47308",
        applies=_applies,
        build=PairwiseHandDerived,
        summary="the pairwise loss's derivative per step in numpy, the MLP's backward by hand once per group",
        parity=(
            ParityCase("grpo-pairwise", "TextMatch-v0"),
            ParityCase("grpo-pairwise", "CartPole-v1", {"n_trajectories": 12, "group_size": 3, "n_epochs": 2}),
            ParityCase("grpo-pairwise", "Hopper-v5", {"max_episode_steps": 40}),
        ),
    )
)
