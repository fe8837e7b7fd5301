"""The actor-critic update shared by ``ppo`` and its variants (``ppo-adaptive-clip``, ``ppo-rlvr-prm``).

The iteration (collect -> advantages -> epochs of minibatch steps) lives here once, on the shared loop of
:class:`~suite.algorithms.trainer.Trainer`; a variant defines its loss (:meth:`ActorCriticTrainer.loss`, the
specification) and, where it has its own, :meth:`~ActorCriticTrainer.advantages`,
:meth:`~ActorCriticTrainer.begin_update`, :meth:`~ActorCriticTrainer.minibatch_extra` or
:meth:`~ActorCriticTrainer.build_policy`. Each minibatch's loss comes from the variant's specification by autograd,
or from the accelerator registered for it (:mod:`suite.accel`) where one applies.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from suite.accel import Evaluated
from suite.accel.mlp import in_kernel_mode, kernel_for, parameter_order
from suite.accel.reductions import fast_normalize, fast_normalize_rows
from suite.algorithms.core import (
    GradientStepper,
    Minibatch,
    Rollout,
    RolloutCollector,
    SampleTable,
    compute_gae,
    explained_variance,
    micro_batches,
    net_config,
)
from suite.algorithms.networks import ActorCritic
from suite.algorithms.trainer import Trainer

if TYPE_CHECKING:
    from suite.trial import TrialContext


_PREPARED_ROWS_BYTES = 1 << 20
"""Most bytes of sample-table rows an update prepares in one block across epochs (CartPole with the zoo's settings:
20 epochs x 256 samples x 40 bytes = 200 KB); above it a block is one epoch, which holds as many bytes as the table.
0 prepares nothing ahead: each minibatch is gathered just before its step (the tests' reference)."""


def actor_critic_policy(observation_space: Any, action_space: Any, cfg: Any) -> ActorCritic:
    """The family's policy for a config (also rebuilds saved policies: registry ``policy_factory``)."""
    return ActorCritic(observation_space, action_space, net_config(cfg, normalize_obs=cfg.normalize))


class ActorCriticTrainer(Trainer):
    """Collect, estimate advantages, optimise; subclasses define :meth:`loss` (the specification)."""

    def __init__(self, ctx: TrialContext, cfg: Any):
        super().__init__(ctx, cfg)
        self.envs = ctx.make_envs(cfg.n_envs, vectorization=cfg.vectorization)
        self.policy = self.build_policy()
        if self.off_cpu:
            self.policy.to_device(self.device)
        self.stepper = GradientStepper(parameter_order(self.policy), cfg.learning_rate, cfg.max_grad_norm, cfg.adam_eps)
        self.kernel = kernel_for(self.policy, self.stepper.flat)  # after the stepper: the kernel reads the flat parameters
        """The policy's hand-derived passes (:mod:`suite.accel.mlp`): the rollout's inference, and accelerators' passes."""
        self.collector = RolloutCollector(
            ctx, self.envs, self.policy, cfg.n_steps, cfg.gamma, cfg.normalize,
            storage=cfg.rollout_storage, obs_dtype=cfg.obs_storage_dtype, kernel=self.kernel,
        )  # fmt: skip
        self.use_specification(type(self).loss)
        self.collector.clock = self.clock

    def build_policy(self) -> ActorCritic:
        return actor_critic_policy(self.envs.single_observation_space, self.envs.single_action_space, self.cfg)

    # -- one iteration -----------------------------------------------------------------------------------
    def prepare(self) -> tuple[Rollout, np.ndarray, np.ndarray]:
        """A rollout (the last one shortened to the budget left) and its ``(advantages, returns)``."""
        ctx = self.ctx
        with ctx.phase("rollout"):
            rollout = self.collector.collect(ctx.remaining_steps)
        with ctx.phase("advantages"):
            adv, ret = self.advantages(rollout)
        return rollout, adv, ret

    def optimise(self, prepared: tuple[Rollout, np.ndarray, np.ndarray], progress: float) -> dict[str, float]:
        rollout, adv, ret = prepared
        return self.update(rollout, adv, ret, progress=progress)

    # -- hooks -------------------------------------------------------------------------------------------
    def advantages(self, rollout: Rollout) -> tuple[np.ndarray, np.ndarray]:
        """``(advantages (T, N), returns (T, N))`` by GAE on the mean of the value heads."""
        return compute_gae(
            rollout.rewards,
            rollout.values.mean(-1),
            rollout.dones,
            rollout.last_values.mean(-1),
            self.cfg.gamma,
            self.cfg.gae_lambda,
            chunk=self.cfg.gae_chunk,
        )

    def begin_update(self, rollout: Rollout, advantages: np.ndarray, progress: float) -> dict[str, float]:
        """Called once per update before the epochs; returns extra metrics to record. Sets ``self.clip``."""
        self.clip = self.cfg.clip_range(progress)
        return {"clip_range": self.clip}

    def loss(self, mb: Minibatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The specification: the (micro-)batch's loss for autograd (already scaled by ``mb.weight``) and its metrics."""
        raise NotImplementedError

    def loss_draws_random(self) -> bool:
        """Whether :meth:`loss` draws from torch's random stream (a sampled estimate, say). Then each epoch's permutation
        is drawn when the epoch begins, as always; when it does not, every epoch's permutation may be drawn up front
        (:meth:`_minibatches`) with the same random stream. The default answers True, which is always safe."""
        return True

    def minibatch_extra(self, rollout: Rollout) -> dict[str, torch.Tensor]:
        """Per-sample tensors ``(n, ...)`` a variant's loss needs besides the standard fields (``mb.extra``)."""
        return {}

    def spec_forward(self, mb: Minibatch) -> Evaluated:
        loss, metrics = self.loss(mb.to(self.device) if self.off_cpu else mb)

        def backward(accumulate: bool) -> None:
            if not accumulate:
                self.stepper.zero_grad()
            self.stepper.backward(loss)

        return Evaluated(loss, metrics, backward)

    # -- one update --------------------------------------------------------------------------------------
    @in_kernel_mode(lambda self: self.accelerator is not None)
    def update(self, rollout: Rollout, adv: np.ndarray, ret: np.ndarray, progress: float) -> dict[str, float]:
        """Epochs of minibatch steps on ``rollout`` with advantages ``adv`` and value targets ``ret`` (T, N[, H]).

        Each minibatch step: advantages normalised over the minibatch, then (``grad_accumulation = k``) k
        micro-batches whose gradients are summed, then one clipped Adam step. With ``target_kl`` the minibatch whose
        approx KL crosses 1.5 x target_kl is measured but not stepped on (SB3).
        """
        cfg, clock = self.cfg, self.clock
        extra_metrics = self.begin_update(rollout, adv, progress)
        lr = self.stepper.begin_update(progress)
        n = rollout.n_samples
        table = SampleTable(rollout, adv, ret)
        extra = self.minibatch_extra(rollout)
        accelerator = self.accelerator
        if accelerator is not None and hasattr(accelerator, "minibatch_extra"):
            extra = accelerator.minibatch_extra(extra)
        forward = accelerator.forward if accelerator is not None else self.spec_forward
        k = cfg.grad_accumulation
        limit = None if cfg.target_kl is None else 1.5 * cfg.target_kl
        sums: dict[str, float] = {}
        count = steps = 0
        clock.lap("update_setup")
        for parts in self._minibatches(table, extra, whole=limit is None and not self.loss_draws_random()):
            self.stepper.zero_grad()
            kl = 0.0
            for j, mb in enumerate(parts):
                weight = mb.weight
                evaluated = forward(mb)
                m = evaluated.metrics
                clock.lap("forward", mb.advantages.shape[0])
                for key, v in m.items():
                    sums[key] = sums.get(key, 0.0) + float(v) * weight
                kl += float(m["approx_kl"]) * weight if limit is not None else 0.0
                if limit is not None and k == 1 and kl > limit:
                    break  # SB3 (ppo.py): the minibatch that crosses the limit is measured but not stepped on
                evaluated.backward(j > 0)
                clock.lap("backward")
            count += 1
            if limit is not None and kl > limit:
                break
            self.stepper.apply()
            steps += 1
            clock.lap("optimizer")
        self.stepper.check_finite()
        self.n_updates += 1
        out = {key: v / max(count, 1) for key, v in sums.items()}
        out.update(self.stepper.end_update())
        out.update(extra_metrics)
        out["learning_rate"] = lr
        out["n_minibatches"] = float(steps)  # gradient steps taken
        if self.policy.vf is not None:
            out["explained_variance"] = explained_variance(rollout.values.mean(-1).ravel(), ret.reshape(n, -1)[:, 0])
        clock.lap("update_setup")
        return out

    def _minibatches(self, table: SampleTable, extra: dict[str, torch.Tensor], whole: bool) -> Iterator[Iterable[Minibatch]]:
        """The micro-batches of every minibatch step of the update, in order: per epoch a fresh permutation,
        minibatches of ``batch_size`` samples, advantages normalised over the minibatch, ``grad_accumulation``
        micro-batches each.

        With vector observations packed into the sample table (``table.obs_packed``) every minibatch is rows of it,
        so they are prepared before their gradient steps, in one gather: a block of numpy calls run back to back costs
        several times less than the same calls run between the network's passes (``docs/accel.md``). The block is the
        whole update when ``whole`` (no early stop, and no random draws in the update besides the permutations, so
        drawing every epoch's permutation first leaves the random stream as it was) and its rows take at most
        :data:`_PREPARED_ROWS_BYTES`; otherwise one epoch. Frames and
        other observations stored apart are gathered one micro-batch at a time, as they come."""
        cfg, clock = self.cfg, self.clock
        n, bs = table.n, cfg.batch_size
        prepare = table.obs_packed and _PREPARED_ROWS_BYTES > 0
        epochs_per_block = 1
        if prepare and whole and n * cfg.n_epochs * table.row_bytes <= _PREPARED_ROWS_BYTES:
            epochs_per_block = cfg.n_epochs
        for first in range(0, cfg.n_epochs, epochs_per_block):
            perms = [torch.randperm(n).numpy() for _ in range(min(epochs_per_block, cfg.n_epochs - first))]
            if not prepare:
                for start in range(0, n, bs):
                    idx = perms[0][start : start + bs]
                    yield self._timed(self._micro_batches(table, extra, idx, table.gather(idx)))
                continue
            order = np.concatenate(perms) if len(perms) > 1 else perms[0]
            rows = table.gather(order)
            bounds = [(lo, min(lo + bs, end)) for end in range(n, (len(perms) + 1) * n, n) for lo in range(end - n, end, bs)]
            adv = self._block_advantages(table, rows, bounds)
            block = [list(self._micro_batches(table, extra, order[lo:hi], rows[lo:hi], adv[lo:hi])) for lo, hi in bounds]
            clock.lap("minibatch")
            yield from block

    def _timed(self, micro_batches: Iterator[Minibatch]) -> Iterator[Minibatch]:
        """``micro_batches`` as they come, each one's making charged to the profile's ``minibatch`` part."""
        for mb in micro_batches:
            self.clock.lap("minibatch")
            yield mb

    def _block_advantages(self, table: SampleTable, rows: np.ndarray, bounds: list[tuple[int, int]]) -> np.ndarray:
        """The advantages of a prepared block's ``rows``, each minibatch (``bounds``: its rows ``lo:hi``) normalised
        as :meth:`_micro_batches` normalises one alone, bit for bit; the minibatches of ``batch_size`` rows in one
        :func:`~suite.accel.reductions.fast_normalize_rows` call."""
        adv = np.ascontiguousarray(table.advantages(rows))
        bs = self.cfg.batch_size
        if not self.cfg.normalize_advantage or bs < 2:
            return adv
        if all(hi - lo == bs for lo, hi in bounds):  # the minibatches tile the block
            return fast_normalize_rows(adv.reshape(-1, bs), 1e-8).reshape(-1)
        out = np.empty_like(adv)
        starts = np.array([lo for lo, hi in bounds if hi - lo == bs], dtype=np.intp)
        if starts.size:
            at = starts[:, None] + np.arange(bs)
            out[at] = fast_normalize_rows(adv[at], 1e-8)
        for lo, hi in bounds:
            if hi - lo < bs:  # an epoch's last, shorter minibatch
                out[lo:hi] = fast_normalize(adv[lo:hi], 1e-8) if hi - lo > 1 else adv[lo:hi]
        return out

    def _micro_batches(
        self,
        table: SampleTable,
        extra: dict[str, torch.Tensor],
        idx: np.ndarray,
        rows: np.ndarray,
        advantages: np.ndarray | None = None,
    ) -> Iterator[Minibatch]:
        """The micro-batches of one minibatch (the samples ``idx``, their table ``rows``; ``advantages``: theirs,
        already normalised, or None to normalise them here), each made when it is asked for: observations stored
        apart (frames) are gathered one micro-batch at a time, so a step holds one micro-batch of them, not all of
        its minibatch's."""
        cfg = self.cfg
        b, k = idx.shape[0], cfg.grad_accumulation
        if advantages is not None:
            mb_adv = advantages
        elif cfg.normalize_advantage and b > 1:
            mb_adv = fast_normalize(table.advantages(rows), 1e-8)  # (a - mean) / (std(ddof=1) + 1e-8)
        else:
            mb_adv = np.ascontiguousarray(table.advantages(rows))
        for lo, hi in [(0, b)] if k == 1 else micro_batches(b, k):
            part = idx[lo:hi]
            mb = table.minibatch(rows[lo:hi], part, mb_adv[lo:hi], (hi - lo) / b)
            if extra:
                part_t = torch.from_numpy(part)
                mb.extra = {key: v.index_select(0, part_t) for key, v in extra.items()}  # = v[part_t], faster
            yield mb
