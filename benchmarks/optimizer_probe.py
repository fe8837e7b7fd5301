"""Which of torch's float ops and optimizer steps give the same bits on another CPU (issue 57, docs/kernels.md).

Prints, for this process, the parameter hash after three steps of each optimizer variant on 65,536 floats and on one
float, the hash of elementwise ops on 65,536 and 256 floats, and how many float32/float64 square roots of torch
differ from the correctly rounded ones (numpy's). Run it with the portable variables here and under an emulated CPU
and compare the two outputs line by line:

    export $(python -c "from suite import kernels; print(*(f'{k}={v}' for k, v in kernels.environ('portable').items()
             if k != 'NPY_DISABLE_CPU_FEATURES'))"); export NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR"
    python benchmarks/optimizer_probe.py > host.txt
    qemu-x86_64 -cpu Haswell-v4 python benchmarks/optimizer_probe.py > haswell.txt
    diff host.txt haswell.txt
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def _hash(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest()[:16]


OPTIMIZERS = {
    "rmsprop-foreach": lambda p: torch.optim.RMSprop(p, lr=7e-4, alpha=0.99, eps=1e-5, foreach=True),
    "rmsprop-single": lambda p: torch.optim.RMSprop(p, lr=7e-4, alpha=0.99, eps=1e-5, foreach=False),
    "adam-foreach": lambda p: torch.optim.Adam(p, lr=3e-4, foreach=True),
    "adam-single": lambda p: torch.optim.Adam(p, lr=3e-4, foreach=False),
    "adam-fused": lambda p: torch.optim.Adam(p, lr=3e-4, fused=True),
}


def main() -> None:
    print("aten", torch.backends.cpu.get_cpu_capability())
    for name, make in OPTIMIZERS.items():
        for n in (65536, 1):
            g = torch.Generator().manual_seed(0)
            w = torch.randn(n, generator=g, requires_grad=True)
            opt = make([w])
            for _ in range(3):
                opt.zero_grad()
                (w * torch.randn(n, generator=g)).sum().backward()
                opt.step()
            print(f"{name} n={n}", _hash(w))
    g = torch.Generator().manual_seed(1)
    for n in (65536, 256):
        x = torch.rand(n, generator=g) * 4 + 1e-3
        y = torch.randn(n, generator=g)
        ops = {"sqrt": x.sqrt(), "foreach_sqrt": torch._foreach_sqrt([x])[0], "pow0.5": x.pow(0.5),
               "sqrt-f64": x.double().sqrt(), "exp": y.exp(), "log": x.log(), "tanh": y.tanh(), "sin": y.sin(),
               "cos": y.cos(), "rsqrt": x.rsqrt(), "sigmoid": y.sigmoid(), "log1p": x.log1p(), "expm1": y.expm1(),
               "erf": y.erf(), "div": y / (x + 1e-5)}  # fmt: skip
        for op, out in ops.items():
            print(f"{op} n={n}", _hash(out))
    x = torch.rand(65536, generator=torch.Generator().manual_seed(1)) * 4 + 1e-3
    exact32 = np.sqrt(x.numpy().astype(np.float64)).astype(np.float32)
    print("torch sqrt f32 not correctly rounded", int((x.sqrt().numpy() != exact32).sum()), "of", x.numel())
    xd = x.double()
    print("torch sqrt f64 differing from numpy's", int((xd.sqrt().numpy() != np.sqrt(xd.numpy())).sum()), "of", x.numel())


if __name__ == "__main__":
    main()
