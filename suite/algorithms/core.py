"""The shared on-policy core: rollout storage and collection, GAE, gradient steps with diagnostics.

Every algorithm of the suite is built from these pieces; an algorithm module holds only its loss and what
is truly its own. Hot-path rules (the core is benchmarked against SB3, ``benchmarks/``; ``suite profile speed``
shows where the time goes): one network call per env step for all envs, preallocated buffers written in place,
no per-step Python objects per env, parameters packed in one buffer with one fused optimiser call
(:mod:`suite.accel.flat`), the hand-derived network passes of :mod:`suite.accel.mlp` for the rollout's inference
where they apply, and numpy (not torch) for the many small per-minibatch array operations.

The memory toggles of document 000 are real code paths here, each a config field (``suite profile memory
--toggle NAME=VALUE``): ``rollout_storage`` (:class:`Buffer`: numpy or torch allocations), ``gae_chunk``
(:func:`compute_gae` in chunks, bitwise the same result), ``grad_accumulation`` (micro-batches summed into one
step, in the trainer) and ``obs_storage_dtype`` (:func:`make_obs_store`: Atari frames kept once as uint8, or
stacked float32/float16 inputs).

Array shapes: ``T`` rollout steps, ``N`` envs, ``H`` value heads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from suite.accel.flat import FlatAdam, FlatParameters
from suite.accel.mlp import PolicyKernel, in_kernel_mode
from suite.accel.reductions import fast_mean, fast_var
from suite.algorithms.networks import ActorCritic, NetConfig
from suite.config import Schedule
from suite.envs import final_observations, finished_episodes
from suite.errors import Diverged, UserError

if TYPE_CHECKING:
    import gymnasium as gym

    from suite.trial import TrialContext


# -- advantage estimation ---------------------------------------------------------------------------------
def compute_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    dones: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    gae_lambda: float,
    delta_weights: np.ndarray | None = None,
    chunk: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation (Schulman et al. 2016, arXiv 1506.02438).

    The TD errors of a chunk of steps are computed at once (vectorised over time), then the backward recursion
    ``A_t = delta_t + gamma lambda (1 - d_t) A_{t+1}`` runs over the chunk; chunks go from the end of the rollout
    to its start, carrying ``A`` and ``V`` across. Every element sees the same float operations in the same order
    whatever the chunk size, so the result is bitwise identical for every ``chunk`` (tested).

    Args:
        rewards: ``(T, N)`` rewards of step t (time-limit truncations already bootstrapped into them).
        values: ``(T, N)`` V(s_t).
        dones: ``(T, N)`` 1 where the episode ended at step t (terminated or truncated).
        last_values: ``(N,)`` V(s_T) of the observation after the last step.
        gamma: discount.
        gae_lambda: GAE lambda.
        delta_weights: optional ``(T, N)`` factors on each TD error, ``A_t = sum_k (gamma lambda)^k w_{t+k}
            delta_{t+k}`` (``ppo-rlvr-prm``'s variance weighting); None = 1.
        chunk: steps per chunk (the ``gae_chunk`` toggle: temporaries are ``(chunk, N)``); 0 = the whole rollout.

    Returns:
        ``(advantages, returns)``, both ``(T, N)`` float32, with returns = advantages + values.
    """
    T = rewards.shape[0]
    adv = np.empty(rewards.shape, dtype=np.float32)
    last = np.zeros(rewards.shape[1:], dtype=np.float32)
    next_values = np.asarray(last_values, dtype=np.float32)
    gl = gamma * gae_lambda
    size = T if chunk <= 0 else chunk
    for end in range(T, 0, -size):
        start = max(end - size, 0)
        non_terminal = 1.0 - dones[start:end]
        following = np.empty((end - start, *rewards.shape[1:]), dtype=np.float32)  # V(s_{t+1})
        following[:-1] = values[start + 1 : end]
        following[-1] = next_values
        delta = rewards[start:end] + gamma * following * non_terminal - values[start:end]
        if delta_weights is not None:
            delta = delta * delta_weights[start:end]
        decay = gl * non_terminal
        for t in range(end - start - 1, -1, -1):
            last = delta[t] + decay[t] * last
            adv[start + t] = last
        next_values = values[start]
    return adv, (adv + values).astype(np.float32)


