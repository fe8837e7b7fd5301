"""The shared network pieces: the running observation statistics are bit-identical to their torch form; the
Nature CNN's frame conversion and its lean first convolution give exactly what the plain forms give."""

from __future__ import annotations

import io

import gymnasium as gym
import numpy as np
import pytest
import torch

from suite.algorithms import networks
from suite.algorithms.networks import NatureCNN, RunningMeanStd


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


def _update_both_and_compare(new: RunningMeanStd, ref: TorchRunningMeanStd, x: torch.Tensor) -> None:
    """Fold ``x`` into both; the statistics and the normalised batch must be equal bit for bit."""
    new.update(x)
    ref.update(x)
    assert torch.equal(new.mean, ref.mean) and torch.equal(new.var, ref.var) and torch.equal(new.count, ref.count)
    out, expected = new.normalize(x), ref.normalize(x)
    assert out.dtype == torch.float32 and out.shape == x.shape
    assert torch.equal(out, expected)


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
        _update_both_and_compare(new, ref, x)


@pytest.mark.parametrize("batch", [1, 3, 7, 8, 9, 16, 17, 100, 1000, 4096])
def test_one_feature_path_is_bit_identical_to_the_torch_form(batch: int) -> None:
    """One feature takes the Python-float path (``_update_scalar`` and the normalisation's twin): torch's full-reduction
    variance, serial in double, and the same merge and clip, bit for bit, over scales from 1e-4 to 1e4 and offsets far
    from the mean (the clip hit both ways)."""
    rng = np.random.default_rng(batch)
    new, ref = RunningMeanStd((1,)), TorchRunningMeanStd((1,))
    for step in range(80):
        scale, offset = 10.0 ** rng.uniform(-4, 4), rng.uniform(-100, 100)
        x = torch.from_numpy((rng.standard_normal((batch, 1)) * scale + offset).astype(np.float32))
        if step in (5, 6):
            x[0, 0] = 1e7 if step == 5 else -1e7
        _update_both_and_compare(new, ref, x)
    assert new.normalize(torch.tensor([[float("nan")]])).isnan().all()


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


def _reference_frames(x: torch.Tensor) -> torch.Tensor:
    """The conversion up to 2026-12-04: a channels-last uint8 copy, then float, then / 255 in place."""
    return x.contiguous(memory_format=torch.channels_last).float().div_(255.0)


@pytest.mark.parametrize("channels", [1, 3, 4])
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("reuse", [False, True])
def test_frames_to_float_is_the_channels_last_conversion_bit_for_bit(channels, layout, reuse) -> None:
    x = torch.randint(0, 256, (5, channels, 9, 7), dtype=torch.uint8).contiguous(memory_format=layout)
    got, want = networks._frames_to_float(x, reuse=reuse), _reference_frames(x)
    assert got.dtype == torch.float32 and got.shape == want.shape and got.stride() == want.stride()
    assert torch.equal(got, want)
    assert torch.equal(x, x.clone())  # the frames themselves are not written to


def test_frames_to_float_reuses_a_bounded_set_of_buffers() -> None:
    """``reuse`` writes into one kept buffer per shape (overwritten by the next call of that shape: its callers keep
    nothing); at most _FRAME_BUFFER_SHAPES shapes are kept, the oldest dropped first; without ``reuse`` every call
    gets its own tensor."""
    networks._FRAME_BUFFERS.clear()
    x = torch.randint(0, 256, (2, 4, 6, 6), dtype=torch.uint8)
    a = networks._frames_to_float(x, reuse=True)
    b = networks._frames_to_float(x.flip(0), reuse=True)
    assert a.data_ptr() == b.data_ptr() and torch.equal(b, _reference_frames(x.flip(0)))
    assert networks._frames_to_float(x).data_ptr() != a.data_ptr()
    for batch in range(3, 3 + networks._FRAME_BUFFER_SHAPES):
        networks._frames_to_float(torch.zeros(batch, 4, 6, 6, dtype=torch.uint8), reuse=True)
    assert len(networks._FRAME_BUFFERS) == networks._FRAME_BUFFER_SHAPES and (2, 6, 6, 4) not in networks._FRAME_BUFFERS
    networks._FRAME_BUFFERS.clear()


