"""Policy and value networks shared by every algorithm of the suite.

One :class:`ActorCritic` module covers the MLP (vector observations) and Nature-CNN (Atari frames) cases,
with a pluggable action head (categorical, diagonal Gaussian, Beta). Distributions are computed with plain
tensor ops rather than ``torch.distributions`` objects: building a distribution object per call costs more
than the maths on the tiny batches of classic-control envs, and the rollout hot path calls it every step.

Shapes: ``B`` is a batch of observations, ``A`` the action dimension (continuous) or 1 (discrete),
``H`` the number of value heads (1 except for value ensembles).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

LOG_2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class NetConfig:
    """Network shape options, read from an algorithm config."""

    pi_arch: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the policy MLP (ignored before the CNN's linear head: SB3 CnnPolicy uses none)."""
    vf_arch: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the value MLP."""
    activation: str = "tanh"
    """``tanh`` or ``relu``."""
    ortho_init: bool = True
    """Orthogonal init with SB3's gains (sqrt 2 hidden, 0.01 policy head, 1 value head)."""
    log_std_init: float = 0.0
    """Initial state-independent log std of the Gaussian head."""
    action_dist: str = "auto"
    """``auto`` (categorical for discrete, Gaussian for boxes), ``gaussian`` or ``beta`` (boxes only)."""
    n_value_heads: int = 1
    """Value heads on the shared value trunk (an ensemble for variance estimates); 0 = no critic."""
    normalize_obs: bool = False
    """Running mean/std observation normalisation (clip 10), like SB3's VecNormalize."""


ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


_SERIAL_VAR_MAX = 32768
"""ATen's ``GRAIN_SIZE``: up to this many elements torch's full-reduction variance runs as one serial loop, whatever
the thread count (:meth:`RunningMeanStd._update_scalar`)."""