class RewardNormalizer:
    """Scale rewards by the running std of the discounted return, clipped (SB3 VecNormalize's norm_reward)."""

    def __init__(self, n_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8):
        self.gamma, self.clip, self.eps = gamma, clip, eps
        self.ret = np.zeros(n_envs)
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4

    def __call__(self, rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
        self.ret = self.ret * self.gamma + rewards
        b_mean, b_var, n = float(self.ret.mean()), float(self.ret.var()), self.ret.shape[0]
        delta, tot = b_mean - self.mean, self.count + n
        self.mean += delta * n / tot
        self.var = (self.var * self.count + b_var * n + delta**2 * self.count * n / tot) / tot
        self.count = tot
        out = np.clip(rewards / math.sqrt(self.var + self.eps), -self.clip, self.clip)
        self.ret[dones] = 0.0
        return out.astype(np.float32)


# -- storage ----------------------------------------------------------------------------------------------
ROLLOUT_STORAGES = ("numpy", "torch")
"""Values of the ``rollout_storage`` toggle: where the rollout buffers are allocated and written."""

OBS_STORAGE_DTYPES = ("auto", "uint8", "float32", "float16")
"""Values of the ``obs_storage_dtype`` toggle (see :func:`make_obs_store`)."""

_NUMPY_DTYPES = {torch.float32: np.float32, torch.float16: np.float16, torch.uint8: np.uint8, torch.int64: np.int64}


class Buffer:
    """A preallocated array seen both as numpy (:attr:`np`) and torch (:attr:`t`), sharing one allocation.

    ``backend`` (the ``rollout_storage`` toggle) decides who allocates it (numpy: ``np.zeros``, whose pages become
    resident only as they are written; torch: ``torch.zeros``, resident at once) and how each step is written
    (numpy item assignment, or torch indexing, a few times slower). Readers use either view, zero-copy.
    """

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, backend: str):
        if backend not in ROLLOUT_STORAGES:
            raise ValueError(f"rollout_storage must be one of {ROLLOUT_STORAGES}, got {backend!r}")
        self.torch_writes = backend == "torch"
        if self.torch_writes:
            self.t = torch.zeros(shape, dtype=dtype)
            self.np: np.ndarray = self.t.numpy()
        else:
            self.np = np.zeros(shape, dtype=_NUMPY_DTYPES[dtype])
            self.t = torch.from_numpy(self.np)

    def put(self, index: Any, value: np.ndarray | torch.Tensor) -> None:
        """``buffer[index] = value`` through the backend's own indexing."""
        if self.torch_writes:
            self.t[index] = torch.as_tensor(value)
        else:
            self.np[index] = value.numpy() if isinstance(value, torch.Tensor) else value

    @property
    def nbytes(self) -> int:
        return int(self.np.nbytes)


class ArrayObsStore:
    """Network inputs stored as they are fed, ``(T, N, *shape)`` in ``dtype`` (float16 rounds vector inputs)."""

    def __init__(self, T: int, N: int, shape: tuple[int, ...], dtype: torch.dtype, backend: str):
        self.N, self.sample_shape, self.dtype = N, shape, dtype
        self.steps = T
        """Steps of the last rollout (a rollout cut at the budget fills fewer than ``T``)."""
        self.buf = Buffer((T, N, *shape), dtype, backend)
        self.flat = self.buf.t.view(T * N, *shape)

    def put(self, t: int, x: torch.Tensor) -> None:
        self.buf.put(t, x)

    def batch(self, idx: torch.Tensor) -> torch.Tensor:
        """Inputs of the samples with flat indices ``idx = t * N + n`` -> ``(B, *shape)`` (float16 widened)."""
        x = self.flat.index_select(0, idx)
        return x.float() if self.dtype == torch.float16 else x

    def at(self, t: int) -> torch.Tensor:
        """``(N, *shape)`` inputs of step ``t``."""
        x = self.buf.t[t]
        return x.float() if self.dtype == torch.float16 else x

    def tensor(self) -> torch.Tensor:
        """All inputs ``(T, N, *shape)`` of the last rollout (a view, float16 widened to a copy)."""
        x = self.buf.t[: self.steps]
        return x.float() if self.dtype == torch.float16 else x

    # The public API's ``Rollout.obs`` is a ``(T, N, *shape)`` tensor (API 1.0): a plugin may read ``shape``,
    # ``reshape`` or index it; those materialise the whole float tensor (the core itself uses batch/at).
    @property
    def shape(self) -> torch.Size:
        return self.tensor().shape

    def reshape(self, *shape: Any) -> torch.Tensor:
        return self.tensor().reshape(*shape)

    def __getitem__(self, index: Any) -> torch.Tensor:
        return self.tensor()[index]

    @property
    def nbytes(self) -> int:
        return self.buf.nbytes