def test_float_frames_are_scaled_without_being_written_to() -> None:
    x = torch.rand(3, 4, 6, 6) * 255
    keep = x.clone()
    assert torch.equal(networks._frames_to_float(x, reuse=True), x.contiguous(memory_format=torch.channels_last) / 255.0)
    assert torch.equal(x, keep)


def test_nature_cnn_gives_autograds_numbers_for_two_minibatches_in_a_row() -> None:
    """The lean first convolution (uint8 frames kept, float frames made again in a reused buffer for the weight
    gradient) against a plain autograd CNN on the float frames, two steps of different frames in a row (the second
    overwrites the first's buffer): the same outputs and gradients, bit for bit, and the frames' own layout either
    way."""
    torch.manual_seed(0)
    lean = NatureCNN(4)
    plain = NatureCNN(4)
    plain.load_state_dict(lean.state_dict())
    for step in range(2):
        frames = torch.randint(0, 256, (6, 4, 84, 84), dtype=torch.uint8)
        if step:
            frames = frames.contiguous(memory_format=torch.channels_last)
        lean.zero_grad()
        plain.zero_grad()
        out = lean(frames)
        out.square().sum().backward()
        ref = plain.net(_reference_frames(frames))
        ref.square().sum().backward()
        assert torch.equal(out, ref)
        for p, q in zip(lean.parameters(), plain.parameters(), strict=True):
            assert p.grad is not None and q.grad is not None and torch.equal(p.grad, q.grad)
        with torch.no_grad():
            assert torch.equal(lean(frames), ref)


@pytest.mark.parametrize(
    ("action_space", "cfg"),
    [
        (gym.spaces.Discrete(3), networks.NetConfig()),
        (gym.spaces.Discrete(5), networks.NetConfig(activation="relu", normalize_obs=True, pi_arch=(32,))),
        (gym.spaces.Box(-1.0, 1.0, (2,), np.float32), networks.NetConfig(log_std_init=-0.5)),
        (gym.spaces.Box(-1.0, 1.0, (2,), np.float32), networks.NetConfig(action_dist="beta")),
    ],
    ids=["categorical-tanh", "categorical-relu-normalised", "gaussian", "beta"],
)
def test_predictor_gives_predicts_actions_and_follows_in_place_updates(action_space, cfg) -> None:
    torch.manual_seed(0)
    policy = networks.ActorCritic(gym.spaces.Box(-5.0, 5.0, (4,), np.float32), action_space, cfg)
    if policy.obs_rms is not None:
        policy.obs_rms.update(torch.randn(16, 4) * 3 + 1)
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((10, 4)).astype(np.float32)
    predict = policy.predictor(True)
    np.testing.assert_array_equal(predict(obs), policy.predict(obs, deterministic=True))
    with torch.no_grad():  # an optimiser step: parameters change in place, the predictor sees it
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    expected = policy.predict(obs, deterministic=True)
    np.testing.assert_array_equal(predict(obs), expected)
    torch.manual_seed(1)
    sampled = policy.predict(obs, deterministic=False)
    torch.manual_seed(1)
    np.testing.assert_array_equal(policy.predictor(False)(obs), sampled)  # the same random stream


def test_predictor_of_an_image_policy_is_its_predict() -> None:
    torch.manual_seed(0)
    cfg = networks.NetConfig(pi_arch=(), vf_arch=())
    policy = networks.ActorCritic(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(6), cfg)
    obs = np.random.default_rng(0).integers(0, 256, (3, 4, 84, 84), dtype=np.uint8)
    np.testing.assert_array_equal(policy.predictor(True)(obs), policy.predict(obs, deterministic=True))
