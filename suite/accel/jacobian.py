"""The input-gradient penalty ``||d out / d x||_F^2`` of an MLP policy and its gradient, by hand (CPU).

Why: ``ppo-rlvr-prm``'s smoothness term needs the gradient of a gradient. By autograd that is a double backward
through the policy network, one per output (or per Hutchinson probe), each building a graph of graphs; here the
Jacobian of every sample comes from one batched reverse-mode pass per layer and its gradient from one backward pass
of those, sharing the network's own backward for the part through the activation derivatives
(:meth:`JacobianPenaltyGrad.before_backward`). It equals autograd's double backward up to float rounding (tested).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

_NARROW = 16
"""Below this many output columns MKL's sgemm can be several times slower on an ``(m, k) x (k, n)`` product of a few
hundred rows than on a rearranged form of it, and which form is slow depends on the CPU (``docs/accel.md``); from
``n >= 16`` the plain form is fast on every CPU measured. :func:`_mm` and :func:`_mm_padded` pick the form."""


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b``; a narrow output (:data:`_NARROW`) computed as the transpose of ``b^T a^T`` (a transposed view): used
    where the product's inner dimension is the batch (``A^T dA``), fast in this form on the CPUs measured."""
    return torch.mm(b.t(), a.t()).t() if b.shape[1] < _NARROW else torch.mm(a, b)


def _add_mm(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``out += a @ b`` (see :func:`_mm`)."""
    out.add_(_mm(a, b)) if b.shape[1] < _NARROW else out.addmm_(a, b)


def _mm_padded(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for many rows of ``a``; a narrow ``b`` (:data:`_NARROW`) zero-padded to :data:`_NARROW` columns and
    the product's first columns returned (a view): used where the batch is the product's outer dimension, it relies on
    products of 16 columns and more being fast (:data:`_NARROW`; ``docs/accel.md`` says where it was measured)."""
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
    add to its ``dL/dz_l`` (the accelerated update: one backprop carries both); :meth:`add` makes the whole gradient
    on its own (the backprop by itself: tests, and a caller without the network's backward)."""

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
    ordinary backprop (:class:`JacobianPenaltyGrad`: by the network's own backward in the update, which saves that
    backprop's products).

    The rows of every sample's ``A`` are laid out row-major, ``(R, B, width)``: a sample's activation derivatives then
    broadcast over the outer dimension and the sums over rows run over it, faster in ATen than over a middle
    dimension. A product with fewer than 16 output columns runs zero-padded to 16 where the batch is its outer
    dimension (:func:`_mm_padded`) and transposed where the batch is its inner one (:func:`_mm`). ``docs/accel.md``
    has the history of these choices (each one moved ``ppo-rlvr-prm``'s rounding, and its version).

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
    W||^2`` per sample, gradient ``(2 coef / K) V^T (V W)`` over the ``K B`` probe rows ``V``."""
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