class RunningMeanStd(nn.Module):
    """Running mean and variance (parallel algorithm of Chan et al.), kept as buffers so they are saved.

    The arithmetic runs in numpy on views of the float64 buffers: per observation batch it is ~15 elementwise
    operations on vectors of a few dozen entries, where a torch call's dispatch costs more than the maths. It is the
    same IEEE arithmetic, operation for operation, as a torch form, so results are bit-identical
    (``tests/test_networks.py`` compares the two):
    numpy's row-ordered sum over the batch axis, divided by the count, is torch's mean; the batch variance stays
    torch's (a Welford reduction numpy has no twin of). One feature (TextMatch-v0's observation) runs on Python floats
    instead, torch's variance included (there a full reduction with a serial loop: :meth:`_update_scalar`).
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: tuple[int, ...], epsilon: float = 1e-4):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float64))

    def update(self, x: torch.Tensor) -> None:
        """Fold a batch ``x: (B, *shape)`` into the statistics."""
        x64 = x.numpy().astype(np.float64)
        b_count = x64.shape[0]
        if self._buffers["mean"].numel() == 1 and 0 < b_count <= _SERIAL_VAR_MAX:  # type: ignore[union-attr]
            self._update_scalar(x64, b_count)
            return
        b_mean = np.add.reduce(x64, 0) / b_count  # numpy's mean, summing the rows in order: torch's mean, bit for bit
        b_var = torch.from_numpy(x64).var(0, unbiased=False).numpy()
        mean, var, count = self.mean.numpy(), self.var.numpy(), self.count.item()  # a Python float: IEEE double
        delta = b_mean - mean
        tot = count + b_count
        mean += delta * b_count / tot
        m2 = var * count + b_var * b_count + np.square(delta) * count * b_count / tot
        np.divide(m2, tot, out=var)
        self.count.numpy()[...] = tot

    def _update_scalar(self, x64: np.ndarray, b_count: int) -> None:
        """:meth:`update` for one feature, its ~15 numpy calls on 1-entry arrays as Python floats (IEEE doubles: the
        same operations in the same order). Torch's variance of a ``(B, 1)`` batch is a full reduction
        (``std_var_all_cpu``): the mean, then ``sum (x - mean)^2`` in one serial double loop while the batch is at
        most one parallel grain (:data:`_SERIAL_VAR_MAX`), then ``/ B``: the loop below, a few times faster on the
        small batches of a rollout step (grpo-pairwise on TextMatch-v0 takes one per step); bit-identical (tested)."""
        b_mean = float(np.add.reduce(x64, 0)[0]) / b_count  # as update(): numpy's sum, torch's mean
        s = 0.0
        for v in x64.ravel().tolist():
            d = v - b_mean
            s += d * d
        b_var = s / b_count
        buffers = self._buffers  # not nn.Module.__getattr__ (slow per lookup)
        mean, var, count_t = buffers["mean"], buffers["var"], buffers["count"]
        assert mean is not None and var is not None and count_t is not None
        m, v0, count = mean.item(), var.item(), count_t.item()
        delta = b_mean - m
        tot = count + b_count
        mean.numpy().reshape(-1)[0] = m + delta * b_count / tot
        var.numpy().reshape(-1)[0] = (v0 * count + b_var * b_count + delta * delta * count * b_count / tot) / tot
        count_t.numpy()[...] = tot

    def normalize(self, x: torch.Tensor, clip: float = 10.0) -> torch.Tensor:
        """``clip((x - mean) / sqrt(var + 1e-8), -clip, clip)`` as float32 (computed in float64)."""
        buffers = self._buffers  # not nn.Module.__getattr__ (slow per lookup)
        mean, var = buffers["mean"], buffers["var"]
        assert mean is not None and var is not None
        if mean.numel() == 1:  # one feature: the same float64 operations on Python floats (faster than numpy)
            sd, m = math.sqrt(var.item() + 1e-8), mean.item()
            ys: list[float] = []
            for v in x.numpy().ravel().tolist():
                r: float = (v - m) / sd
                if r > clip:  # np.minimum / np.maximum; a NaN stays NaN
                    r = clip
                elif r < -clip:
                    r = -clip
                ys.append(r)
            return torch.from_numpy(np.array(ys, dtype=np.float64).astype(np.float32).reshape(x.shape))
        std = np.sqrt(var.numpy() + 1e-8)
        y = (x.numpy() - mean.numpy()) / std
        np.minimum(y, clip, out=y)
        np.maximum(y, -clip, out=y)
        return torch.from_numpy(y.astype(np.float32))


def mlp(sizes: list[int], activation: type[nn.Module], ortho: bool, out_gain: float) -> nn.Sequential:
    """Linear layers ``sizes[0] -> ... -> sizes[-1]`` with ``activation`` between them (none after the last)."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        lin = nn.Linear(sizes[i], sizes[i + 1])
        last = i == len(sizes) - 2
        if ortho:
            nn.init.orthogonal_(lin.weight, gain=out_gain if last else math.sqrt(2))
            nn.init.zeros_(lin.bias)
        layers.append(lin)
        if not last:
            layers.append(activation())
    return nn.Sequential(*layers)


def _mlp_plan(seq: nn.Module) -> list[tuple[str, Any, Any]]:
    """The layers of an ``nn.Sequential`` as :func:`_run_mlp_plan` runs them: ``("linear", bias, W^T)`` (detached
    views of the parameters, so in-place updates show through), ``("tanh" | "relu", None, None)`` or ``("module",
    m, None)`` for anything else."""
    plan: list[tuple[str, Any, Any]] = []
    for m in seq.children():
        if isinstance(m, nn.Linear):
            plan.append(("linear", m.bias.detach(), m.weight.detach().t()))
        elif isinstance(m, nn.Tanh):
            plan.append(("tanh", None, None))
        elif isinstance(m, nn.ReLU):
            plan.append(("relu", None, None))
        else:
            plan.append(("module", m, None))
    return plan


