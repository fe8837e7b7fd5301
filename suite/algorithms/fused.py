"""Hand-derived forward and backward passes of the suite's MLP policies, flat parameters, one fused Adam step.

Why: the networks of classic-control PPO are tiny (two 64-unit MLPs), so a training step spends its time in
per-call overhead of eager PyTorch (module ``__call__``, autograd graph nodes, ``torch.optim``'s per-parameter
bookkeeping), not in arithmetic. Measured on the 2-core dev machine (``suite profile speed --algo ppo --env
CartPole-v1``): one 256-sample Adam step of the autograd path took ~1.7 ms. This module does the same maths with
a fixed, short sequence of ATen calls on tensors that share the module's storage:

* :class:`FlatParameters` packs a module's trainable parameters into one contiguous buffer (the parameters become
  views of it) and their gradients into another, so clipping, statistics and the optimiser are one call each;
* :class:`FlatAdam` is ``torch.optim.Adam`` (fused CPU kernel, ``torch._fused_adam_``) on the flat buffers
  without ``torch.optim``'s per-step Python machinery (and without the ``torch._dynamo`` import that building a
  ``torch.optim`` optimiser triggers: ~70 MB of resident memory and seconds of start-up per trial process);
* :class:`MLPKernel` runs ``Linear -> act -> ... -> Linear`` stacks forward (keeping the activations) and
  backward by hand, writing the weight gradients straight into the flat gradient buffer; it uses exactly the
  kernels autograd would (``addmm``, ``mm``, ``sum``, ``tanh_backward``, ``threshold_backward``);
* :class:`PolicyKernel` adds the action head's maths (categorical or diagonal Gaussian log-probabilities and
  entropies, and their derivatives), so a loss only has to supply ``dL/dlog_prob``, ``dL/dentropy`` and
  ``dL/dvalue`` per sample.

The hand-derived paths run under :func:`kernel_mode` (``torch.inference_mode``): no autograd graph is built on
them anyway, and inference mode also skips ATen's version-counter bumps and view tracking, which on these tiny
tensors is ~7-9% of a trial's training time (the same kernels, so the same numbers bit for bit).

Where it does not apply (image observations and the Nature CNN, whose cost is arithmetic; a Beta head; the
LSTM or PopArt critic; losses that need a double backward, like ``ppo-rlvr-prm``'s input-gradient penalty) the
trainers fall back to autograd on the same flat parameters and optimiser; :func:`kernel_for` says which.

Shapes: ``B`` samples, ``P`` policy outputs (logits or means), ``H`` value heads, ``A`` action dimensions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from suite.algorithms.networks import LOG_2PI, ActorCritic, CategoricalHead, GaussianHead

T = TypeVar("T")


def kernel_mode(on: bool = True) -> torch.inference_mode:
    """The grad mode of the hand-derived paths (rollout inference with a kernel, an update by hand, evaluation of an MLP
    policy): ``torch.inference_mode(on)``.

    Why: these paths never build an autograd graph, and inference mode also drops ATen's per-call bookkeeping for
    autograd (version-counter bumps on in-place ops, view tracking, the autograd dispatch keys): 0.913-0.931x the
    training time of ``ppo``, ``ppo-adaptive-clip`` and ``ppo-rlvr-prm`` slices on CartPole-v1 and TextMatch-v0
    (2026-12-05, AVX-512 EPYC), with identical parameters. Tensors made inside are inference tensors: autograd
    refuses them and they cannot be written in place outside the mode, so a path that may later run outside it keeps
    its buffers as normal tensors (:func:`_normal_empty`) and an autograd update never runs inside it
    (``on=False``: a no-op)."""
    return torch.inference_mode(on)


def in_kernel_mode(when: Callable[[Any], bool]) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorate a method to run under :func:`kernel_mode` when ``when(self)`` is true (its hand-derived path)."""

    def decorate(method: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(method)
        def run(self: Any, *args: Any, **kwargs: Any) -> T:
            with kernel_mode(when(self)):
                return method(self, *args, **kwargs)

        return run

    return decorate


def _normal_empty(shape: Any) -> torch.Tensor:
    """``torch.empty(shape)`` as a normal tensor even under :func:`kernel_mode`: a buffer kept across calls, which a
    later call outside the mode may write into (``suite profile speed`` times the network alone, tests call the
    kernel directly)."""
    with torch.inference_mode(False):
        return torch.empty(shape)


def _kept_buffers(cache: dict[Any, T], key: Any, make: Callable[[], T]) -> T:
    """Output buffers kept in ``cache`` under ``key`` and the grad mode, made by ``make()`` the first time: under
    :func:`kernel_mode` as inference tensors (written without version counters or view tracking: ~4 us less per
    rollout inference of 8 rows than normal tensors, AVX-512 EPYC, 2026-12-05), outside it as normal tensors (an
    inference tensor cannot be written there)."""
    mode = torch.is_inference_mode_enabled()
    bufs = cache.get((key, mode))
    if bufs is None:
        bufs = cache[(key, mode)] = make()
    return bufs


_tanh_backward = torch.ops.aten.tanh_backward.default
_threshold_backward = torch.ops.aten.threshold_backward.default
_tanh_backward_out = torch.ops.aten.tanh_backward.grad_input
_threshold_backward_out = torch.ops.aten.threshold_backward.grad_input


# -- parameters and optimiser -----------------------------------------------------------------------------
class FlatParameters:
    """The trainable parameters of a module in one contiguous float32 buffer, their gradients in another.

    After construction every parameter is a view of :attr:`data` and its ``.grad`` a view of :attr:`grad`, so
    the module, its ``state_dict`` and autograd keep working unchanged (autograd accumulates into an existing
    ``.grad`` in place when it is not building a graph). Never set a parameter's ``.grad`` to None.
    """

    def __init__(self, params: list[nn.Parameter]):
        self.params = [p for p in params if p.requires_grad]
        if any(p.dtype != torch.float32 or p.device.type != "cpu" for p in self.params):
            raise ValueError("FlatParameters holds float32 CPU parameters only")
        total = sum(p.numel() for p in self.params)
        self.data = torch.empty(total)
        """``(n_params,)`` every trainable parameter, in ``params`` order."""
        self.grad = torch.zeros(total)
        """``(n_params,)`` their gradients."""
        self._offsets: dict[int, int] = {}
        offset = 0
        for p in self.params:
            k = p.numel()
            self.data[offset : offset + k].copy_(p.detach().reshape(-1))
            p.data = self.data[offset : offset + k].view_as(p)
            p.grad = self.grad[offset : offset + k].view_as(p)
            self._offsets[id(p)] = offset
            offset += k

    def zero_grad(self) -> None:
        self.grad.zero_()

    def stacked(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(data, grad)`` views of shape ``(2, *a.shape)`` over two same-shaped parameters packed one after the
        other (see :func:`parameter_order`), or None when they are not."""
        if a.shape != b.shape or id(a) not in self._offsets or id(b) not in self._offsets:
            return None
        o, k = self._offsets[id(a)], a.numel()
        if self._offsets[id(b)] != o + k:
            return None
        return self.data[o : o + 2 * k].view(2, *a.shape), self.grad[o : o + 2 * k].view(2, *a.shape)


def _linears(seq: nn.Module) -> list[nn.Linear]:
    return [m for m in seq.children() if isinstance(m, nn.Linear)] if isinstance(seq, nn.Sequential) else []


def twin_compatible(policy: ActorCritic) -> bool:
    """Whether the policy and value MLPs have the same hidden layers (the usual case), so :class:`TwinMLPKernel`
    can run both as one batched network."""
    if policy.image or not isinstance(policy.vf, nn.Sequential) or not isinstance(policy.pi, nn.Sequential):
        return False
    pi, vf = _linears(policy.pi), _linears(policy.vf)
    return len(pi) == len(vf) >= 2 and all(a.weight.shape == b.weight.shape for a, b in zip(pi[:-1], vf[:-1], strict=True))


def parameter_order(policy: ActorCritic) -> list[nn.Parameter]:
    """The policy's parameters in the order to pack them (:class:`FlatParameters`): module order, except that the
    hidden layers of twin policy/value MLPs are interleaved (``W_pi, W_vf, b_pi, b_vf`` per layer), so each pair is
    one ``(2, ...)`` tensor for :class:`TwinMLPKernel`. The order changes nothing but the packing."""
    params = list(policy.parameters())
    if not twin_compatible(policy):
        return params
    pi, vf = _linears(policy.pi), _linears(policy.vf)  # type: ignore[arg-type]
    paired: list[Any] = []
    for a, b in zip(pi[:-1], vf[:-1], strict=True):
        paired += [a.weight, b.weight, a.bias, b.bias]
    seen = {id(p) for p in paired}
    return paired + [p for p in params if id(p) not in seen]


class FlatAdam:
    """Adam (Kingma & Ba 2015) on a :class:`FlatParameters`, exactly ``torch.optim.Adam(fused=True)``'s kernel."""

    def __init__(self, flat: FlatParameters, eps: float, betas: tuple[float, float] = (0.9, 0.999)):
        self.flat = flat
        self.eps = eps
        self.beta1, self.beta2 = betas
        self.exp_avg = torch.zeros_like(flat.data)
        self.exp_avg_sq = torch.zeros_like(flat.data)
        self.step_count = torch.zeros(())  # float32, as torch.optim keeps it

    def step(self, lr: float) -> None:
        if not lr >= 0.0:  # torch.optim.Adam's own check (its message), which the fused kernel does not make
            raise ValueError(f"Invalid learning rate: {lr}")
        self.step_count.add_(1.0)
        torch._fused_adam_(
            [self.flat.data], [self.flat.grad], [self.exp_avg], [self.exp_avg_sq], [], [self.step_count],
            lr=lr, beta1=self.beta1, beta2=self.beta2, weight_decay=0.0, eps=self.eps, amsgrad=False, maximize=False,
        )  # fmt: skip


# -- MLPs -------------------------------------------------------------------------------------------------
class MLPKernel:
    """Forward and backward of ``nn.Sequential(Linear, act, ..., Linear)`` by hand (no autograd graph).

    The weights are read through detached views of the module's parameters (so optimiser updates are seen);
    :meth:`backward` writes ``dL/dW``, ``dL/db`` into the parameters' ``.grad`` (views of a flat buffer).

    Above :data:`SMALL_BATCH` rows ``tanh`` is computed as ``2 sigmoid(2 z) - 1``, the doubling folded into the
    layer's ``addmm`` (exact: a power of two): within 2e-7 of ``torch.tanh``, and 3x faster on the dev machine's
    CPU, where ``torch.tanh`` of a 256 x 64 batch costs more than the matrix product before it. Its derivative is
    ``1 - h^2`` either way.
    """

    def __init__(self, seq: nn.Sequential, activation: str):
        linears = [m for m in seq if isinstance(m, nn.Linear)]
        if len(linears) != (len(seq) + 1) // 2 or not isinstance(seq[-1], nn.Linear):
            raise ValueError("MLPKernel needs Linear layers with one activation between each pair")
        if activation not in ("tanh", "relu"):
            raise ValueError(f"unsupported activation {activation!r}")
        self.tanh = activation == "tanh"
        self.layers = [(lin.weight.detach(), lin.bias.detach(), lin.weight, lin.bias) for lin in linears]
        self._wt = [w.t() for w, _, _, _ in self.layers]
        """``W^T`` of every layer: views of the flat parameters, made once (a view costs a call per forward)."""
        self._inputs: list[torch.Tensor] = []
        self._infer_plans: dict[Any, tuple[list[Any], Any, tuple[Any, ...]]] = {}
        """:meth:`infer`'s layers and output buffers by batch size (:meth:`_plan`, :func:`_kept_buffers`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x: (B, in)`` -> ``(B, out)``, storing each layer's input for :meth:`backward` (a rollout step's forward,
        which keeps nothing, is :meth:`infer`)."""
        inputs = []
        h = x
        last = len(self.layers) - 1
        doubled = self.tanh and x.shape[0] > SMALL_BATCH
        for i, ((_, b, _, _), wt) in enumerate(zip(self.layers, self._wt, strict=True)):
            inputs.append(h)
            if i == last:
                h = torch.addmm(b, h, wt)
            elif doubled:
                h = _hidden_act(torch.addmm(b, h, wt, beta=2, alpha=2), True, True)
            else:
                h = _hidden_act(torch.addmm(b, h, wt), self.tanh, False)
        self._inputs = inputs
        return h

    def infer(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` without keeping the inputs, every layer's output written into a buffer kept for ``x``'s batch size
        (see :meth:`PolicyKernel.infer`): the same calls and values without a new tensor per layer. The result is
        overwritten by the next call with as many rows."""
        hidden, act, (b_out, wt_out, out) = _kept_buffers(self._infer_plans, x.shape[0], lambda: self._plan(x.shape[0]))
        h = x
        if act is None:  # 2 sigmoid(2z) - 1 (see the class docstring)
            for b, wt, buf in hidden:
                h = _hidden_act(torch.addmm(b, h, wt, beta=2, alpha=2, out=buf), True, True)
        else:
            for b, wt, buf in hidden:
                h = act(torch.addmm(b, h, wt, out=buf))
        return torch.addmm(b_out, h, wt_out, out=out)

    def _plan(self, B: int) -> tuple[list[Any], Any, tuple[Any, ...]]:
        """:meth:`infer`'s layers for ``B`` rows: ``(bias, W^T, output buffer)`` per hidden layer, the activation in
        place (None: the doubled sigmoid form) and the output layer's ``(bias, W^T, output buffer)``."""
        layers = [(b, wt, torch.empty(B, wt.shape[1])) for (_, b, _, _), wt in zip(self.layers, self._wt, strict=True)]
        act = None if self.tanh and B > SMALL_BATCH else (torch.Tensor.tanh_ if self.tanh else torch.Tensor.relu_)
        return layers[:-1], act, layers[-1]

    def backward(
        self,
        dout: torch.Tensor,
        accumulate: bool = False,
        input_grad: bool = False,
        extra_dz: list[torch.Tensor] | None = None,
    ) -> torch.Tensor | None:
        """Backpropagate ``dout = dL/d output (B, out)`` through the last :meth:`forward`.

        Args:
            accumulate: add to the parameters' gradients (micro-batches) instead of overwriting them.
            input_grad: also return ``dL/dx (B, in)``.
            extra_dz: ``dL/dz_l (B, H_l)`` of each hidden layer from terms beyond the output (an input-gradient
                penalty's activation derivatives, :class:`JacobianPenaltyGrad`), added to the backprop's own.
        """
        dz = dout
        for i in range(len(self.layers) - 1, -1, -1):
            w, _, weight, bias = self.layers[i]
            h = self._inputs[i]
            gw, gb = weight.grad, bias.grad
            assert gw is not None and gb is not None
            # dW = dz^T h, (out, in); BLAS is ~5x faster computing a narrow first layer as (h^T dz)^T
            if h.shape[1] < dz.shape[1]:
                dw = torch.mm(h.t(), dz).t()
                gw.add_(dw) if accumulate else gw.copy_(dw)
            elif accumulate:
                gw.addmm_(dz.t(), h)
            else:
                torch.mm(dz.t(), h, out=gw)
            if accumulate:
                gb.add_(dz.sum(0))
            else:
                torch.sum(dz, 0, out=gb)
            if i == 0 and not input_grad:
                break
            dh = torch.mm(dz, w)
            if i == 0:
                return dh
            dz = _tanh_backward(dh, h) if self.tanh else _threshold_backward(dh, h, 0)
            if extra_dz is not None:
                dz.add_(extra_dz[i - 1])
        return None


SMALL_BATCH = 64
"""Up to this many rows a hidden tanh layer uses ``torch.tanh`` (one call: per-call overhead dominates); above it the
``2 sigmoid(2 z) - 1`` form (two calls, but ``torch.tanh`` costs more than the matmul at 256 x 64 on the dev
machine's CPU). The two agree within 2e-7."""


_MINUS_ONE = torch.tensor(-1.0)


def _hidden_act(z: torch.Tensor, tanh: bool, doubled: bool) -> torch.Tensor:
    """Activation in place; ``doubled``: ``z`` holds ``2 z`` (the sigmoid form's input, folded into the matmul)."""
    if not tanh:
        return z.relu_()
    if doubled:  # 2 s - 1 as -1 + 2 s in one call (2 s is exact: the same single rounding as mul_(2).sub_(1))
        return torch.add(_MINUS_ONE, z.sigmoid_(), alpha=2.0, out=z)
    return z.tanh_()


class TwinMLPKernel:
    """The policy and value MLPs of a :func:`twin_compatible` policy run as one: each hidden layer is a single
    batched matmul over the two networks (``baddbmm`` on ``(2, B, width)``), the output layers stay separate.
    Half the calls of two :class:`MLPKernel` (2.2x faster inference at 8 envs, ~25% faster at a 256 minibatch on
    the dev machine), the same arithmetic per network.
    """

    def __init__(self, policy: ActorCritic, flat: FlatParameters):
        pi, vf = _linears(policy.pi), _linears(policy.vf)  # type: ignore[arg-type]
        self.tanh = policy.cfg.activation == "tanh"
        self.hidden: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for a, b in zip(pi[:-1], vf[:-1], strict=True):
            w, b_ = flat.stacked(a.weight, b.weight), flat.stacked(a.bias, b.bias)
            if w is None or b_ is None:
                raise ValueError("the policy's parameters were not packed in parameter_order()")
            self.hidden.append((w[0], b_[0].unsqueeze(1), w[1], b_[1]))  # data W, data b (2,1,out), grad W, grad b
        self.out = [(lin.weight.detach(), lin.bias.detach(), lin.weight, lin.bias) for lin in (pi[-1], vf[-1])]
        self._wt_hidden = [w.transpose(1, 2) for w, _, _, _ in self.hidden]
        self._wt_out = [w.t() for w, _, _, _ in self.out]
        """``W^T`` of every layer, views of the flat parameters made once (see :class:`MLPKernel`)."""
        self._acts: list[torch.Tensor] = []
        self._infer_plans: dict[Any, tuple[list[Any], Any, tuple[Any, ...], tuple[Any, ...]]] = {}
        """:meth:`infer`'s layers and output buffers by batch size (:meth:`_plan`, :func:`_kept_buffers`)."""
        self._grad_bufs: dict[torch.Size, tuple[torch.Tensor, torch.Tensor]] = {}
        """Two ``(2, B, width)`` buffers per activation shape for the backward's ``dL/dh``, reused from step to step
        instead of new ones per layer: hidden layer ``i`` writes into the one of its shape and parity ``i % 2``, so
        the next layer down (the other parity) never writes over the ``dL/dz`` it reads, whatever the widths."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x (B, in)`` -> ``(policy params (B, P), values (B, H))``, keeping the activations for :meth:`backward`."""
        h = x.expand(2, *x.shape)
        acts = [h]
        doubled = self.tanh and x.shape[0] > SMALL_BATCH  # 2 sigmoid(2z) - 1, see MLPKernel
        for (_, b, _, _), wt in zip(self.hidden, self._wt_hidden, strict=True):
            if doubled:
                h = _hidden_act(torch.baddbmm(b, h, wt, beta=2, alpha=2), True, True)
            else:
                h = _hidden_act(torch.baddbmm(b, h, wt), self.tanh, False)
            acts.append(h)
        self._acts = acts
        (_, bp, _, _), (_, bv, _, _) = self.out
        wpt, wvt = self._wt_out
        return torch.addmm(bp, h[0], wpt), torch.addmm(bv, h[1], wvt)

    def infer(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward` without keeping the activations, every output written into a buffer kept for ``x``'s batch size (see
        :meth:`PolicyKernel.infer`). The results are overwritten by the next call with as many rows."""
        B = x.shape[0]
        hidden, act, (bp, wpt, params), (bv, wvt, values) = _kept_buffers(self._infer_plans, B, lambda: self._plan(B))
        h = x.expand(2, *x.shape)
        if act is None:  # 2 sigmoid(2z) - 1, see MLPKernel
            for b, wt, out in hidden:
                h = _hidden_act(torch.baddbmm(b, h, wt, beta=2, alpha=2, out=out), True, True)
        else:
            for b, wt, out in hidden:
                h = act(torch.baddbmm(b, h, wt, out=out))
        return torch.addmm(bp, h[0], wpt, out=params), torch.addmm(bv, h[1], wvt, out=values)

    def _plan(self, B: int) -> tuple[list[Any], Any, tuple[Any, ...], tuple[Any, ...]]:
        """:meth:`infer`'s layers for ``B`` rows: ``(bias, W^T, output buffer)`` per hidden layer, the activation in
        place (None: the doubled sigmoid form), and the two output layers' ``(bias, W^T, output buffer)``."""
        pairs = zip(self.hidden, self._wt_hidden, strict=True)
        hidden = [(b, wt, torch.empty(2, B, wt.shape[2])) for (_, b, _, _), wt in pairs]
        act = None if self.tanh and B > SMALL_BATCH else (torch.Tensor.tanh_ if self.tanh else torch.Tensor.relu_)
        (_, bp, _, _), (_, bv, _, _) = self.out
        wpt, wvt = self._wt_out
        return hidden, act, (bp, wpt, torch.empty(B, wpt.shape[1])), (bv, wvt, torch.empty(B, wvt.shape[1]))

    def backward(
        self,
        dparams: torch.Tensor,
        dvalues: torch.Tensor | None,
        accumulate: bool = False,
        extra_dz: list[torch.Tensor] | None = None,
    ) -> None:
        """Fill the gradients from ``dL/dparams (B, P)`` and ``dL/dvalues (B, H)`` (None: no value loss);
        ``extra_dz``: the policy's extra ``dL/dz_l`` per hidden layer (see :meth:`MLPKernel.backward`)."""
        acts = self._acts
        h = acts[-1]
        douts = (dparams, dvalues if dvalues is not None else dparams.new_zeros(dparams.shape[0], self.out[1][0].shape[0]))
        top = len(self.hidden) - 1
        dh = self._grad_buf(h.shape, top % 2)
        for k, ((w, _, weight, bias), dz) in enumerate(zip(self.out, douts, strict=True)):
            gw, gb = weight.grad, bias.grad
            assert gw is not None and gb is not None
            if accumulate:
                gw.addmm_(dz.t(), h[k])
                gb.add_(dz.sum(0))
            else:
                torch.mm(dz.t(), h[k], out=gw)
                torch.sum(dz, 0, out=gb)
            torch.mm(dz, w, out=dh[k])
        for i in range(len(self.hidden) - 1, -1, -1):
            w, _, gw, gb = self.hidden[i]
            dz = dh  # the activation's derivative applied in place (elementwise: the same values as a new tensor)
            if self.tanh:
                _tanh_backward_out(dh, acts[i + 1], grad_input=dz)
            else:
                _threshold_backward_out(dh, acts[i + 1], 0, grad_input=dz)
            if extra_dz is not None:
                dz[0].add_(extra_dz[i])
            h_in = acts[i]
            if h_in.shape[2] < dz.shape[2]:  # narrow input layer: (h^T dz)^T is ~5x faster in BLAS
                dw = torch.bmm(h_in.transpose(1, 2), dz).transpose(1, 2)
                gw.add_(dw) if accumulate else gw.copy_(dw)
            elif accumulate:
                gw.baddbmm_(dz.transpose(1, 2), h_in)
            else:
                torch.bmm(dz.transpose(1, 2), h_in, out=gw)
            if accumulate:
                gb.add_(dz.sum(1))
            else:
                torch.sum(dz, 1, out=gb)
            if i:
                dh = self._grad_buf(acts[i].shape, (i - 1) % 2)
                torch.bmm(dz, w, out=dh)

    def _grad_buf(self, shape: torch.Size, parity: int) -> torch.Tensor:
        """The kept ``dL/dh`` buffer of this shape and parity (see ``_grad_bufs``)."""
        bufs = self._grad_bufs.get(shape)
        if bufs is None:
            bufs = self._grad_bufs[shape] = (_normal_empty(shape), _normal_empty(shape))
        return bufs[parity]


# -- numpy reductions ---------------------------------------------------------------------------------------
_add_reduce = np.add.reduce

try:
    from numpy._core.umath import clip as fast_clip  # type: ignore[attr-defined]  # np.clip's ufunc, no wrappers
except ImportError:  # pragma: no cover - numpy < 2 or a moved module: the public function, the same values
    fast_clip = np.clip


def fast_mean(a: np.ndarray) -> Any:
    """``a.mean()`` over every element, bitwise: numpy's own steps (the same pairwise ``add.reduce``, the sum divided
    in float64 and cast back to ``a``'s float dtype; booleans and integers summed in float64) without ``np.mean``'s
    Python wrapper, which costs ~9 us on the dev machine against ~2 us for these calls (a minibatch takes ~7)."""
    if a.dtype.kind in "biu":
        return np.float64(float(_add_reduce(a, axis=None, dtype=np.float64)) / a.size)
    s = _add_reduce(a, axis=None)
    return s.dtype.type(float(s) / a.size)


def fast_std(a: np.ndarray, ddof: int = 0) -> Any:
    """``a.std(ddof=ddof)`` of a float array over every element, bitwise (numpy's ``_var`` step by step: mean as in
    :func:`fast_mean`, squared deviations, their sum divided in float64 by ``n - ddof``, square root in ``a``'s
    dtype); ~32 us -> ~8 us."""
    if a.dtype.kind != "f":
        raise TypeError("fast_std takes a float array")
    x = a - fast_mean(a)
    return _std_from_squares(np.multiply(x, x, out=x), a.size - ddof)


def fast_var(a: np.ndarray, ddof: int = 0) -> Any:
    """``a.var(ddof=ddof)`` of a float array over every element, bitwise (:func:`fast_std` without the square root;
    more elements than ``ddof``); ~16 us -> ~5 us a call on a rollout's 256 values."""
    if a.dtype.kind != "f":
        raise TypeError("fast_var takes a float array")
    x = a - fast_mean(a)
    return _var_from_squares(np.multiply(x, x, out=x), a.size - ddof)


def _var_from_squares(squares: np.ndarray, dof: int) -> Any:
    """The last steps of :func:`fast_var`, from the squared deviations ``(a - mean(a))^2``: their sum divided in
    float64 by ``dof``, in ``a``'s dtype."""
    s = _add_reduce(squares, axis=None)
    return s.dtype.type(float(s) / max(dof, 0))


def _std_from_squares(squares: np.ndarray, dof: int) -> Any:
    """The last steps of :func:`fast_std`, from the squared deviations ``(a - mean(a))^2``."""
    v = _var_from_squares(squares, dof)
    return v.dtype.type(np.sqrt(v))


def fast_normalize(a: np.ndarray, eps: float) -> np.ndarray:
    """``(a - a.mean()) / (a.std(ddof=1) + eps)`` bitwise (:func:`fast_mean`, :func:`fast_std`), with the mean and
    the deviations computed once instead of twice."""
    x = a - fast_mean(a)
    return x / (_std_from_squares(x * x, a.size - 1) + eps)


def fast_normalize_rows(a: np.ndarray, eps: float) -> np.ndarray:
    """:func:`fast_normalize` of every row of a float array ``(m, b)``, ``b > 1``, bitwise, in one set of calls for
    all rows: numpy sums each row of a contiguous array along its last axis as it sums the row alone (the same
    pairwise loop), and the divisions in float64 cast back to ``a``'s dtype are :func:`fast_mean`'s. An update's 20
    minibatches of 256 advantages: ~114 -> ~18 us (AVX-512 EPYC, 2026-12-05)."""
    a = np.ascontiguousarray(a)
    b = a.shape[1]
    mean = (_add_reduce(a, axis=1).astype(np.float64) / b).astype(a.dtype)
    x = a - mean[:, None]
    std = np.sqrt((_add_reduce(x * x, axis=1).astype(np.float64) / (b - 1)).astype(a.dtype))
    return x / (std + eps)[:, None]


# -- heads ------------------------------------------------------------------------------------------------
@dataclass
class HeadState:
    """What a head's backward needs from its forward (numpy arrays). ``p``/``logp_all``: categorical ``(B, n)``;
    ``z``: Gaussian standardised actions ``(B, A)``."""

    actions: np.ndarray
    p: np.ndarray | None = None
    logp_all: np.ndarray | None = None
    entropy: np.ndarray | None = None
    z: np.ndarray | None = None
    inv_std: np.ndarray | None = None
    mu: np.ndarray | None = None
    """Gaussian means ``(B, A)``."""


_ROWS: dict[int, np.ndarray] = {}


def _rows(n: int) -> np.ndarray:
    """``np.arange(n)``, cached (row indices of a per-row gather)."""
    r = _ROWS.get(n)
    if r is None:
        r = _ROWS[n] = np.arange(n)
    return r


class PolicyKernel:
    """Hand-derived passes through an :class:`ActorCritic` with MLP policy/value networks (see the module docs).

    Forward (:meth:`evaluate`) gives per-sample log-probabilities, entropies and values; backward
    (:meth:`backward`) takes ``dL/dlog_prob (B,)``, ``dL/dentropy`` (``(B,)``, a scalar, or None) and
    ``dL/dvalues (B, H)`` and fills every parameter's gradient.
    """

    def __init__(self, policy: ActorCritic, flat: FlatParameters | None = None):
        self.policy = policy
        act = policy.cfg.activation
        self.twin = TwinMLPKernel(policy, flat) if flat is not None and twin_compatible(policy) else None
        self.pi = MLPKernel(policy.pi, act) if self.twin is None else None
        self.vf = MLPKernel(policy.vf, act) if self.twin is None and policy.vf is not None else None  # type: ignore[arg-type]
        self.has_critic = policy.vf is not None
        self.gaussian = isinstance(policy.head, GaussianHead)
        self.tanh = act == "tanh"
        self.log_std = policy.log_std.detach()
        self.log_std_param = policy.log_std
        self.plain_categorical = type(policy.head) is CategoricalHead
        """The suite's own categorical head (not a subclass that may sample otherwise): :meth:`sample` inlines it."""
        self._noise: dict[Any, tuple[torch.Tensor, torch.Tensor]] = {}
        """:meth:`sample`'s buffers by shape (:func:`_kept_buffers`): the log-probabilities and the Gumbel-max noise
        (both filled anew at every draw: the noise's values depend on the generator only)."""

    def _forward(self, x: torch.Tensor, with_values: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The networks' forward for :meth:`evaluate`, keeping the activations for :meth:`backward`."""
        if self.twin is not None:
            return self.twin.forward(x)
        assert self.pi is not None
        params = self.pi.forward(x)
        values = self.vf.forward(x) if (with_values and self.vf is not None) else None
        return params, values

    # -- inference (rollout, evaluation) ----------------------------------------------------------------
    def infer(self, x: torch.Tensor, with_values: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(policy params (B, P), values (B, H) or None)`` without keeping activations, for a rollout step: every
        layer writes into an output buffer kept for the batch size (:meth:`MLPKernel.infer`, :meth:`TwinMLPKernel.
        infer`), so **the results are overwritten by the next call with as many rows**; the rollout collectors use
        them (sampling, storing into their buffers) before their next step.

        Why: the same calls and values as :meth:`_forward`, without a new tensor per layer (with :meth:`sample`'s
        buffers, ~7 allocations fewer of a rollout inference's ~12 small calls). The rollout phase of a 100k-step
        CartPole-v1 trial, medians of three (AVX-512 EPYC, 2026-12-05, scratch ``trialab.py``): ``ppo`` 1.424 ->
        1.319 s, ``grpo`` 1.265 -> 1.197 s, ``grpo-pairwise`` 1.832 -> 1.684 s; ``ppo`` on TextMatch-v0 (30k steps, two
        seeds) 0.818 -> 0.762 s. The 29 hashed trials of the speed log (parameters, metrics, evaluations) are
        identical.
        """
        if self.twin is not None:
            return self.twin.infer(x)
        assert self.pi is not None
        params = self.pi.infer(x)
        values = self.vf.infer(x) if (with_values and self.vf is not None) else None
        return params, values

    def sample(self, params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actions, log-probs (B,))`` drawn like the head's ``sample`` (same random stream)."""
        if self.gaussian:
            actions = params + torch.randn_like(params) * self.log_std.exp()
            z = (actions - params).mul_(torch.exp(-self.log_std))  # as evaluate() computes it
            return actions, z.square_().mul_(-0.5).sub_(self.log_std).sub_(0.5 * LOG_2PI).sum(-1)
        if self.plain_categorical:  # CategoricalHead.sample's Gumbel-max, its noise drawn into a kept buffer
            shape = params.shape
            logp_all, noise = _kept_buffers(self._noise, shape, lambda: (torch.empty(shape), torch.empty(shape)))
            torch.log_softmax(params, -1, out=logp_all)
            # logp_all - log(noise), written over the noise (elementwise: the same values as a new tensor)
            actions = torch.argmax(torch.sub(logp_all, noise.exponential_().log_(), out=noise), dim=-1)
        else:
            logp_all = torch.log_softmax(params, -1)
            actions = self.policy.head.sample(logp_all, None)  # Gumbel-max (on log-probs: the same argmax as on logits)
        # the chosen log-probs picked in numpy: the same values as torch's gather, one call instead of three
        return actions, torch.from_numpy(logp_all.numpy()[_rows(actions.shape[0]), actions.numpy()])

    # -- training ----------------------------------------------------------------------------------------
    def evaluate(
        self, x: torch.Tensor, actions: torch.Tensor, need_values: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, HeadState]:
        """``(log-probs (B,), entropies (B,), values (B, H) or None, head state)`` as numpy arrays (the head's and
        the loss's arithmetic on these small arrays is numpy's: a call costs a fraction of a torch call's dispatch);
        the networks' activations are kept for :meth:`backward`."""
        params_t, values_t = self._forward(x, need_values)
        values = None if values_t is None else values_t.numpy()
        B = params_t.shape[0]
        if self.gaussian:
            mu = params_t.numpy()
            ls = self.log_std.numpy()
            inv_std = np.exp(-ls)
            z = (actions.numpy() - mu) * inv_std
            logp = (-0.5 * z * z - ls - 0.5 * LOG_2PI).sum(1)
            ent = np.full(B, (0.5 + 0.5 * LOG_2PI + ls).sum(), dtype=np.float32)
            return logp, ent, values, HeadState(actions.numpy(), z=z, inv_std=inv_std, mu=mu)
        logp_all = torch.log_softmax(params_t, -1).numpy()
        p = np.exp(logp_all)
        ent = -np.einsum("ij,ij->i", p, logp_all)
        a = actions.numpy().astype(np.intp, copy=False)
        logp = logp_all[_rows(B), a]
        return logp, ent, values, HeadState(a, p=p, logp_all=logp_all, entropy=ent)

    def backward(
        self,
        state: HeadState,
        dlogp: np.ndarray,
        dent: np.ndarray | float | None,
        dvalues: np.ndarray | None,
        accumulate: bool = False,
        extra_dparams: np.ndarray | None = None,
        extra_dls: np.ndarray | None = None,
        extra_dz: list[torch.Tensor] | None = None,
    ) -> None:
        """Fill the gradients of every parameter from per-sample loss derivatives (see the class docstring).

        Categorical: ``d log p_a / dz = onehot(a) - p`` and ``dH / dz = -p (log p + H)``. Gaussian with a
        state-independent log std ``s``: ``d log p / d mu = z / std``, ``d log p / ds = z^2 - 1``, ``dH / ds = 1``.
        ``extra_dparams (B, P)`` / ``extra_dls (A,)``: derivatives of further terms w.r.t. the policy's outputs and
        log std, added before the backward pass; ``extra_dz``: dL/dz of the policy network's hidden layers from terms
        beyond its outputs (:meth:`JacobianPenaltyGrad.before_backward`), added during it.
        """
        B = dlogp.shape[0]
        if self.gaussian:
            assert state.z is not None and state.inv_std is not None
            dparams = state.z * state.inv_std * dlogp[:, None]
            dls = ((state.z * state.z - 1.0) * dlogp[:, None]).sum(0)
            if dent is not None:
                dls = dls + (dent.sum() if isinstance(dent, np.ndarray) else dent * B)
            if extra_dls is not None:
                dls = dls + extra_dls
            g = self.log_std_param.grad
            assert g is not None
            g.add_(torch.from_numpy(dls)) if accumulate else g.copy_(torch.from_numpy(dls))
        else:
            assert state.p is not None and state.logp_all is not None and state.entropy is not None
            if dent is None:
                dparams = state.p * -dlogp[:, None]
            else:
                d_ent = dent[:, None] if isinstance(dent, np.ndarray) else dent
                dparams = -state.p * (dlogp[:, None] + d_ent * (state.logp_all + state.entropy[:, None]))
            dparams[_rows(B), state.actions] += dlogp
        if extra_dparams is not None:
            dparams = dparams + extra_dparams
        dp = torch.from_numpy(dparams)
        dv = None if dvalues is None else torch.from_numpy(dvalues)
        if self.twin is not None:
            self.twin.backward(dp, dv, accumulate, extra_dz)
            return
        assert self.pi is not None
        self.pi.backward(dp, accumulate=accumulate, extra_dz=extra_dz)
        if self.vf is not None:
            if dv is not None:
                self.vf.backward(dv, accumulate=accumulate)
            elif not accumulate:
                for _, _, weight, bias in self.vf.layers:
                    assert weight.grad is not None and bias.grad is not None
                    weight.grad.zero_()
                    bias.grad.zero_()

    def policy_network(self) -> tuple[list[torch.Tensor], list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]]:
        """The policy MLP as the last :meth:`evaluate` left it: ``(inputs of each layer (B, in) - the network's input
        first, then each hidden activation -, [(W data, W grad, b grad or None for the output layer), ...])``."""
        if self.twin is not None:
            acts = [a[0] for a in self.twin._acts]
            layers = [(w[0], gw[0], gb[0]) for w, _, gw, gb in self.twin.hidden]
            w_out, _, weight, _ = self.twin.out[0]
            assert weight.grad is not None
            return acts, [*layers, (w_out, weight.grad, None)]
        assert self.pi is not None
        out = []
        for i, (w, _, weight, bias) in enumerate(self.pi.layers):
            assert weight.grad is not None and bias.grad is not None
            out.append((w, weight.grad, bias.grad if i < len(self.pi.layers) - 1 else None))
        return list(self.pi._inputs), out


_NARROW = 16
"""Below this many output columns MKL's sgemm is slow on an ``(m, k) x (k, n)`` product of a few hundred rows, by how
much depending on the CPU: 512 x 64 x 4 took 37 us against 10 us for its transpose on an AVX-512 EPYC, while on an
AVX-512 Xeon (AMX) the transpose is the slow one (43 vs 8 us). At ``n >= 16`` the plain form is fast on both."""


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b``; a narrow output (:data:`_NARROW`) computed as the transpose of ``b^T a^T`` (a transposed view): used
    where the product's inner dimension is the batch (``A^T dA``), fast in this form on both CPUs measured."""
    return torch.mm(b.t(), a.t()).t() if b.shape[1] < _NARROW else torch.mm(a, b)


def _add_mm(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``out += a @ b`` (see :func:`_mm`)."""
    out.add_(_mm(a, b)) if b.shape[1] < _NARROW else out.addmm_(a, b)


def _mm_padded(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for many rows of ``a``; a narrow ``b`` (:data:`_NARROW`) zero-padded to :data:`_NARROW` columns and
    the product's first columns returned (a view). Measured on the Xeon only (512 x 64 x 4: 8 us padded, 8 plain, 43
    transposed); on the EPYC the plain narrow form was the slow one and the padded form was not timed there: it
    rests on that machine's plain products being fast from 16 columns up (:data:`_NARROW`)."""
    n = b.shape[1]
    if n >= _NARROW:
        return torch.mm(a, b)
    return torch.mm(a, torch.nn.functional.pad(b, (0, _NARROW - n)))[:, :n]


_ONE = torch.tensor(1.0)


class JacobianPenaltyGrad:
    """The gradient of :func:`jacobian_penalty`'s ``coef * sum_b ||J_b||_F^2``, as its forward left it.

    Two parts: the *direct* part, through the weights inside ``J = W_L D_{L-1} ... D_0 W_0`` (the ``dW_l`` of the
    Jacobian's chain and ``W_L``'s), and, for tanh, the part through the activation derivatives ``d_l = 1 - h_l^2``,
    which depend on the layers' pre-activations ``z_l``: an extra ``dL/dz_l = -2 h_l d_l * (d d_l)`` at each hidden
    layer that reaches the weights and biases by ordinary backprop through the network's forward graph.

    :meth:`before_backward` adds the direct part and returns the extra ``dL/dz_l`` for the network's own backward to
    add to its ``dL/dz_l`` (the hand-derived update: one backprop carries both, ``ppo-rlvr-prm`` >= 1.5.0);
    :meth:`add` makes the whole gradient on its own (the backprop by itself; what 1.4.0's update ran)."""

    def __init__(self, parts: Callable[[], list[torch.Tensor] | None], acts: list[torch.Tensor], d: list[torch.Tensor],
                 layers: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]) -> None:  # fmt: skip
        self._parts, self._acts, self._d, self._layers = parts, acts, d, layers

    def before_backward(self) -> list[torch.Tensor] | None:
        """Add the direct part to the layers' gradients; return the extra ``dL/dz_l`` ``(B, H_l)`` of every hidden layer
        (None for ReLU: its derivative does not depend on ``z`` almost everywhere), for the network's backward, which
        must then *accumulate* into the gradients."""
        return self._parts()

    def add(self) -> None:
        """Add the whole gradient to the layers' gradients, the activation derivatives' part backpropagated here."""
        dz = self._parts()
        if dz is None:
            return
        acts, d, layers = self._acts, self._d, self._layers
        g_h = None
        for i in range(len(dz) - 1, -1, -1):
            g_z = dz[i] if g_h is None else torch.addcmul(dz[i], g_h, d[i])
            _add_mm(layers[i][1], g_z.t(), acts[i])
            bias_grad = layers[i][2]
            assert bias_grad is not None
            bias_grad.add_(g_z.sum(0))
            if i:
                g_h = torch.mm(g_z, layers[i][0])


def jacobian_penalty(
    acts: list[torch.Tensor],
    layers: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]],
    tanh: bool,
    coef: float,
    probes: torch.Tensor | None = None,
) -> tuple[np.ndarray, JacobianPenaltyGrad]:
    """``||d out / d x||_F^2`` per sample of an MLP ``x -> (Linear, act)* -> Linear`` and, by hand, the gradient of
    ``coef * sum_b ||J_b||_F^2`` w.r.t. its weights and biases (what autograd's double backward gives, up to float
    rounding; tested).

    Reverse mode, as autograd would (``P`` outputs are fewer than the inputs here): with ``d_l = act'(z_l)``
    (``1 - h_l^2`` for tanh, ``[z_l > 0]`` for ReLU), ``A'_{L-1} = W_L D_{L-1}``, ``A_l = A'_l W_l`` and
    ``A'_{l-1} = A_l D_{l-1}``, the Jacobian is ``J = A_1`` (per sample, ``(P, F)``; all samples in one matrix
    product per layer). Backward from ``dJ = 2 coef J``: ``dW_l = sum_b A'_l^T dA_l``, ``dA'_l = dA_l W_l^T``, then
    ``dA_{l+1} = dA'_l D_l`` and ``d d_l = sum_p dA'_l * A_{l+1}`` (``W_L`` itself for the top layer), which reaches
    ``z_l`` through ``d d_l / dz_l = -2 h_l d_l`` (tanh; 0 for ReLU) and from there the weights and biases by
    ordinary backprop (:class:`JacobianPenaltyGrad`: by the network's own backward in the update since
    ``ppo-rlvr-prm`` 1.5.0, which saves that backprop's products).

    The rows of every sample's ``A`` are laid out row-major, ``(R, B, width)`` (since ``ppo-rlvr-prm`` 1.4.0;
    ``(B, R, width)`` before): a sample's activation derivatives then broadcast over the outer dimension and the sums
    over rows run over it, both ~2x faster in ATen than over a middle dimension. A product with fewer than 16 output
    columns runs zero-padded to 16 where the batch is its outer dimension (:func:`_mm_padded`, since 1.5.0; transposed
    in 1.4.0) and transposed where the batch is its inner one (:func:`_mm`).

    With ``probes`` ``(K, B, P)`` (Hutchinson's estimate, as :func:`suite.algorithms.ppo_rlvr_prm.
    input_gradient_penalty` with ``probes = K``: ``mean_k ||v_k^T J_b||^2``, unbiased for ``||J_b||_F^2``) the same
    passes run on the ``K`` rows ``v_k^T J_b`` per sample instead of the ``P`` rows of ``J_b``: the top factor is
    ``v_k^T W_L`` (one per sample) and ``W_L``'s gradient ``sum_{b,k} v_{b,k} dA_{L,b,k}``.

    Args:
        acts, layers: from :meth:`PolicyKernel.policy_network`.
        coef: the loss's factor on the *sum* over samples.
        probes: None (exact) or the probe vectors ``(K, B, P)``, drawn by the caller.

    Returns:
        ``(||J_b||_F^2 (or its estimate) per sample (B,), its gradient)`` (:class:`JacobianPenaltyGrad`).
    """
    hidden = acts[1:]
    weights = [w for w, _, _ in layers]
    L = len(weights)
    B = acts[0].shape[0]
    if L == 1:
        return _linear_jacobian_penalty(acts, layers, coef, probes)
    # tanh: 1 - h^2 in one call (h * h rounded, then subtracted from 1: as rsub(h * h, 1))
    d = [torch.addcmul(_ONE, h, h, value=-1.0) if tanh else (h > 0).to(h.dtype) for h in hidden]  # (B, H_l)
    if probes is None:
        K, v = 1, None
        above = weights[-1].unsqueeze(1)  # A_L = W_L for every sample, (P, 1, H_{L-1})
    else:
        K, v = probes.shape[0], probes
        above = torch.matmul(probes, weights[-1])  # A_L = v^T W_L per sample, (K, B, H_{L-1})
    R = above.shape[0]  # rows per sample: P (exact) or K (probes)
    # a_primes[l] = A'_l (R, B, H_l) for the hidden layers l = 0..L-2; a_above[l] = A_{l+1} feeding it
    a_above: list[torch.Tensor] = [torch.empty(0)] * (L - 1)
    a_primes: list[torch.Tensor] = [torch.empty(0)] * (L - 1)
    jac = above
    for i in range(L - 2, -1, -1):
        a_above[i] = above
        a_primes[i] = above * d[i]
        jac = _mm_padded(a_primes[i].view(R * B, -1), weights[i])  # (R * B, H_{i-1} or F)
        above = jac.view(R, B, -1) if i else jac
    per_sample = jac.view(R, B, -1).square().sum((0, 2))  # (B,)
    if K > 1:
        per_sample = per_sample / K

    def parts() -> list[torch.Tensor] | None:
        g = jac * (2.0 * coef / K)  # dA_1, (R * B, F)
        g_d: list[torch.Tensor] = [torch.empty(0)] * (L - 1)
        for i in range(L - 1):
            ap = a_primes[i].view(R * B, -1)
            _add_mm(layers[i][1], ap.t(), g)  # dW_i = A'_i^T dA_i, (H_i, H_{i-1} or F)
            g_ap = torch.mm(g, weights[i].t()).view(R, B, -1)  # dA'_i
            if tanh:
                g_d[i] = (g_ap * a_above[i]).sum(0) if R > 1 else g_ap[0] * a_above[i][0]  # (B, H_i)
            g_above = g_ap * d[i]  # dA_{i+1}
            if i < L - 2:
                g = g_above.view(R * B, -1)
            elif v is None:
                layers[L - 1][1].add_(g_above.sum(1))  # A_L = W_L for every sample
            else:  # A_L = v^T W_L
                layers[L - 1][1].addmm_(v.view(K * B, -1).t(), g_above.view(K * B, -1))
        if not tanh:
            return None
        # d d_i / dz_i = -2 h_i d_i: the extra dL/dz_i of each hidden layer
        return [g_d[i].mul_(hidden[i]).mul_(d[i]).mul_(-2.0) for i in range(L - 1)]

    return per_sample.numpy(), JacobianPenaltyGrad(parts, acts, d, layers)


def _linear_jacobian_penalty(
    acts: list[torch.Tensor],
    layers: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]],
    coef: float,
    probes: torch.Tensor | None,
) -> tuple[np.ndarray, JacobianPenaltyGrad]:
    """:func:`jacobian_penalty` of a policy with no hidden layer, ``out = W x + b``: its Jacobian is ``W`` for every
    sample. Exact: ``||W||_F^2`` per sample, gradient ``2 coef B W``. With probes ``(K, B, P)``: ``mean_k ||v_k^T
    W||^2`` per sample, gradient ``(2 coef / K) V^T (V W)`` over the ``K B`` probe rows ``V``. (Before
    ``ppo-rlvr-prm`` 1.5.0 the general passes ran here: the exact penalty failed on the shapes, and with probes
    the value summed over the batch instead of the Jacobian's columns and the gradient was left out.)"""
    w, w_grad, _ = layers[0]
    B = acts[0].shape[0]
    # the direct part alone: with no activation derivative there is nothing for the backprop (parts return None)
    if probes is None:
        per_sample = torch.full((B,), float(w.square().sum()))

        def parts() -> None:
            w_grad.add_(w, alpha=2.0 * coef * B)

    else:
        K = probes.shape[0]
        v = probes.reshape(K * B, -1)
        rows = torch.mm(v, w)  # v_k^T W per sample, (K * B, F)
        per_sample = rows.square().sum(1).view(K, B).sum(0) / K

        def parts() -> None:
            w_grad.addmm_(v.t(), rows, alpha=2.0 * coef / K)

    return per_sample.numpy(), JacobianPenaltyGrad(parts, acts, [], layers)


def kernel_for(policy: ActorCritic, flat: FlatParameters | None = None) -> PolicyKernel | None:
    """A :class:`PolicyKernel` for ``policy`` when the hand-derived path covers it, else None (use autograd):
    vector observations, plain MLP policy and value networks (``nn.Sequential``), categorical or Gaussian head.
    With the policy's :class:`FlatParameters` packed in :func:`parameter_order`, twin MLPs run as one."""
    if policy.image or not isinstance(policy.head, CategoricalHead | GaussianHead):
        return None
    if not isinstance(policy.pi, nn.Sequential) or not (policy.vf is None or isinstance(policy.vf, nn.Sequential)):
        return None
    return PolicyKernel(policy, flat)
