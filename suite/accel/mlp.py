"""Hand-derived forward and backward passes of the suite's MLP policies (CPU).

Why: the networks of classic-control RL are tiny (two 64-unit MLPs), so a training step spends its time in the
per-call overhead of eager PyTorch (module ``__call__``, autograd graph nodes), not in arithmetic. The kernels here do
the same maths with a fixed, short sequence of ATen calls on tensors that share the module's storage:

* :class:`MLPKernel` runs ``Linear -> act -> ... -> Linear`` stacks forward (keeping the activations) and backward by
  hand, writing the weight gradients straight into the flat gradient buffer (:mod:`suite.accel.flat`), with the
  kernels autograd would use (``addmm``, ``mm``, ``sum``, ``tanh_backward``, ``threshold_backward``);
* :class:`TwinMLPKernel` runs the policy and value MLPs of the same hidden shape as one batched network;
* :class:`PolicyKernel` adds the action head's maths (categorical or diagonal Gaussian log-probabilities, entropies
  and their derivatives), so a loss accelerator supplies only ``dL/dlog_prob``, ``dL/dentropy`` and ``dL/dvalue``
  per sample; it is also the rollout's inference.

The hand-derived paths run under :func:`kernel_mode` (``torch.inference_mode``): no autograd graph is built on them,
and inference mode also skips ATen's version-counter bumps and view tracking (the same kernels, so the same numbers).
Where a policy is not covered (image observations and the Nature CNN, a Beta head, an LSTM or PopArt critic)
:func:`kernel_for` returns None and the trainers run the specification by autograd. ``docs/accel.md`` has what each
piece was measured to save.

Shapes: ``B`` samples, ``P`` policy outputs (logits or means), ``H`` value heads, ``A`` action dimensions.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch
from torch import nn

from suite.accel.flat import FlatParameters

if TYPE_CHECKING:  # the policy module's classes are imported where they are needed: no import of the algorithms here
    from suite.algorithms.networks import ActorCritic

LOG_2PI = math.log(2.0 * math.pi)

T = TypeVar("T")


def kernel_mode(on: bool = True) -> torch.inference_mode:
    """The grad mode of the hand-derived paths (rollout inference with a kernel, an update by hand, evaluation of an MLP
    policy): ``torch.inference_mode(on)``.

    Why: these paths never build an autograd graph, and inference mode also drops ATen's per-call bookkeeping for
    autograd (version-counter bumps on in-place ops, view tracking, the autograd dispatch keys), which on these tiny
    tensors is a measurable share of a step (``docs/accel.md``); the numbers are the same. Tensors made inside are
    inference tensors: autograd
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
    :func:`kernel_mode` as inference tensors (written without version counters or view tracking), outside it as
    normal tensors (an inference tensor cannot be written there)."""
    mode = torch.is_inference_mode_enabled()
    bufs = cache.get((key, mode))
    if bufs is None:
        bufs = cache[(key, mode)] = make()
    return bufs


_tanh_backward = torch.ops.aten.tanh_backward.default
_threshold_backward = torch.ops.aten.threshold_backward.default
_tanh_backward_out = torch.ops.aten.tanh_backward.grad_input
_threshold_backward_out = torch.ops.aten.threshold_backward.grad_input


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


# -- MLPs -------------------------------------------------------------------------------------------------
class MLPKernel:
    """Forward and backward of ``nn.Sequential(Linear, act, ..., Linear)`` by hand (no autograd graph).

    The weights are read through detached views of the module's parameters (so optimiser updates are seen);
    :meth:`backward` writes ``dL/dW``, ``dL/db`` into the parameters' ``.grad`` (views of a flat buffer).

    Above :data:`SMALL_BATCH` rows ``tanh`` is computed as ``2 sigmoid(2 z) - 1``, the doubling folded into the
    layer's ``addmm`` (exact: a power of two): within 2e-7 of ``torch.tanh``, and faster on the CPUs measured, where
    ``torch.tanh`` of a minibatch costs more than the matrix product before it. Its derivative is ``1 - h^2`` either
    way.
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
            # dW = dz^T h, (out, in); BLAS is several times faster computing a narrow first layer as (h^T dz)^T
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
``2 sigmoid(2 z) - 1`` form (two calls, but ``torch.tanh`` of a minibatch costs more than its matmul). The two agree
within 2e-7."""


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
    Half the calls of two :class:`MLPKernel`, the same arithmetic per network.
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
            if h_in.shape[2] < dz.shape[2]:  # narrow input layer: (h^T dz)^T is several times faster in BLAS
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
        from suite.algorithms.networks import CategoricalHead, GaussianHead

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
        buffers, most of a rollout inference's allocations are gone); ``docs/accel.md`` has the rollout time saved.
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


def kernel_for(policy: ActorCritic, flat: FlatParameters | None = None) -> PolicyKernel | None:
    """A :class:`PolicyKernel` for ``policy`` when the hand-derived path covers it, else None (use autograd): a policy
    on the CPU, vector observations, plain MLP policy and value networks (``nn.Sequential``), categorical or Gaussian
    head.
    With the policy's :class:`FlatParameters` packed in :func:`parameter_order`, twin MLPs run as one."""
    from suite.algorithms.networks import CategoricalHead, GaussianHead

    if policy.log_std.device.type != "cpu":  # the kernels are CPU code (numpy views of the parameters)
        return None
    if policy.image or not isinstance(policy.head, CategoricalHead | GaussianHead):
        return None
    if not isinstance(policy.pi, nn.Sequential) or not (policy.vf is None or isinstance(policy.vf, nn.Sequential)):
        return None
    return PolicyKernel(policy, flat)