def _run_mlp_plan(plan: list[tuple[str, Any, Any]], x: torch.Tensor) -> torch.Tensor:
    """:func:`_mlp_no_grad` on a plan made once: the same calls, without walking the modules and looking up their
    parameters at every call."""
    for kind, a, b in plan:
        if kind == "linear":
            x = torch.addmm(a, x, b)
        elif kind == "tanh":
            x = x.tanh_()
        elif kind == "relu":
            x = x.relu_()
        else:
            x = a(x)
    return x


def _mlp_no_grad(seq: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``seq(x)`` for an ``nn.Sequential`` of Linear/Tanh/ReLU layers without the module call overhead (the same
    kernels: ``F.linear`` is ``addmm`` on 2-D inputs), for inference under ``torch.no_grad``."""
    for m in seq.children():
        if isinstance(m, nn.Linear):
            x = torch.addmm(m.bias, x, m.weight.t())
        elif isinstance(m, nn.Tanh):
            x = x.tanh_()
        elif isinstance(m, nn.ReLU):
            x = x.relu_()
        else:
            x = m(x)
    return x


_FRAME_BUFFERS: dict[tuple[Any, ...], torch.Tensor] = {}
"""Float buffers ``(B, H, W, C)`` by shape for :func:`_frames_to_float` (``reuse=True``): a minibatch's 7 MB of
float frames written into pages already mapped instead of new ones (a fresh buffer's page faults cost more than
the conversion itself). At most :data:`_FRAME_BUFFER_SHAPES` shapes are kept."""

_FRAME_BUFFER_SHAPES = 4


def _frames_to_float(x: torch.Tensor, reuse: bool = False) -> torch.Tensor:
    """Frames ``(B, C, H, W)`` (uint8, any memory layout) as channels-last float32 in [0, 1]: the channels
    interleaved and converted in one pass (``torch.stack`` of the ``C`` planes into a float ``(B, H, W, C)`` buffer;
    faster than a channels-last uint8 copy and a conversion after it), then scaled in place. The same values
    and layout as ``x.contiguous(memory_format=torch.channels_last).float().div_(255)``. ``reuse``: write into a
    kept buffer (:data:`_FRAME_BUFFERS`); only for a caller that neither keeps the result nor lets autograd save it
    (the result is overwritten by the next call of the same shape). Float inputs (float32/float16 storage) are
    never written to; a single channel (whose two layouts are the same memory, told apart by strides alone) takes
    the copy-then-convert form as before."""
    if x.is_floating_point() or x.shape[1] == 1:
        x = x.contiguous(memory_format=torch.channels_last)
        return x.float().div_(255.0) if x.dtype != torch.float32 else x / 255.0
    B, C, H, W = x.shape
    shape = (B, H, W, C)
    key = (*shape, x.device)
    buf = _FRAME_BUFFERS.get(key) if reuse else None
    if buf is None:
        buf = torch.empty(shape, device=x.device)
        if reuse:
            if len(_FRAME_BUFFERS) >= _FRAME_BUFFER_SHAPES:
                del _FRAME_BUFFERS[next(iter(_FRAME_BUFFERS))]
            _FRAME_BUFFERS[key] = buf
    torch.stack(x.unbind(1), dim=-1, out=buf)
    return buf.permute(0, 3, 1, 2).div_(255.0)


class _FirstConv(torch.autograd.Function):
    """``conv2d(frames / 255)`` that keeps the frames (uint8: 1 byte a pixel) for the weight gradient instead of the
    float input autograd would keep (4 bytes), and converts them again in backward. The same kernels as autograd's
    (``convolution_backward`` with the input gradient off), so the same numbers; 21 MB less held per 256 frames."""

    @staticmethod
    def forward(ctx: Any, frames: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, stride: int) -> torch.Tensor:
        ctx.save_for_backward(frames, weight)
        ctx.stride = stride
        return F.conv2d(_frames_to_float(frames, reuse=True), weight, bias, stride)  # no graph inside forward

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[None, torch.Tensor, torch.Tensor, None]:
        frames, weight = ctx.saved_tensors
        s = ctx.stride
        x = _frames_to_float(frames, reuse=True)
        _, grad_w, grad_b = torch.ops.aten.convolution_backward(
            grad_out, x, weight, [weight.shape[0]], [s, s], [0, 0], [1, 1], False, [0, 0], 1, [False, True, True]
        )
        return None, grad_w, grad_b, None


class NatureCNN(nn.Module):
    """Mnih et al. 2015 trunk; input uint8 frames ``(B, C, 84, 84)``, output ``(B, 512)``.

    Lean and fast on CPU without changing the maths: the frames go channels-last as they are converted to float
    (oneDNN's convolutions need no padded reorder of the 4-channel input: faster steps and a lower peak,
    ``docs/accel.md``), the conversion and the /255 happen in one float buffer that
    autograd does not keep and the next minibatch reuses (:class:`_FirstConv` keeps the uint8 frames;
    :func:`_frames_to_float`), and the ReLUs are in place (no second copy of each activation; autograd needs only
    their outputs).
    """

    def __init__(self, in_channels: int, ortho: bool = True):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, 32, 8, stride=4),
            nn.ReLU(inplace=True),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(inplace=True),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(inplace=True),
            nn.Flatten(),
            nn.Linear(3136, 512),
            nn.ReLU(inplace=True),
        )
        if ortho:
            for m in self.net:
                if isinstance(m, nn.Conv2d | nn.Linear):
                    nn.init.orthogonal_(m.weight, gain=math.sqrt(2))
                    nn.init.zeros_(m.bias)  # type: ignore[arg-type]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv: nn.Conv2d = self.net[0]  # type: ignore[assignment]
        if torch.is_grad_enabled() and conv.weight.requires_grad:
            h = _FirstConv.apply(x, conv.weight, conv.bias, conv.stride[0])
        else:
            h = conv(_frames_to_float(x, reuse=not torch.is_grad_enabled()))
        return self.net[1:](h)


# -- critics of ppo-adaptive-clip's options (document 000) ----------------------------------------------------
class RecurrentCritic(nn.Module):
    """An LSTM cell and a linear value head. Maps features ``(B, F)`` to values ``(B, H)`` from the memory in
    :attr:`memory` (``(h, c)``, each ``(B, hidden)``; zeros when None) and leaves the new memory in
    :attr:`last_state`. The trainer sets the memory: sequentially over a rollout, or per sample (the state
    stored at that step, so one minibatch step backpropagates through one cell step, like R2D2's stored state).
    """

    def __init__(self, in_features: int, hidden: int, n_out: int):
        super().__init__()
        self.cell = nn.LSTMCell(in_features, hidden)
        self.head = nn.Linear(hidden, n_out)
        nn.init.orthogonal_(self.head.weight, gain=1.0)
        nn.init.zeros_(self.head.bias)
        self.hidden = hidden
        self.memory: tuple[torch.Tensor, torch.Tensor] | None = None
        self.last_state: tuple[torch.Tensor, torch.Tensor] | None = None

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        if self.memory is None:
            zeros = f.new_zeros((f.shape[0], self.hidden))
            state = (zeros, zeros)
        else:
            state = self.memory
        h, c = self.cell(f, state)
        self.last_state = (h, c)
        return self.head(h)


class PopArtValue(nn.Module):
    """PopArt (van Hasselt et al. 2016, arXiv 1602.07714) around a critic whose last layer is ``last``.

    The inner critic predicts normalised values ``v_n``; this module returns ``mu + sigma * v_n`` (return
    units, so GAE and truncation bootstrapping see real values), with the gradient into ``v_n`` divided by
    ``sigma ** 2``: an MSE against raw returns then has exactly the gradient of the MSE in normalised units,
    which is what PopArt trains (``d/dv_n (mu + sigma v_n - R)^2 / sigma^2 = 2 (v_n - (R - mu) / sigma)``).
    """

    mu: torch.Tensor
    nu: torch.Tensor
    initialised: torch.Tensor

    def __init__(self, inner: nn.Module, last: nn.Linear, beta: float):
        super().__init__()
        self.inner, self.last, self.beta = inner, last, beta
        n = last.out_features
        self.register_buffer("mu", torch.zeros(n))
        self.register_buffer("nu", torch.ones(n))  # second moment
        self.register_buffer("initialised", torch.zeros((), dtype=torch.bool))

    @property
    def sigma(self) -> torch.Tensor:
        return torch.sqrt(torch.clamp(self.nu - self.mu.square(), min=1e-4))

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        sigma = self.sigma
        v = self.mu + sigma * self.inner(f)
        return v.detach() + (v - v.detach()) / sigma.square()

    @torch.no_grad()
    def update_stats(self, targets: torch.Tensor) -> None:
        """Move the moments towards a batch of value targets ``(B,)`` and rescale the last layer ("Art")."""
        mu_old, sigma_old = self.mu.clone(), self.sigma
        b_mean, b_sq = targets.mean(), targets.square().mean()
        beta = 1.0 if not bool(self.initialised) else self.beta
        self.mu.mul_(1 - beta).add_(beta * b_mean)
        self.nu.mul_(1 - beta).add_(beta * b_sq)
        self.initialised.fill_(True)
        sigma_new = self.sigma
        self.last.weight.mul_((sigma_old / sigma_new).unsqueeze(-1))
        self.last.bias.copy_((sigma_old * self.last.bias + mu_old - self.mu) / sigma_new)


class ActionHead:
    """Interprets the policy network's raw output ``params: (B, P)`` as a distribution over actions."""

    n_params: int

    def sample(self, params: torch.Tensor, extra: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def mode(self, params: torch.Tensor, extra: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def log_prob(self, params: torch.Tensor, extra: torch.Tensor | None, actions: torch.Tensor) -> torch.Tensor:
        """``(B,)`` log-probabilities (summed over action dimensions)."""
        raise NotImplementedError

    def entropy(self, params: torch.Tensor, extra: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        """Map sampled actions to what the env accepts (clipping, rescaling)."""
        return actions


class CategoricalHead(ActionHead):
    def __init__(self, n: int):
        self.n_params = n

    def sample(self, params, extra):
        # Gumbel-max (argmax of logits + Gumbel noise, Gumbel = -log E with E ~ Exp(1)): the same distribution as
        # multinomial, four ops, reproducible under the global seed.
        return torch.argmax(params - torch.empty_like(params).exponential_().log_(), dim=-1)

    def mode(self, params, extra):
        return torch.argmax(params, dim=-1)

    def log_prob(self, params, extra, actions):
        logp = F.log_softmax(params, dim=-1)
        return logp.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self, params, extra):
        logp = F.log_softmax(params, dim=-1)
        return -(logp.exp() * logp).sum(-1)

    def log_probs_all(self, params: torch.Tensor) -> torch.Tensor:
        """``(B, n)`` log-probabilities of every action (exact KL/JS for categorical policies)."""
        return F.log_softmax(params, dim=-1)


class GaussianHead(ActionHead):
    """Diagonal Gaussian with a state-independent log std (``extra``); env actions clipped to the bounds."""

    def __init__(self, dim: int, low: np.ndarray, high: np.ndarray):
        self.n_params = dim
        self.low, self.high = low, high

    def sample(self, params, extra):
        return params + torch.randn_like(params) * extra.exp()

    def mode(self, params, extra):
        return params

    def log_prob(self, params, extra, actions):
        z = (actions - params) * torch.exp(-extra)
        return (-0.5 * z.square() - extra - 0.5 * LOG_2PI).sum(-1)

    def entropy(self, params, extra):
        return (0.5 + 0.5 * LOG_2PI + extra).sum(-1).expand(params.shape[0])

    def to_env(self, actions):
        return np.clip(actions, self.low, self.high)


class BetaHead(ActionHead):
    """Beta policy for bounded actions (Chou et al. 2017): alpha, beta = 1 + softplus(.), samples in [0, 1]
    rescaled to the action bounds, so no probability mass is wasted outside them."""

    def __init__(self, dim: int, low: np.ndarray, high: np.ndarray):
        self.n_params = 2 * dim
        self.dim = dim
        self.low, self.high = low, high

    def _ab(self, params):
        ab = 1.0 + F.softplus(params)
        return ab[..., : self.dim], ab[..., self.dim :]

    def _dist(self, params):
        a, b = self._ab(params)
        return torch.distributions.Beta(a, b)

    def sample(self, params, extra):
        return self._dist(params).sample().clamp(1e-6, 1 - 1e-6)

    def mode(self, params, extra):
        a, b = self._ab(params)
        return a / (a + b)  # the mean: well defined for every alpha, beta > 1

    def log_prob(self, params, extra, actions):
        return self._dist(params).log_prob(actions.clamp(1e-6, 1 - 1e-6)).sum(-1)

    def entropy(self, params, extra):
        return self._dist(params).entropy().sum(-1)

    def to_env(self, actions):
        return self.low + (self.high - self.low) * actions


def make_head(action_space: gym.Space, kind: str) -> ActionHead:
    if isinstance(action_space, gym.spaces.Discrete):
        if kind not in ("auto", "categorical"):
            raise ValueError(f"action_dist {kind!r} needs a continuous action space")
        return CategoricalHead(int(action_space.n))
    assert isinstance(action_space, gym.spaces.Box)
    dim = int(np.prod(action_space.shape))
    if kind in ("auto", "gaussian"):
        return GaussianHead(dim, action_space.low, action_space.high)
    if kind == "beta":
        return BetaHead(dim, action_space.low, action_space.high)
    raise ValueError(f"unknown action_dist {kind!r}; allowed: auto, gaussian, beta")


class ActorCritic(nn.Module):
    """Policy (and optional value heads) for one observation/action space pair.

    Vector observations: separate policy and value MLPs (SB3's MlpPolicy default). Image observations:
    one Nature-CNN trunk shared by a linear policy head and a linear value head (SB3's CnnPolicy).
    """

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, cfg: NetConfig):
        super().__init__()
        self.cfg = cfg
        obs_shape: tuple[int, ...] = tuple(obs_space.shape or ())
        self.image = len(obs_shape) == 3
        self.head = make_head(action_space, cfg.action_dist)
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        self.action_shape: tuple[int, ...] = () if self.discrete else tuple(action_space.shape or ())
        act = ACTIVATIONS[cfg.activation]
        n_heads = cfg.n_value_heads
        if self.image:
            self.trunk: nn.Module = NatureCNN(obs_shape[0], cfg.ortho_init)
            feat = 512
            self.pi = mlp([feat, *cfg.pi_arch, self.head.n_params], act, cfg.ortho_init, 0.01)
            self.vf = mlp([feat, *cfg.vf_arch, n_heads], act, cfg.ortho_init, 1.0) if n_heads else None
        else:
            self.trunk = nn.Identity()
            feat = int(np.prod(obs_shape))
            self.pi = mlp([feat, *cfg.pi_arch, self.head.n_params], act, cfg.ortho_init, 0.01)
            self.vf = mlp([feat, *cfg.vf_arch, n_heads], act, cfg.ortho_init, 1.0) if n_heads else None
        self.log_std = nn.Parameter(torch.full((self.head.n_params,), cfg.log_std_init))
        self.log_std.requires_grad_(isinstance(self.head, GaussianHead))
        self.obs_rms = RunningMeanStd(obs_shape) if cfg.normalize_obs and not self.image else None

    @property
    def device(self) -> torch.device:
        """Where the networks' parameters live (``--device``). Observations are prepared on the CPU (numpy
        statistics) and moved there by the callers that run off the CPU."""
        return self.log_std.device

    def to_device(self, device: torch.device) -> ActorCritic:
        """Move the networks to ``device``; the observation statistics stay on the CPU (their arithmetic is numpy's)."""
        rms, self.obs_rms = self.obs_rms, None
        try:
            self.to(device)
        finally:
            self.obs_rms = rms
        return self

    # -- observation handling ---------------------------------------------------------------------------
    def prepare_obs(self, obs: np.ndarray, update_stats: bool = False) -> torch.Tensor:
        """Raw env observations ``(B, *obs_shape)`` to the network's input (normalised when enabled)."""
        x = torch.from_numpy(obs) if isinstance(obs, np.ndarray) else torch.as_tensor(obs)
        if self.image:
            return x
        x = x.float().reshape(x.shape[0], -1) if x.dim() > 2 else x.float()
        if self.obs_rms is not None:
            if update_stats:
                self.obs_rms.update(x)
            x = self.obs_rms.normalize(x)
        return x

    # -- forward pieces --------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x: (B, F)`` prepared observations -> (policy params ``(B, P)``, values ``(B, H)`` or None)."""
        f = self.trunk(x)
        return self.pi(f), (self.vf(f) if self.vf is not None else None)

    def policy_params(self, x: torch.Tensor) -> torch.Tensor:
        return self.pi(self.trunk(x))

    def values(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, H)`` value estimates of every head."""
        assert self.vf is not None, "this policy has no critic"
        return self.vf(self.trunk(x))

    @torch.no_grad()
    def act(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Sample actions for a batch: (actions, log-probs ``(B,)``, values ``(B, H)`` or None)."""
        params, values = self.forward(x)
        actions = self.head.sample(params, self.log_std)
        return actions, self.head.log_prob(params, self.log_std, actions), values

    def evaluate_actions(
        self, x: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """(log-probs ``(B,)``, entropy ``(B,)``, values ``(B, H)`` or None, policy params ``(B, P)``)."""
        params, values = self.forward(x)
        return (
            self.head.log_prob(params, self.log_std, actions),
            self.head.entropy(params, self.log_std),
            values,
            params,
        )

    def predict(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """Env-ready actions for raw observations ``(B, *obs_shape)``; the suite's evaluation entry point.

        An MLP policy runs under ``torch.inference_mode`` (less per-call bookkeeping than ``no_grad``, the same
        numbers: :func:`suite.accel.mlp.kernel_mode`); the CNN under ``no_grad``, as its frame buffers are kept
        across calls and training writes them outside inference mode."""
        with torch.no_grad() if self.image else torch.inference_mode():
            x = self.prepare_obs(obs)
            device = self.log_std.device
            if device.type != "cpu":
                x = x.to(device)
            params = self.policy_params(x) if self.image else _mlp_no_grad(self.pi, x)
            a = self.head.mode(params, self.log_std) if deterministic else self.head.sample(params, self.log_std)
            return self.head.to_env(a.numpy() if device.type == "cpu" else a.cpu().numpy())

    def predictor(self, deterministic: bool = True) -> Callable[[np.ndarray], np.ndarray]:
        """:meth:`predict` as a function of the observations, for many calls in a row (an evaluation): an MLP
        policy's layers are looked up once (:func:`_mlp_plan`), the same calls and numbers as :meth:`predict`.
        The plan holds views of the parameters as they are stored now: make a new predictor after anything that
        replaces them (``.to()``, re-packing); in-place updates (optimiser steps, ``load_state_dict``) show through."""
        if self.image or self.log_std.device.type != "cpu":
            return lambda obs: self.predict(obs, deterministic)
        plan, prepare, head, log_std = _mlp_plan(self.pi), self.prepare_obs, self.head, self.log_std

        def run(obs: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                params = _run_mlp_plan(plan, prepare(obs))
                a = head.mode(params, log_std) if deterministic else head.sample(params, log_std)
                return head.to_env(a.numpy())

        return run
