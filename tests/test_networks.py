"""The shared network pieces: the running observation statistics are bit-identical to their torch form."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from suite.algorithms.networks import RunningMeanStd


class TorchRunningMeanStd:
    """``RunningMeanStd`` as torch ops, the form every algorithm used up to version 1.3.0 (the reference)."""

    def __init__(self, shape: tuple[int, ...], epsilon: float = 1e-4):
        self.mean = torch.zeros(shape, dtype=torch.float64)
        self.var = torch.ones(shape, dtype=torch.float64)
        self.count = torch.tensor(epsilon, dtype=torch.float64)

    def update(self, x: torch.Tensor) -> None:
        x = x.to(torch.float64)
        b_mean, b_var, b_count = x.mean(0), x.var(0, unbiased=False), x.shape[0]
        delta = b_mean - self.mean
        tot = self.count + b_count
        self.mean += delta * b_count / tot
        m2 = self.var * self.count + b_var * b_count + delta.square() * self.count * b_count / tot
        self.var.copy_(m2 / tot)
        self.count.copy_(tot)

    def normalize(self, x: torch.Tensor, clip: float = 10.0) -> torch.Tensor:
        std = torch.sqrt(self.var + 1e-8)
        return torch.clamp((x - self.mean) / std, -clip, clip).to(torch.float32)


@pytest.mark.parametrize("batch", [1, 2, 8, 32, 64])
@pytest.mark.parametrize("features", [1, 4, 11, 26])
def test_running_mean_std_is_bit_identical_to_the_torch_form(batch: int, features: int) -> None:
    rng = np.random.default_rng(batch * 100 + features)
    new, ref = RunningMeanStd((features,)), TorchRunningMeanStd((features,))
    offset = rng.standard_normal(features) * 50
    for step in range(60):
        scale = 10.0 ** rng.uniform(-3, 3)
        x = torch.from_numpy((rng.standard_normal((batch, features)) * scale + offset).astype(np.float32))
        if step == 7:
            x[0, 0] = 1e6  # far outside: the clip is hit
        new.update(x)
        ref.update(x)
        assert torch.equal(new.mean, ref.mean) and torch.equal(new.var, ref.var) and torch.equal(new.count, ref.count)
        out, expected = new.normalize(x), ref.normalize(x)
        assert out.dtype == torch.float32 and out.shape == x.shape
        assert torch.equal(out, expected)


def test_running_mean_std_keeps_working_after_a_state_dict_round_trip() -> None:
    rng = np.random.default_rng(0)
    a = RunningMeanStd((5,))
    for _ in range(3):
        a.update(torch.from_numpy(rng.standard_normal((8, 5)).astype(np.float32)))
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = RunningMeanStd((5,))
    b.load_state_dict(torch.load(buf))
    x = torch.from_numpy(rng.standard_normal((8, 5)).astype(np.float32))
    a.update(x)
    b.update(x)  # the numpy views follow the loaded buffers
    assert torch.equal(a.mean, b.mean) and torch.equal(a.var, b.var) and float(b.count) == pytest.approx(32.0001)
    assert torch.equal(a.normalize(x), b.normalize(x))
    assert b.state_dict()["count"].item() == a.count.item()