class FrameObsStore:
    """Stacked uint8 frames ``(T, N, S, *frame)`` with every frame kept once (Atari: ``S = 4`` frames of 84x84).

    Consecutive observations of one env share ``S - 1`` frames; a step whose first ``S - 1`` frames equal the
    previous step's last ``S - 1`` (checked, not assumed: resets and autoresets break the chain) stores only its
    newest frame and an index row pointing at the others. Gathering a minibatch rebuilds the exact stacks, so this
    is lossless: ``~S`` times less memory than stacked uint8, ``4 S`` times less than SB3's float32 stacks.
    """

    def __init__(self, T: int, N: int, shape: tuple[int, ...], backend: str):
        self.N, self.S, self.frame_shape = N, shape[0], tuple(shape[1:])
        self.steps = T
        """Steps of the last rollout (a rollout cut at the budget fills fewer than ``T``)."""
        self.backend = backend
        self.index = np.zeros((T, N, self.S), dtype=np.int64)
        self.index_t = torch.from_numpy(self.index)
        self._frames = Buffer((T * N + 2 * N * self.S, *self.frame_shape), torch.uint8, backend)
        self.used = 0
        self._prev: np.ndarray | None = None
        self._prev_rows = np.zeros((N, self.S), dtype=np.int64)

    def _reserve(self, k: int) -> int:
        """First row of ``k`` new frames (the store grows when a rollout holds unusually many resets)."""
        if self.used + k > self._frames.np.shape[0]:
            old = self._frames
            self._frames = Buffer((2 * old.np.shape[0], *self.frame_shape), torch.uint8, self.backend)
            self._frames.np[: self.used] = old.np[: self.used]
        first = self.used
        self.used += k
        return first

    def put(self, t: int, x: torch.Tensor) -> None:
        obs = x.numpy()
        N, S = self.N, self.S
        if t == 0:
            self.used = 0
            chained = np.zeros(N, dtype=bool)
        else:
            assert self._prev is not None
            chained = (obs[:, :-1] == self._prev[:, 1:]).reshape(N, -1).all(1)
        rows = self._prev_rows
        n_new = int(chained.sum())
        if n_new:
            first = self._reserve(n_new)
            new_rows = np.arange(first, first + n_new)
            self._frames.put(new_rows, obs[chained, -1])
            rows[chained, :-1] = rows[chained, 1:]
            rows[chained, -1] = new_rows
        fresh = np.flatnonzero(~chained)
        if fresh.size:
            first = self._reserve(fresh.size * S)
            new_rows = np.arange(first, first + fresh.size * S)
            self._frames.put(new_rows, obs[fresh].reshape(-1, *self.frame_shape))
            rows[fresh] = new_rows.reshape(-1, S)
        self.index[t] = rows
        self._prev = obs.copy()

    def _gather(self, rows: torch.Tensor) -> torch.Tensor:
        """``rows (B, S)`` frame indices -> ``(B, S, *frame)`` uint8, contiguous (the CNN interleaves the stack's
        frames into channels-last as it converts them to float: one pass, :func:`~suite.algorithms.networks.
        _frames_to_float`)."""
        return self._frames.t.index_select(0, rows.reshape(-1)).view(*rows.shape, *self.frame_shape)

    def batch(self, idx: torch.Tensor) -> torch.Tensor:
        return self._gather(self.index_t.view(-1, self.S).index_select(0, idx))

    def at(self, t: int) -> torch.Tensor:
        return self._gather(self.index_t[t])

    def tensor(self) -> torch.Tensor:
        """All stacks ``(T, N, S, *frame)`` uint8 (a copy: every frame gathered into its stacks)."""
        T = self.steps
        rows = self.index_t[:T].reshape(-1, self.S)
        return self._gather(rows).view(T, self.N, self.S, *self.frame_shape)

    # The public API's ``Rollout.obs`` is a ``(T, N, *shape)`` tensor (API 1.0): a plugin may read ``shape``,
    # ``reshape`` or index it; those materialise the whole float tensor (the core itself uses batch/at).
    @property
    def shape(self) -> torch.Size:
        return self.tensor().shape

    def reshape(self, *shape: Any) -> torch.Tensor:
        return self.tensor().reshape(*shape)

    def __getitem__(self, index: Any) -> torch.Tensor:
        return self.tensor()[index]

    @property
    def nbytes(self) -> int:
        return self._frames.nbytes + int(self.index.nbytes)


