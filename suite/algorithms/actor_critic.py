"""The actor-critic training loop shared by ``ppo`` and its variants (``ppo-adaptive-clip``, ``ppo-rlvr-prm``).

The loop (collect -> advantages -> epochs of minibatch steps -> record -> evaluate) lives here once; a
variant overrides only :meth:`ActorCriticTrainer.loss` and, where it has its own, :meth:`advantages`,
:meth:`begin_update` or :meth:`build_policy`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from suite.algorithms.core import (
    OBS_STORAGE_DTYPES,
    ROLLOUT_STORAGES,
    Diverged,
    GradientStepper,
    Minibatch,
    Rollout,
    RolloutCollector,
    SampleTable,
    attach_clock,
    compute_gae,
    explained_variance,
    micro_batches,
    net_config,
    resolve_obs_storage_dtype,
)
from suite.algorithms.fused import (
    HeadState,
    fast_clip,
    fast_mean,
    fast_normalize,
    fast_normalize_rows,
    in_kernel_mode,
    kernel_for,
    parameter_order,
)
from suite.algorithms.networks import ActorCritic
from suite.config import Schedule

if TYPE_CHECKING:
    from suite.trial import TrialContext


_PREPARED_ROWS_BYTES = 1 << 20
"""Most bytes of sample-table rows an update prepares in one block across epochs (CartPole with the zoo's settings:
20 epochs x 256 samples x 40 bytes = 200 KB); above it a block is one epoch, which holds as many bytes as the table.
0 prepares nothing ahead: each minibatch is gathered just before its step, as before 2026-12-04 (the tests' reference)."""


@dataclass(frozen=True)
class ActorCriticConfig:
    """Hyperparameters of the PPO family, with Stable-Baselines3's names and defaults."""

    n_envs: int = 1
    """Parallel environments stepped together (one network call per step for all of them)."""
    n_steps: int = 2048
    """Steps per env per rollout; a rollout holds ``n_envs * n_steps`` samples."""
    batch_size: int = 64
    """Minibatch size."""
    n_epochs: int = 10
    """Passes over each rollout."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    learning_rate: Schedule = Schedule("constant", 3e-4, 3e-4)
    """Adam step size (a schedule over training progress)."""
    clip_range: Schedule = Schedule("constant", 0.2, 0.2)
    """PPO clip epsilon (a schedule)."""
    clip_range_vf: float | None = None
    """Value-function clip range around the old values; None = no value clipping (SB3 default)."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    normalize_advantage: bool = True
    """Normalise advantages per minibatch."""
    target_kl: float | None = None
    """Stop the epochs of an update early when a minibatch's approx KL exceeds 1.5 x this, before its gradient
    step (SB3 semantics); None = never."""
    normalize: bool = False
    """Observation and reward normalisation (the zoo's ``normalize: true``, needed on MuJoCo)."""
    adam_eps: float = 1e-5
    """Adam epsilon (SB3 uses 1e-5)."""
    pi_arch: tuple[int, ...] = (64, 64)
    """Policy MLP hidden sizes (empty on Atari: linear head on the CNN)."""
    vf_arch: tuple[int, ...] = (64, 64)
    """Value MLP hidden sizes."""
    activation: str = "tanh"
    """Hidden activation: tanh or relu."""
    ortho_init: bool = True
    """Orthogonal initialisation (SB3 gains)."""
    log_std_init: float = 0.0
    """Initial log std of the Gaussian policy."""
    vectorization: str = "auto"
    """How envs are vectorised: auto (fastest available), sync or async."""
    rollout_storage: str = "numpy"
    """Memory toggle: rollout buffers allocated and written by ``numpy`` or as ``torch`` tensors (document 000's
    "numpy trajectory cache"). Exact: the same bytes and values either way (the update reads them zero-copy)."""
    gae_chunk: int = 0
    """Memory toggle: GAE over chunks of this many steps (its temporaries are ``(chunk, n_envs)``); 0 = the whole
    rollout at once. Exact: bitwise identical advantages for every chunk size."""
    grad_accumulation: int = 1
    """Memory toggle: each minibatch step sums the gradients of this many micro-batches (slices of it) before its
    one Adam step, so activations are held for ``batch_size / k`` samples at a time. The gradient is the
    minibatch's up to float summation order (parameters agree to ~1e-6 relative after an update)."""
    obs_storage_dtype: str = "auto"
    """Memory toggle: how observations are kept in the rollout. ``auto``: Atari frames once each as uint8 (a
    frame shared by consecutive stacks is stored once), vectors as float32; ``float32``: the stacked network
    inputs as float32 (SB3's layout); ``float16``: as float16 (exact for frames; rounds vector inputs, and the
    policy then acts on the rounded inputs); ``uint8``: frames kept once (image observations only)."""

    def __post_init__(self) -> None:
        for name in ("n_envs", "n_steps", "batch_size", "n_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not 0 < self.gamma <= 1 or not 0 <= self.gae_lambda <= 1:
            raise ValueError("gamma must be in (0, 1] and gae_lambda in [0, 1]")
        if self.activation not in ("tanh", "relu"):
            raise ValueError("activation must be tanh or relu")
        if self.vectorization not in ("auto", "sync", "async"):
            raise ValueError("vectorization must be auto, sync or async")
        if self.rollout_storage not in ROLLOUT_STORAGES:
            raise ValueError(f"rollout_storage must be one of {', '.join(ROLLOUT_STORAGES)}")
        if self.obs_storage_dtype not in OBS_STORAGE_DTYPES:
            raise ValueError(f"obs_storage_dtype must be one of {', '.join(OBS_STORAGE_DTYPES)}")
        if self.gae_chunk < 0:
            raise ValueError("gae_chunk must be >= 0 (0 = the whole rollout)")
        if not 1 <= self.grad_accumulation <= self.batch_size:
            raise ValueError("grad_accumulation must be between 1 and batch_size")

    def check_env(self, env: Any) -> None:
        """Env-dependent checks, before anything runs (``env``: the :class:`~suite.envs.EnvSpec`)."""
        resolve_obs_storage_dtype(self.obs_storage_dtype, env.observation == "image")


def actor_critic_policy(observation_space: Any, action_space: Any, cfg: Any) -> ActorCritic:
    """The family's policy for a config (also rebuilds saved policies: registry ``policy_factory``)."""
    return ActorCritic(observation_space, action_space, net_config(cfg, normalize_obs=cfg.normalize))


@dataclass
class FusedLoss:
    """A loss evaluated for the hand-derived backward: its value, metrics and per-sample derivatives."""

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
    (:class:`~suite.algorithms.fused.JacobianPenaltyGrad`)."""


class ActorCriticTrainer:
    """Collect, estimate advantages, optimise; subclasses define :meth:`loss` (autograd) and, where the
    hand-derived path covers it, :meth:`fused_loss` (see :mod:`suite.algorithms.fused`)."""

    def __init__(self, ctx: TrialContext, cfg: Any):
        self.ctx, self.cfg = ctx, cfg
        self.envs = ctx.make_envs(cfg.n_envs, vectorization=cfg.vectorization)
        self.policy = self.build_policy()
        self.stepper = GradientStepper(parameter_order(self.policy), cfg.learning_rate, cfg.max_grad_norm, cfg.adam_eps)
        self.kernel = kernel_for(self.policy, self.stepper.flat)  # after the stepper: the kernel reads the flat parameters
        self.fused = self.kernel is not None and self.supports_fused_loss()
        """Whether the update uses the hand-derived backward (else autograd on the same flat parameters)."""
        self.collector = RolloutCollector(
            ctx, self.envs, self.policy, cfg.n_steps, cfg.gamma, cfg.normalize,
            storage=cfg.rollout_storage, obs_dtype=cfg.obs_storage_dtype, kernel=self.kernel,
        )  # fmt: skip
        self.n_updates = 0
        self.clock: Any = attach_clock(ctx, self)
        """The lap clock of ``suite profile speed`` (:class:`suite.profile.speed.LapClock`) or None."""
        self.collector.clock = self.clock

    def build_policy(self) -> ActorCritic:
        return actor_critic_policy(self.envs.single_observation_space, self.envs.single_action_space, self.cfg)

    # -- the loop ----------------------------------------------------------------------------------------
    def train(self) -> ActorCritic:
        ctx = self.ctx
        while ctx.steps < ctx.total_timesteps:
            # collect rollout (the last one shortened to the budget left)
            with ctx.phase("rollout"):
                rollout = self.collector.collect(ctx.remaining_steps)
            progress = ctx.steps / ctx.total_timesteps
            # compute advantages
            with ctx.phase("advantages"):
                adv, ret = self.advantages(rollout)
            # optimise
            with ctx.phase("update"):
                metrics = self.update(rollout, adv, ret, progress=progress)
            ctx.record_update(metrics)
            ctx.after_iteration(self.policy)
        return self.policy

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
        """The (micro-)batch's loss for autograd (already scaled by ``mb.weight``) and its metrics."""
        raise NotImplementedError

    def supports_fused_loss(self) -> bool:
        """Whether :meth:`fused_loss` computes this trainer's loss (with its current config)."""
        return False

    def fused_loss(self, mb: Minibatch, logp: np.ndarray, entropy: np.ndarray, values: np.ndarray | None) -> FusedLoss:
        """The loss and its per-sample derivatives from the hand-derived forward's outputs."""
        raise NotImplementedError

    # -- one update --------------------------------------------------------------------------------------
    @in_kernel_mode(lambda self: self.fused)
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
        k = cfg.grad_accumulation
        limit = None if cfg.target_kl is None else 1.5 * cfg.target_kl
        sums: dict[str, float] = {}
        count = steps = 0
        if clock is not None:
            clock.lap("update_setup")
        for parts in self._minibatches(table, extra, whole=limit is None and not self.update_draws_random()):
            self.stepper.zero_grad()
            kl = 0.0
            for j, mb in enumerate(parts):
                weight = mb.weight
                m: Mapping[str, Any]
                if self.fused:
                    fl, state = self._fused_forward(mb)
                    m = fl.metrics
                else:
                    loss, m = self.loss(mb)
                if clock is not None:
                    clock.lap("forward", mb.advantages.shape[0])
                for key, v in m.items():
                    sums[key] = sums.get(key, 0.0) + float(v) * weight
                kl += float(m["approx_kl"]) * weight if limit is not None else 0.0
                if limit is not None and k == 1 and kl > limit:
                    break  # SB3 (ppo.py): the minibatch that crosses the limit is measured but not stepped on
                if self.fused:
                    assert self.kernel is not None
                    pre, extra_dz = fl.before_backward, None
                    if pre is not None:
                        extra_dz = pre()  # writes into the gradients: the kernel's backward accumulates
                    self.kernel.backward(
                        state, fl.dlogp, fl.dentropy, fl.dvalues, accumulate=j > 0 or pre is not None,
                        extra_dparams=fl.dparams_extra, extra_dls=fl.dlog_std_extra, extra_dz=extra_dz,
                    )  # fmt: skip
                else:
                    self.stepper.backward(loss)
                if clock is not None:
                    clock.lap("backward")
            count += 1
            if limit is not None and kl > limit:
                break
            self.stepper.apply()
            steps += 1
            if clock is not None:
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
        if clock is not None:
            clock.lap("update_setup")
        return out

    def _minibatches(self, table: SampleTable, extra: dict[str, torch.Tensor], whole: bool) -> Iterator[Iterable[Minibatch]]:
        """The micro-batches of every minibatch step of the update, in order: per epoch a fresh permutation,
        minibatches of ``batch_size`` samples, advantages normalised over the minibatch, ``grad_accumulation``
        micro-batches each.

        With vector observations packed into the sample table (``table.obs_packed``) every minibatch is rows of it,
        so they are prepared before their gradient steps, in one gather: a block of numpy calls run back to back
        costs ~3x less than the same calls run between the network's passes (CartPole, ``ppo``'s zoo settings: 54 vs
        17 us a minibatch, 2026-12-04). The block is the whole update when ``whole`` (no early stop, and no random
        draws in the update besides the permutations, so drawing every epoch's permutation first leaves the random
        stream as it was) and its rows take at most :data:`_PREPARED_ROWS_BYTES`; otherwise one epoch. Frames and
        other observations stored apart are gathered one micro-batch at a time, as they come (as before 2026-12-04)."""
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
            if clock is not None:
                clock.lap("minibatch")
            yield from block

    def _timed(self, micro_batches: Iterator[Minibatch]) -> Iterator[Minibatch]:
        """``micro_batches`` as they come, each one's making charged to the profile's ``minibatch`` part."""
        for mb in micro_batches:
            if self.clock is not None:
                self.clock.lap("minibatch")
            yield mb

    def _block_advantages(self, table: SampleTable, rows: np.ndarray, bounds: list[tuple[int, int]]) -> np.ndarray:
        """The advantages of a prepared block's ``rows``, each minibatch (``bounds``: its rows ``lo:hi``) normalised
        as :meth:`_micro_batches` normalises one alone, bit for bit; the minibatches of ``batch_size`` rows in one
        :func:`fast_normalize_rows` (an update's 20 minibatches of 256: ~114 -> ~18 us)."""
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
                mb.extra = {key: v.index_select(0, part_t) for key, v in extra.items()}  # = v[part_t], ~2x faster
            yield mb

    def update_draws_random(self) -> bool:
        """Whether this trainer's update draws from torch's random stream besides the epochs' permutations (a loss
        that samples, say). Then each epoch's permutation is drawn when the epoch begins, as always; when it does
        not, every epoch's permutation may be drawn up front (:meth:`_minibatches`) with the same random stream.
        The default answers True, which is always safe."""
        return True

    def _fused_forward(self, mb: Minibatch) -> tuple[FusedLoss, HeadState]:
        assert self.kernel is not None
        logp, entropy, values, state = self.kernel.evaluate(mb.obs, mb.actions)
        self.fused_state = state  # for losses with terms beyond log pi(a|s) (the head's full output)
        fl = self.fused_loss(mb, logp, entropy, values)
        if not math.isfinite(fl.loss):
            raise Diverged(f"non-finite loss {fl.loss}")
        return fl, state

    def minibatch_extra(self, rollout: Rollout) -> dict[str, torch.Tensor]:
        """Per-sample tensors ``(n, ...)`` a variant's loss needs besides the standard fields."""
        return {}

    def network_extra(self) -> tuple[str, Callable[[], list[torch.Tensor] | None] | None] | None:
        """Network passes a train step makes beyond the network's forward and backward (a loss term on the network's
        input gradient), as ``(what, run)``: ``run()`` makes them once on the kernel's last
        :meth:`~suite.algorithms.fused.PolicyKernel.evaluate`, before its backward, as :attr:`FusedLoss.
        before_backward` does (adds their direct gradient, returns the extra ``dL/dz`` for the backward); None where
        the update makes them by autograd. ``suite profile speed`` adds ``run`` to every train step of its limit (the
        network alone doing the same work), or says the limit lacks them. None: there are none."""
        return None


def ppo_policy_value_loss(
    trainer: ActorCriticTrainer, mb: Minibatch, clip: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate + value + entropy loss (Schulman et al. 2017, arXiv 1707.06347; SB3's form), for
    autograd; :func:`ppo_fused_loss` is the same loss with its derivatives by hand.

    Returns:
        (loss x ``mb.weight``, metrics, log-probs ``(B,)``, policy params ``(B, P)``) so variants can add regularisers
        (scaled by ``mb.weight`` too).
    """
    cfg = trainer.cfg
    logp, entropy, values, params = trainer.policy.evaluate_actions(mb.obs, mb.actions)
    adv = mb.advantages
    log_ratio = logp - mb.old_log_probs
    ratio = torch.exp(log_ratio)
    policy_loss = -torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv).mean()
    assert values is not None
    if cfg.clip_range_vf is not None:
        values = mb.old_values + torch.clamp(values - mb.old_values, -cfg.clip_range_vf, cfg.clip_range_vf)
    target = mb.returns if mb.returns.dim() == 2 else mb.returns.unsqueeze(-1)
    value_loss = (target - values).square().mean()
    entropy_loss = -entropy.mean()
    loss = policy_loss + cfg.ent_coef * entropy_loss + cfg.vf_coef * value_loss
    if mb.weight != 1.0:
        loss = loss * mb.weight
    with torch.no_grad():
        metrics = {
            "policy_loss": policy_loss.detach(),
            "value_loss": value_loss.detach(),
            "entropy": -entropy_loss.detach(),
            "approx_kl": ((ratio - 1) - log_ratio).mean(),
            "clip_fraction": ((ratio - 1).abs() > clip).float().mean(),
        }
    return loss, metrics, logp, params


def ppo_fused_loss(
    cfg: Any, mb: Minibatch, logp: np.ndarray, entropy: np.ndarray, values: np.ndarray | None, clip: float
) -> FusedLoss:
    """:func:`ppo_policy_value_loss` with its derivatives by hand (equal to autograd's up to float rounding; tested),
    in numpy on the per-sample arrays of :meth:`PolicyKernel.evaluate`.

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
    return FusedLoss(loss, metrics, dlogp, dent, dvalues)
