"""The trainable parameters of a module packed into one buffer, and one fused Adam step on it.

Why: with every parameter a view of one contiguous buffer (and every gradient a view of another), the global
gradient norm, its clip, the gradient statistics the stability report keeps and the optimiser step are one call each
on the whole network, instead of a call per parameter tensor; the module, its ``state_dict`` and autograd keep
working unchanged. Every trainer's optimiser step (:class:`suite.algorithms.core.GradientStepper`) runs on these,
whether its gradient came from autograd or from an accelerator.
"""

from __future__ import annotations

import torch
from torch import nn


class FlatParameters:
    """The trainable parameters of a module in one contiguous float32 buffer, their gradients in another.

    After construction every parameter is a view of :attr:`data` and its ``.grad`` a view of :attr:`grad`, so
    the module, its ``state_dict`` and autograd keep working unchanged (autograd accumulates into an existing
    ``.grad`` in place when it is not building a graph). Never set a parameter's ``.grad`` to None.
    """

    def __init__(self, params: list[nn.Parameter]):
        self.params = [p for p in params if p.requires_grad]
        device = self.params[0].device if self.params else torch.device("cpu")
        if any(p.dtype != torch.float32 or p.device != device for p in self.params):
            raise ValueError("FlatParameters holds float32 parameters on one device")
        total = sum(p.numel() for p in self.params)
        self.data = torch.empty(total, device=device)
        """``(n_params,)`` every trainable parameter, in ``params`` order."""
        self.grad = torch.zeros(total, device=device)
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


class FlatAdam:
    """Adam (Kingma & Ba 2015) on a :class:`FlatParameters`, exactly ``torch.optim.Adam(fused=True)``'s kernel."""

    def __init__(self, flat: FlatParameters, eps: float, betas: tuple[float, float] = (0.9, 0.999)):
        self.flat = flat
        self.eps = eps
        self.beta1, self.beta2 = betas
        self.exp_avg = torch.zeros_like(flat.data)
        self.exp_avg_sq = torch.zeros_like(flat.data)
        self.step_count = torch.zeros((), device=flat.data.device)  # float32, as torch.optim keeps it

    def step(self, lr: float) -> None:
        if not lr >= 0.0:  # torch.optim.Adam's own check (its message), which the fused kernel does not make
            raise ValueError(f"Invalid learning rate: {lr}")
        self.step_count.add_(1.0)
        torch._fused_adam_(
            [self.flat.data], [self.flat.grad], [self.exp_avg], [self.exp_avg_sq], [], [self.step_count],
            lr=lr, beta1=self.beta1, beta2=self.beta2, weight_decay=0.0, eps=self.eps, amsgrad=False, maximize=False,
        )  # fmt: skip