ObsStore = ArrayObsStore | FrameObsStore


def resolve_obs_storage_dtype(kind: str, image: bool) -> str:
    """The concrete obs storage of ``obs_storage_dtype`` for an observation kind.

    ``auto``: images as ``uint8`` frames kept once, vectors as ``float32`` (both exact). ``float32``/``float16``:
    the stacked network inputs in that dtype (exact for frames; float16 rounds vector inputs, so with it the
    policy also acts on the rounded inputs, and pi_old is computed from exactly what the update sees).

    Raises:
        UserError: ``uint8`` for vector observations (floats cannot be stored as bytes without loss).
    """
    if kind not in OBS_STORAGE_DTYPES:
        raise UserError(f"obs_storage_dtype must be one of {', '.join(OBS_STORAGE_DTYPES)}, got {kind!r}")
    if kind == "auto":
        return "uint8" if image else "float32"
    if kind == "uint8" and not image:
        raise UserError("obs_storage_dtype='uint8' needs image observations (Atari frames); use float32 or float16")
    return kind


def make_obs_store(T: int, N: int, x0: torch.Tensor, image: bool, kind: str, backend: str) -> ObsStore:
    """An observation store for ``T`` steps of ``N`` envs whose network inputs look like ``x0 (N, *shape)``."""
    shape = tuple(x0.shape[1:])
    resolved = resolve_obs_storage_dtype(kind, image)
    if resolved == "uint8":
        return FrameObsStore(T, N, shape, backend)
    return ArrayObsStore(T, N, shape, torch.float16 if resolved == "float16" else torch.float32, backend)


# -- rollout ----------------------------------------------------------------------------------------------
@dataclass
class Rollout:
    """One batch of experience, time-major. Arrays are views of the collector's buffers (valid until the next
    collection)."""

    obs: ObsStore
    """Network inputs (normalised if enabled): ``obs.batch(flat_idx)``, ``obs.at(t)`` (no copy of the rollout);
    ``obs.tensor()`` (also ``obs.shape``, ``obs.reshape(...)``, ``obs[...]``) is the ``(T, N, *shape)`` tensor."""
    actions: torch.Tensor
    """``(T, N, *action_shape)`` sampled actions (before clipping to the env's bounds)."""
    log_probs: np.ndarray
    """``(T, N)`` log pi_old(a_t | s_t)."""
    values: np.ndarray
    """``(T, N, H)`` value estimates of every head."""
    rewards: np.ndarray
    """``(T, N)`` training rewards (normalised/clipped, time-limit bootstrapped)."""
    dones: np.ndarray
    """``(T, N)`` 1.0 where an episode ended at step t."""
    last_values: np.ndarray
    """``(N, H)`` values of the observation after the last step."""

    @property
    def n_samples(self) -> int:
        return self.rewards.size

    def obs_batch(self, idx: torch.Tensor) -> torch.Tensor:
        """Network inputs ``(B, *shape)`` of the samples with flat (time-major) indices ``idx``."""
        return self.obs.batch(idx)

    def obs_all(self, chunk: int = 1024) -> Iterator[tuple[slice, torch.Tensor]]:
        """``(slice of flat indices, inputs)`` over the whole rollout in chunks (no full float copy of images)."""
        n = self.n_samples
        for s in range(0, n, chunk):
            yield slice(s, min(s + chunk, n)), self.obs.batch(torch.arange(s, min(s + chunk, n)))


