"""The shared on-policy core: GAE in closed form, reward normalisation, gradient statistics, bootstrapping."""

import numpy as np
import pytest
import torch

from suite.algorithms.core import (
    ArrayObsStore,
    Buffer,
    Diverged,
    FrameObsStore,
    GradientStepper,
    RewardNormalizer,
    compute_gae,
    explained_variance,
    resolve_obs_storage_dtype,
)
from suite.config import Schedule
from suite.errors import UserError


def test_gae_constant_value_closed_form():
    # SB3 tests/test_gae.py idea: reward 1 per step, V = 0 everywhere, one env, episode of 4 steps.
    # With V = 0, delta_t = r_t and A_t = sum_k (gamma*lam)^k r_{t+k} up to the episode end.
    gamma, lam = 0.9, 0.8
    rewards = np.ones((4, 1), dtype=np.float32)
    values = np.zeros((4, 1), dtype=np.float32)
    dones = np.array([[0], [0], [0], [1]], dtype=np.float32)
    adv, ret = compute_gae(rewards, values, dones, np.array([123.0]), gamma, lam)
    g = gamma * lam
    expected = [1 + g + g**2 + g**3, 1 + g + g**2, 1 + g, 1.0]
    np.testing.assert_allclose(adv[:, 0], expected, rtol=1e-6)
    np.testing.assert_allclose(ret, adv + values)


def test_gae_lambda_one_gives_discounted_return_with_bootstrap():
    gamma = 0.5
    rewards = np.array([[1.0], [2.0], [3.0]], dtype=np.float32)
    values = np.array([[0.5], [0.25], [1.0]], dtype=np.float32)
    dones = np.zeros((3, 1), dtype=np.float32)
    last = np.array([8.0], dtype=np.float32)
    _, ret = compute_gae(rewards, values, dones, last, gamma, 1.0)
    # Monte-Carlo return bootstrapped with V(s_3) = 8: 1 + .5*2 + .25*3 + .125*8 = 3.75
    assert ret[0, 0] == pytest.approx(3.75)
    assert ret[2, 0] == pytest.approx(3 + 0.5 * 8)


def test_gae_does_not_leak_across_episode_boundary():
    rewards = np.array([[0.0, 0.0], [10.0, 0.0]], dtype=np.float32)
    values = np.zeros((2, 2), dtype=np.float32)
    dones = np.array([[1.0, 0.0], [0.0, 0.0]], dtype=np.float32)
    adv, _ = compute_gae(rewards, values, dones, np.zeros(2, dtype=np.float32), 0.99, 0.95)
    assert adv[0, 0] == 0.0  # the reward 10 belongs to the next episode
    assert adv[1, 0] == pytest.approx(10.0)


def test_reward_normalizer_scales_by_running_return_std_and_resets_on_done():
    norm = RewardNormalizer(n_envs=1, gamma=1.0)
    out = norm(np.array([2.0]), np.array([False]))
    # After one update the running var is dominated by the single return 2 (count 1e-4 prior of var 1).
    expected_var = (1.0 * 1e-4 + 0.0 * 1 + (2.0 - 0.0) ** 2 * 1e-4 * 1 / (1 + 1e-4)) / (1 + 1e-4)
    assert out[0] == pytest.approx(np.clip(2.0 / np.sqrt(expected_var + 1e-8), -10, 10))
    norm(np.array([1.0]), np.array([True]))
    assert norm.ret[0] == 0.0


def test_gradient_stepper_variance_across_minibatches():
    w = torch.nn.Parameter(torch.zeros(2))
    stepper = GradientStepper([w], Schedule("constant", 0.0, 0.0), max_grad_norm=0.0)
    stepper.begin_update(0.0)
    # Loss a.w has gradient a: minibatch grads (1, 0) and (3, 0): mean (2, 0), E||g - mean||^2 = 1.
    stepper.step((torch.tensor([1.0, 0.0]) * w).sum())
    stepper.step((torch.tensor([3.0, 0.0]) * w).sum())
    m = stepper.end_update()
    assert m["grad_var"] == pytest.approx(1.0)
    assert m["grad_norm"] == pytest.approx(2.0)


