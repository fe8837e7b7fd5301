"""PPO's loss with its derivatives by hand: the accelerator of ``ppo`` and ``ppo-adaptive-clip`` (CPU, MLP policies).

The specification is :func:`suite.algorithms.ppo.ppo_policy_value_loss` (autograd). Here the policy's forward is the
kernel's (:class:`~suite.accel.mlp.PolicyKernel`), the loss and its derivatives per sample are numpy arithmetic on the
kernel's per-sample log-probabilities, entropies and values (:func:`~suite.accel.derivatives.ppo_loss_derivatives`), and
the kernel's backward
turns them into the parameters' gradient: no autograd graph, a few fixed calls per minibatch. ``docs/accel.md`` has
what it saves.
"""

from __future__ import annotations

from typing import Any

from suite.accel import Accelerator, Evaluated, ParityCase, register_accelerator
from suite.accel.derivatives import kernel_evaluated, ppo_loss_derivatives
from suite.algorithms.core import Minibatch
from suite.algorithms.ppo import PPOTrainer, ppo_policy_value_loss
from suite.algorithms.ppo_adaptive_clip import AdaptiveClipTrainer


class PPOHandDerived:
    """The accelerated loss of a PPO trainer (any whose loss is PPO's with its ``clip``)."""

    def __init__(self, trainer: Any):
        self.trainer, self.kernel = trainer, trainer.kernel

    def forward(self, mb: Minibatch) -> Evaluated:
        t, kernel = self.trainer, self.kernel
        logp, entropy, values, state = kernel.evaluate(mb.obs, mb.actions)
        return kernel_evaluated(kernel, state, ppo_loss_derivatives(t.cfg, mb, logp, entropy, values, t.clip))


def _has_kernel(trainer: Any) -> bool:
    return trainer.kernel is not None


register_accelerator(
    Accelerator(
        name="ppo-hand-derived",
        specification=PPOTrainer.loss,
        algorithms=("ppo",),
        covers=(PPOTrainer.loss, ppo_policy_value_loss),
        fingerprint="a3ca1bfb39fca89d",
        applies=_has_kernel,
        build=PPOHandDerived,
        summary="PPO's loss and its per-sample derivatives in numpy, the MLP's backward by hand",
        parity=(
            ParityCase("ppo", "CartPole-v1"),  # twin tanh MLPs, categorical
            ParityCase(
                "ppo",
                "CartPole-v1",
                {
                    "activation": "relu",
                    "pi_arch": [32],
                    "vf_arch": [64, 64],
                    "clip_range_vf": 0.2,
                    "ent_coef": 0.01,
                    "grad_accumulation": 2,
                },
            ),
            ParityCase("ppo", "TextMatch-v0"),  # 26 actions, entropy bonus
            ParityCase("ppo", "Hopper-v5", {"n_steps": 128}),  # Gaussian head, normalised observations
        ),  # fmt: skip
    )
)

register_accelerator(
    Accelerator(
        name="ppo-adaptive-clip-hand-derived",
        specification=AdaptiveClipTrainer.loss,
        algorithms=("ppo-adaptive-clip",),
        covers=(AdaptiveClipTrainer.loss, ppo_policy_value_loss),
        fingerprint="0c95c0dbcdd27c41",
        applies=_has_kernel,  # the LSTM and PopArt critics are not plain MLPs: no kernel, the specification runs
        build=PPOHandDerived,
        summary="PPO's hand-derived loss with the adaptive clip range (MLP critic)",
        parity=(
            ParityCase("ppo-adaptive-clip", "CartPole-v1"),
            ParityCase("ppo-adaptive-clip", "Hopper-v5", {"n_steps": 128, "clip_rule": "tracking"}),
        ),
    )
)