class RolloutCollector:
    """Steps ``N`` envs for ``T`` steps with one policy call per step, recording finished episodes.

    With a :class:`~suite.accel.mlp.PolicyKernel` the policy call is the hand-derived inference (no module
    or autograd overhead); otherwise the module's :meth:`ActorCritic.act`.
    """

    def __init__(
        self,
        ctx: TrialContext,
        envs: gym.vector.VectorEnv,
        policy: ActorCritic,
        n_steps: int,
        gamma: float,
        normalize_reward: bool = False,
        *,
        storage: str = "numpy",
        obs_dtype: str = "auto",
        kernel: PolicyKernel | None = None,
    ):
        self.ctx, self.envs, self.policy, self.kernel = ctx, envs, policy, kernel
        self.n_envs = envs.num_envs
        self.n_steps, self.gamma = n_steps, gamma
        self.reward_norm = RewardNormalizer(self.n_envs, gamma) if normalize_reward else None
        self.update_obs_stats = policy.obs_rms is not None
        self.round_half = resolve_obs_storage_dtype(obs_dtype, policy.image) == "float16" and not policy.image
        obs, _ = envs.reset(seed=ctx.train_seed)
        self.obs = obs
        T, N = n_steps, self.n_envs
        x0 = policy.prepare_obs(obs)
        self.obs_store = make_obs_store(T, N, x0, policy.image, obs_dtype, storage)
        H = max(policy.cfg.n_value_heads, 1)
        act_dtype = torch.long if policy.discrete else torch.float32
        self.buf_actions = Buffer((T, N, *policy.action_shape), act_dtype, storage)
        self.buf_logp = Buffer((T, N), torch.float32, storage)
        self.buf_values = Buffer((T, N, H), torch.float32, storage)
        self.buf_rewards = Buffer((T, N), torch.float32, storage)
        self.buf_dones = Buffer((T, N), torch.float32, storage)
        self.has_critic = policy.vf is not None
        self.device = None if policy.device.type == "cpu" else policy.device
        """The policy's device when it is not the CPU (the buffers stay on the CPU; inputs go there, outputs back)."""
        self.clock: Any = NULL_CLOCK
        """The lap clock (:class:`suite.profile.speed.LapClock` under ``suite profile speed``): ``lap(name)`` after each
        part of a step."""

    def inputs(self, obs: np.ndarray, update_stats: bool = False) -> torch.Tensor:
        """Network inputs of raw observations (float16-rounded when the store keeps float16)."""
        x = self.policy.prepare_obs(obs, update_stats=update_stats)
        return x.half().float() if self.round_half else x

    def act(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(actions, log-probs ``(N,)``, values ``(N, H)`` or None) for inputs ``x``."""
        if self.kernel is not None:
            params, values = self.kernel.infer(x)
            actions, logp = self.kernel.sample(params)
            return actions, logp, values
        return policy_act(self.policy, x, self.device)

    def values(self, x: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            if self.device is None:
                return self.policy.values(x).numpy()
            return self.policy.values(x.to(self.device)).cpu().numpy()

    @in_kernel_mode(lambda self: self.kernel is not None)
    def collect(self, max_samples: int | None = None) -> Rollout:
        """Fill the buffers with ``n_steps`` steps of every env (fewer when ``max_samples``, the budget left, is
        smaller: ``ceil(max_samples / n_envs)`` steps) and return them as a :class:`Rollout` (views of the buffers)."""
        policy, envs, ctx, clock = self.policy, self.envs, self.ctx, self.clock
        step0 = ctx.steps
        N = self.n_envs
        T = self.n_steps if max_samples is None else max(1, min(self.n_steps, -(-max_samples // N)))
        to_env = policy.head.to_env
        actions_np, logp_np, values_np = self.buf_actions, self.buf_logp, self.buf_values
        for t in range(T):
            x = self.inputs(self.obs, update_stats=self.update_obs_stats)
            actions, logp, values = self.act(x)
            clock.lap("inference", N)
            obs, rewards, terminated, truncated, info = envs.step(to_env(actions.numpy()))
            clock.lap("env_step")
            dones = terminated | truncated
            rewards = np.asarray(rewards, dtype=np.float32)
            if self.reward_norm is not None:
                rewards = self.reward_norm(rewards, dones)
            if self.has_critic and truncated.any():
                # Time-limit truncation is not a real end: bootstrap from V(final obs) (SB3 issue 633).
                mask, final = final_observations(info, N)
                boot = truncated & ~terminated & mask
                if boot.any() and final is not None:
                    rewards[boot] += self.gamma * self.values(self.inputs(final[boot])).mean(-1)
            self.obs_store.put(t, x)
            actions_np.put(t, actions)
            logp_np.put(t, logp)
            if values is not None:
                values_np.put(t, values)
            self.buf_rewards.put(t, rewards)
            self.buf_dones.put(t, dones)
            if dones.any():
                ep_mask, ep_ret, ep_len = finished_episodes(info, N)
                if ep_mask.any():
                    ctx.record_episodes(step0 + (t + 1) * N, ep_ret[ep_mask], ep_len[ep_mask])
            self.obs = obs
            clock.lap("storage")
        ctx.steps = step0 + T * N
        H = self.buf_values.np.shape[-1]
        last = np.zeros((N, H), dtype=np.float32)
        if self.has_critic:
            last = self.values(self.inputs(self.obs))
            clock.lap("inference", N)
        self.obs_store.steps = T
        return Rollout(
            self.obs_store, self.buf_actions.t[:T], self.buf_logp.np[:T], self.buf_values.np[:T],
            self.buf_rewards.np[:T], self.buf_dones.np[:T], last,
        )  # fmt: skip


def micro_batches(b: int, k: int) -> list[tuple[int, int]]:
    """``[(lo, hi), ...]``: ``k`` contiguous slices of ``b`` rows as equal as possible (the first ones one longer),
    empty ones left out (``grad_accumulation`` larger than a short minibatch)."""
    return [(int(q[0]), int(q[-1]) + 1) for q in np.array_split(np.arange(b), k) if len(q)]


def policy_act(
    policy: ActorCritic, x: torch.Tensor, device: torch.device | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """:meth:`ActorCritic.act` on CPU inputs ``x``: on ``device`` (None: the CPU, nothing moves), results on the CPU."""
    if device is None:
        return policy.act(x)
    actions, logp, values = policy.act(x.to(device))
    return actions.cpu(), logp.cpu(), None if values is None else values.cpu()


class NullClock:
    """The lap clock of every trial that is not being profiled: :meth:`lap` does nothing. The loops call ``lap`` at
    each part of a step unconditionally; ``suite profile speed`` puts a real one
    (:class:`suite.profile.speed.LapClock`) on the trial context instead. A call of this no-op method costs a few tens
    of nanoseconds (``docs/accel.md`` counts the calls per step and puts them against a step's time)."""

    __slots__ = ()

    def lap(self, name: str, samples: int = 0) -> None:
        """Charge the time since the previous lap to ``name`` (here: nothing)."""

    def attach(self, trainer: Any) -> None:
        """Told which trainer it times (here: nothing)."""


NULL_CLOCK = NullClock()
"""The one :class:`NullClock`."""


def attach_clock(ctx: Any, trainer: Any) -> Any:
    """The lap clock ``suite profile speed`` put on the trial context (``ctx.clock``), told which trainer it times; the
    :data:`NULL_CLOCK` in every other trial."""
    clock = getattr(ctx, "clock", None) or NULL_CLOCK
    clock.attach(trainer)
    return clock


# -- optimisation -----------------------------------------------------------------------------------------
@dataclass
class Minibatch:
    """Flat tensors for one gradient step (or one micro-batch of it). ``B`` = samples in it."""

    obs: torch.Tensor
    actions: torch.Tensor
    old_log_probs: torch.Tensor
    """``(B,)``"""
    old_values: torch.Tensor
    """``(B, H)``"""
    advantages: torch.Tensor
    """``(B,)`` ready to use (normalised over the whole minibatch when the config asks for it)."""
    returns: torch.Tensor
    """``(B,)`` or ``(B, H)`` value targets."""
    extra: dict[str, torch.Tensor] = field(default_factory=dict)
    weight: float = 1.0
    """This micro-batch's share of its minibatch (``grad_accumulation``): losses that are means over the
    micro-batch are multiplied by it, so the accumulated gradient is the whole minibatch's."""

    def to(self, device: torch.device) -> Minibatch:
        """The same (micro-)batch with every tensor on ``device`` (a specification running off the CPU)."""
        return Minibatch(
            self.obs.to(device), self.actions.to(device), self.old_log_probs.to(device), self.old_values.to(device),
            self.advantages.to(device), self.returns.to(device), {k: v.to(device) for k, v in self.extra.items()},
            self.weight,
        )  # fmt: skip


class SampleTable:
    """A rollout's per-sample training fields as the columns of one float32 numpy matrix ``(n, C)``, so that a
    minibatch is one gather instead of six: old log-probs, advantages, value targets, old values, actions (integer
    actions are exact in float32 below 2^24) and, for float32 vector observations, the observations themselves.
    The per-minibatch work on these small arrays is numpy's (a call costs a fraction of a torch call's dispatch);
    the minibatch's fields are zero-copy torch views of the gathered rows.

    Args:
        rollout: the collected rollout (``n = T * N`` samples, time-major flat indices).
        advantages: ``(T, N)`` raw advantages; returns: ``(T, N)`` or ``(T, N, H)`` value targets.
    """

    def __init__(self, rollout: Rollout, advantages: np.ndarray, returns: np.ndarray):
        n = rollout.n_samples
        store = rollout.obs
        self.obs_packed = isinstance(store, ArrayObsStore) and store.dtype == torch.float32 and len(store.sample_shape) == 1
        self.discrete = not torch.is_floating_point(rollout.actions)
        actions = rollout.actions.reshape(n, -1).numpy()
        self.action_shape = tuple(rollout.actions.shape[2:])
        self.returns_2d = returns.ndim == 3
        columns = [
            rollout.log_probs.reshape(n, 1),
            advantages.reshape(n, 1),
            returns.reshape(n, -1),
            rollout.values.reshape(n, -1),
            actions.astype(np.float32) if self.discrete else actions,
        ]
        if self.obs_packed:
            assert isinstance(store, ArrayObsStore)
            columns.append(store.buf.np.reshape(-1, *store.sample_shape)[:n])
        widths = [c.shape[1] for c in columns]
        edges = np.cumsum([0, *widths])
        self.slices = [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]
        self.table = np.concatenate(columns, axis=1, dtype=np.float32)
        self.rollout = rollout
        self.n = n
        """Samples (rows)."""
        self.row_bytes = self.table.shape[1] * self.table.itemsize

    def gather(self, idx: np.ndarray) -> np.ndarray:
        """Rows ``(B, C)`` of the samples ``idx`` (``take``: the same rows as ``table[idx]``, without fancy indexing's
        set-up)."""
        return self.table.take(idx, 0)

    def advantages(self, rows: np.ndarray) -> np.ndarray:
        return rows[:, self.slices[1].start]

    def minibatch(self, rows: np.ndarray, idx: np.ndarray, advantages: np.ndarray, weight: float) -> Minibatch:
        """A :class:`Minibatch` (torch views) from gathered ``rows`` of the samples ``idx``, with ready ``advantages``."""
        s_logp, _, s_ret, s_val, s_act = self.slices[:5]
        if self.discrete:
            actions = torch.from_numpy(rows[:, s_act.start].astype(np.int64))
        else:
            actions = torch.from_numpy(rows[:, s_act]).reshape(-1, *self.action_shape)
        returns = rows[:, s_ret] if self.returns_2d else rows[:, s_ret.start]
        obs = torch.from_numpy(rows[:, self.slices[5]]) if self.obs_packed else self.rollout.obs_batch(torch.from_numpy(idx))
        return Minibatch(
            obs, actions, torch.from_numpy(rows[:, s_logp.start]), torch.from_numpy(rows[:, s_val]),
            torch.from_numpy(advantages), torch.from_numpy(returns), {}, weight,
        )  # fmt: skip


class GradientStepper:
    """Adam steps with global-norm clipping on flat parameters, recording the grad norm and the variance of the
    gradient across the minibatches of one update (trace of the covariance: E||g - mean g||^2), which the
    stability report uses.

    The parameters are packed into one buffer (:class:`~suite.accel.flat.FlatParameters`): the gradient
    statistics, the clip and Adam (:class:`~suite.accel.flat.FlatAdam`, torch's fused kernel) are one
    call each, whether the gradient came from autograd or from a hand-derived backward.
    """

    def __init__(self, params: list[nn.Parameter], learning_rate: Schedule, max_grad_norm: float, eps: float = 1e-5):
        self.flat = FlatParameters(list(params))
        self.params = self.flat.params
        self.adam = FlatAdam(self.flat, eps)
        self.learning_rate = learning_rate
        self.max_grad_norm = max_grad_norm
        self._sum = torch.zeros_like(self.flat.grad)
        self.begin_update(0.0)

    def begin_update(self, progress: float) -> float:
        self.lr = self.learning_rate(progress)
        self._n = 0
        self._sum.zero_()
        self._sumsq = 0.0
        self._norms: list[float] = []
        return self.lr

    def zero_grad(self) -> None:
        self.flat.zero_grad()

    def backward(self, loss: torch.Tensor) -> None:
        """Autograd: add ``d loss / d params`` to the (flat) gradients."""
        if not torch.isfinite(loss):
            raise Diverged(f"non-finite loss {float(loss.detach())}")
        loss.backward()

    def apply(self) -> None:
        """Record the gradient's statistics, clip its global norm, take the Adam step."""
        g = self.flat.grad
        sq = float(torch.dot(g, g))
        if not math.isfinite(sq):
            raise Diverged("non-finite gradient")
        self._sum.add_(g)
        self._sumsq += sq
        self._n += 1
        norm = math.sqrt(sq)
        self._norms.append(norm)
        if self.max_grad_norm and self.max_grad_norm > 0:
            coef = self.max_grad_norm / (norm + 1e-6)  # torch.nn.utils.clip_grad_norm_'s rule
            if coef < 1.0:
                g.mul_(coef)
        self.adam.step(self.lr)

    def step(self, loss: torch.Tensor) -> None:
        """One Adam step on ``loss`` by autograd."""
        self.zero_grad()
        self.backward(loss)
        self.apply()

    def snapshot(self) -> Callable[[], None]:
        """Everything :meth:`zero_grad`, :meth:`backward` and :meth:`apply` change (parameters, gradients, Adam's moments
        and step count, this update's gradient statistics); the returned call puts it all back, bit for bit
        (``suite profile speed`` times its limit on the trainer's own network mid-training)."""
        flat, adam = self.flat, self.adam
        tensors = [flat.data, flat.grad, adam.exp_avg, adam.exp_avg_sq, adam.step_count, self._sum]
        saved = [t.clone() for t in tensors]
        scalars = (self._sumsq, self._n, list(self._norms))

        def restore() -> None:
            for t, v in zip(tensors, saved, strict=True):
                t.copy_(v)
            self._sumsq, self._n, self._norms = scalars[0], scalars[1], list(scalars[2])

        return restore

    def check_finite(self) -> None:
        """Raise :class:`Diverged` when a parameter became NaN/inf."""
        data = self.flat.data  # on the CPU numpy's test of the buffer, a fraction of torch's per-call cost
        if not (np.isfinite(data.numpy()).all() if data.device.type == "cpu" else bool(torch.isfinite(data).all())):
            raise Diverged("a parameter became non-finite")

    def end_update(self) -> dict[str, float]:
        """``grad_norm`` (mean pre-clip norm) and ``grad_var`` across this update's minibatches."""
        if not self._n:
            return {"grad_norm": float("nan"), "grad_var": float("nan")}
        mean_sq = float((self._sum / self._n).square().sum())
        grad_norm = float(fast_mean(np.array(self._norms)))  # np.mean(self._norms), bitwise
        return {"grad_norm": grad_norm, "grad_var": max(self._sumsq / self._n - mean_sq, 0.0)}


def check_finite_params(module: nn.Module) -> None:
    """Raise :class:`Diverged` naming the first parameter of ``module`` that holds a NaN or an infinity (the public
    API's check for plugins; the shared core's own trainers check their flat parameters in one call)."""
    for name, p in module.named_parameters():
        if not torch.isfinite(p).all():
            raise Diverged(f"parameter {name} became non-finite")


def explained_variance(y_pred: np.ndarray, y_true: np.ndarray) -> float:
    """1 - Var[y - y_pred] / Var[y]; NaN when Var[y] = 0 (``np.var``'s values, by :func:`fast_var`)."""
    var_y = float(fast_var(y_true))
    return float("nan") if var_y == 0 else 1.0 - float(fast_var(y_true - y_pred)) / var_y


def net_config(cfg: Any, **overrides: Any) -> NetConfig:
    """Pick the :class:`NetConfig` fields out of an algorithm config (same names), with overrides."""
    kw = {f: getattr(cfg, f) for f in NetConfig.__dataclass_fields__ if hasattr(cfg, f)}
    kw.update(overrides)
    return NetConfig(**kw)