def test_gradient_stepper_snapshot_puts_back_everything_a_step_changes():
    """Steps taken after a snapshot and undone by it leave the next steps exactly as without them."""

    def run(detour: bool) -> tuple[torch.Tensor, dict[str, float]]:
        w = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))
        stepper = GradientStepper([w], Schedule("constant", 1e-2, 1e-2), max_grad_norm=0.5)
        stepper.begin_update(0.0)
        stepper.step((torch.tensor([1.0, 2.0, 0.0]) * w).square().sum())
        if detour:
            before = w.detach().clone()
            restore = stepper.snapshot()
            for a in (5.0, -3.0):
                stepper.step((a * w).square().sum())
            assert not torch.equal(w.detach(), before)
            restore()
            assert torch.equal(w.detach(), before)
        stepper.step((torch.tensor([0.0, 1.0, 3.0]) * w).square().sum())
        return w.detach().clone(), stepper.end_update() | {"step": float(stepper.adam.step_count)}

    (w_plain, m_plain), (w_detour, m_detour) = run(False), run(True)
    assert torch.equal(w_plain, w_detour) and m_plain == m_detour and m_plain["step"] == 2.0


def test_gradient_stepper_flags_non_finite_loss():
    w = torch.nn.Parameter(torch.zeros(1))
    stepper = GradientStepper([w], Schedule("constant", 1e-3, 1e-3), max_grad_norm=0.5)
    with pytest.raises(Diverged):
        stepper.step(w.sum() * float("nan"))


def test_gradient_stepper_flags_a_non_finite_parameter_and_averages_norms_as_numpy():
    w = torch.nn.Parameter(torch.zeros(3))
    stepper = GradientStepper([w], Schedule("constant", 1e-3, 1e-3), max_grad_norm=0.0)
    stepper.check_finite()
    for bad in (float("inf"), float("-inf"), float("nan")):
        with torch.no_grad():
            w[1] = bad
        with pytest.raises(Diverged, match="non-finite"):
            stepper.check_finite()
    with torch.no_grad():
        w.zero_()
    stepper.begin_update(0.0)
    rng = np.random.default_rng(0)
    for _ in range(21):
        stepper.step((torch.from_numpy(rng.standard_normal(3).astype(np.float32)) * w).sum())
    assert stepper.end_update()["grad_norm"] == float(np.mean(stepper._norms))


def test_explained_variance_is_the_numpy_formula_bitwise():
    rng = np.random.default_rng(1)
    for n, dtype in ((256, np.float32), (2048, np.float32), (7, np.float64)):
        y = (rng.standard_normal(n) * 30 + 5).astype(dtype)
        p = (y + rng.standard_normal(n) * 3).astype(dtype)
        want = 1.0 - float(np.var(y - p)) / float(np.var(y))
        assert explained_variance(p, y) == want
        assert explained_variance(p[::2], y[::2]) == 1.0 - float(np.var(y[::2] - p[::2])) / float(np.var(y[::2]))
    assert np.isnan(explained_variance(np.zeros(4, np.float32), np.full(4, 2.0, np.float32)))


# -- GAE in chunks ----------------------------------------------------------------------------------------
def _gae_reference(rewards, values, dones, last_values, gamma, lam, delta_weights=None):
    """The per-step loop the suite used before chunking (kept here as the oracle)."""
    adv = np.zeros_like(rewards, dtype=np.float32)
    last = np.zeros(rewards.shape[1:], dtype=np.float32)
    next_values = last_values.astype(np.float32)
    for t in range(rewards.shape[0] - 1, -1, -1):
        non_terminal = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_values * non_terminal - values[t]
        if delta_weights is not None:
            delta = delta * delta_weights[t]
        last = delta + gamma * lam * non_terminal * last
        adv[t] = last
        next_values = values[t]
    return adv


@pytest.mark.parametrize("chunk", [0, 1, 3, 7, 64, 200])
def test_gae_is_bitwise_the_same_for_every_chunk_size(chunk):
    rng = np.random.default_rng(0)
    T, N = 64, 5
    rewards = rng.normal(size=(T, N)).astype(np.float32)
    values = rng.normal(size=(T, N)).astype(np.float32)
    dones = (rng.random((T, N)) < 0.1).astype(np.float32)
    last = rng.normal(size=N).astype(np.float32)
    weights = rng.random((T, N)).astype(np.float32)
    for w in (None, weights):
        adv, ret = compute_gae(rewards, values, dones, last, 0.99, 0.95, delta_weights=w, chunk=chunk)
        np.testing.assert_array_equal(adv, _gae_reference(rewards, values, dones, last, 0.99, 0.95, w))
        np.testing.assert_array_equal(ret, (adv + values).astype(np.float32))


# -- storage ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_frame_store_keeps_each_frame_once_and_rebuilds_the_exact_stacks(backend):
    """Stacks of 4 frames sharing 3 with the previous step are stored as one new frame; a reset (any stack that
    does not continue the previous one) stores all 4; gathering rebuilds every stack exactly."""
    T, N, S = 6, 3, 4
    rng = np.random.default_rng(0)
    frames = [[rng.integers(0, 256, (5, 5), dtype=np.uint8) for _ in range(S)] for _ in range(N)]
    stacks = np.zeros((T, N, S, 5, 5), dtype=np.uint8)
    for t in range(T):
        for n in range(N):
            if t == 3 and n == 1:  # env 1 resets at t=3: a stack of one repeated first frame, no shared history
                first = rng.integers(0, 256, (5, 5), dtype=np.uint8)
                frames[n] = [first] * S
            elif t > 0:
                frames[n] = frames[n][1:] + [rng.integers(0, 256, (5, 5), dtype=np.uint8)]
            stacks[t, n] = np.stack(frames[n])
    store = FrameObsStore(T, N, (S, 5, 5), backend)
    for t in range(T):
        store.put(t, torch.from_numpy(stacks[t]))
    # t=0: 4 frames per env; then 1 per env and step, except env 1's reset (4)
    assert store.used == N * S + (T - 1) * N + (S - 1)
    idx = torch.randperm(T * N)
    np.testing.assert_array_equal(store.batch(idx).numpy(), stacks.reshape(T * N, S, 5, 5)[idx.numpy()])
    np.testing.assert_array_equal(store.at(4).numpy(), stacks[4])
    np.testing.assert_array_equal(store.tensor().numpy(), stacks)  # the public API's (T, N, *shape) view
    assert tuple(store.shape) == stacks.shape and store[4, 1].equal(torch.from_numpy(stacks[4, 1]))
    assert store.used * 5 * 5 < stacks.nbytes / 2  # the frames held (the index rows are 8 bytes a slot)


def test_frame_store_grows_past_its_first_guess():
    store = FrameObsStore(4, 2, (4, 3, 3), "numpy")
    rng = np.random.default_rng(1)
    stacks = rng.integers(0, 256, (4, 2, 4, 3, 3), dtype=np.uint8)  # nothing chains: every step stores 4 frames
    for t in range(4):
        store.put(t, torch.from_numpy(stacks[t]))
    assert store.used == 4 * 2 * 4
    np.testing.assert_array_equal(store.batch(torch.arange(8)).numpy(), stacks.reshape(8, 4, 3, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_array_store_reads_as_the_public_apis_tensor(dtype):
    """API 1.0 promised ``Rollout.obs`` as a ``(T, N, *shape)`` tensor: shape, reshape and indexing still work."""
    x = torch.randn(5, 3, 4)
    store = ArrayObsStore(5, 3, (4,), dtype, "numpy")
    for t in range(5):
        store.put(t, x[t])
    want = x.to(dtype).float()
    assert tuple(store.shape) == (5, 3, 4) and store.tensor().dtype == torch.float32
    assert store.reshape(15, 4).equal(want.reshape(15, 4)) and store[2].equal(want[2])
    assert store.batch(torch.arange(15)).equal(want.reshape(15, 4))
    store.steps = 3  # a rollout cut at the budget: the tensor is the steps it filled
    assert tuple(store.shape) == (3, 3, 4) and store.reshape(9, 4).equal(want[:3].reshape(9, 4))


def test_obs_storage_dtype_resolution_and_errors():
    assert resolve_obs_storage_dtype("auto", image=True) == "uint8"
    assert resolve_obs_storage_dtype("auto", image=False) == "float32"
    assert resolve_obs_storage_dtype("float16", image=False) == "float16"
    with pytest.raises(UserError, match="needs image observations"):
        resolve_obs_storage_dtype("uint8", image=False)
    with pytest.raises(UserError, match="one of"):
        resolve_obs_storage_dtype("int4", image=True)


def test_buffer_backends_share_one_allocation():
    for backend in ("numpy", "torch"):
        buf = Buffer((3, 2), torch.float32, backend)
        buf.put(1, np.array([1.5, 2.5], dtype=np.float32))
        buf.put(2, torch.tensor([3.0, 4.0]))
        assert buf.t.data_ptr() == buf.np.ctypes.data
        np.testing.assert_array_equal(buf.np, [[0, 0], [1.5, 2.5], [3, 4]])
