"""The hand-derived passes of :mod:`suite.accel` piece by piece against autograd: kernels, penalties, the flat Adam and
the numpy reductions (the parity harness, ``tests/test_accel_parity.py``, checks whole accelerated losses)."""

from __future__ import annotations

import dataclasses
import types
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from suite.accel.derivatives import ppo_loss_derivatives
from suite.accel.flat import FlatAdam, FlatParameters
from suite.accel.mlp import MLPKernel, kernel_for, parameter_order, twin_compatible
from suite.algorithms.core import Minibatch, net_config
from suite.algorithms.networks import ActorCritic
from suite.algorithms.ppo import PPOConfig, ppo_policy_value_loss

CARTPOLE = (gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2))
HOPPER = (gym.spaces.Box(-1, 1, (11,), np.float32), gym.spaces.Box(-1, 1, (3,), np.float32))


def _policy(spaces, n_value_heads=1, **cfg_overrides):
    cfg = PPOConfig(**cfg_overrides)
    torch.manual_seed(0)
    return cfg, ActorCritic(*spaces, net_config(cfg, n_value_heads=n_value_heads))


def _minibatch(policy, B, H, seed=1):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(B, policy.pi[0].in_features, generator=g)
    if policy.discrete:
        actions = torch.randint(0, policy.head.n_params, (B,), generator=g)
    else:
        actions = torch.randn(B, *policy.action_shape, generator=g)
    with torch.no_grad():
        logp, _, _, _ = policy.evaluate_actions(obs, actions)
    # old log-probs spread so that some ratios fall outside the clip range on both sides
    old = logp + 0.3 * torch.randn(B, generator=g)
    adv = torch.randn(B, generator=g)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    return Minibatch(obs, actions, old, torch.randn(B, H, generator=g), adv, torch.randn(B, generator=g))


def _grads_autograd(cfg, policy, flat, mb, clip):
    flat.zero_grad()
    loss, metrics, _, _ = ppo_policy_value_loss(types.SimpleNamespace(cfg=cfg, policy=policy), mb, clip)
    loss.backward()
    return float(loss.detach()), {k: float(v) for k, v in metrics.items()}, flat.grad.clone()


def _grads_fused(cfg, policy, flat, mb, clip):
    kernel = kernel_for(policy, flat)
    assert kernel is not None
    flat.zero_grad()
    logp, ent, values, state = kernel.evaluate(mb.obs, mb.actions)
    fl = ppo_loss_derivatives(cfg, mb, logp, ent, values, clip)
    kernel.backward(state, fl.dlogp, fl.dentropy, fl.dvalues)
    return float(fl.loss), {k: float(v) for k, v in fl.metrics.items()}, flat.grad.clone()


@pytest.mark.parametrize(
    ("spaces", "overrides"),
    [
        (CARTPOLE, {}),  # twin tanh MLPs, categorical
        (CARTPOLE, {"ent_coef": 0.01, "clip_range_vf": 0.2, "activation": "relu"}),
        (CARTPOLE, {"n_value_heads": 5, "ent_coef": 0.02}),  # a value ensemble
        (CARTPOLE, {"pi_arch": (32,), "vf_arch": (64, 64)}),  # different shapes: two separate kernels
        (HOPPER, {"ent_coef": 0.003}),  # Gaussian head with a learned log std
    ],
)
def test_fused_ppo_gradient_equals_autograd(spaces, overrides):
    cfg, policy = _policy(spaces, **overrides)
    H = overrides.get("n_value_heads", 1)
    flat = FlatParameters(parameter_order(policy))
    mb = _minibatch(policy, 256, H)
    loss_a, m_a, g_a = _grads_autograd(cfg, policy, flat, mb, clip=0.2)
    loss_f, m_f, g_f = _grads_fused(cfg, policy, flat, mb, clip=0.2)
    assert 0.05 < m_a["clip_fraction"] < 0.95  # both branches of the clipped surrogate are exercised
    # tanh is computed as 2 sigmoid(2z) - 1 in the kernel (within 2e-7): agreement to float32 rounding
    assert loss_f == pytest.approx(loss_a, rel=1e-5, abs=1e-6)
    for k in m_a:
        assert m_f[k] == pytest.approx(m_a[k], rel=1e-4, abs=1e-6), k
    torch.testing.assert_close(g_f, g_a, rtol=1e-4, atol=1e-6)


def test_micro_batches_accumulate_the_minibatch_gradient():
    cfg, policy = _policy(CARTPOLE, ent_coef=0.01)
    flat = FlatParameters(parameter_order(policy))
    kernel = kernel_for(policy, flat)
    mb = _minibatch(policy, 256, 1)
    _, _, whole = _grads_fused(cfg, policy, flat, mb, clip=0.2)
    flat.zero_grad()
    for j, part in enumerate(torch.arange(256).tensor_split(4)):
        sub = Minibatch(mb.obs[part], mb.actions[part], mb.old_log_probs[part], mb.old_values[part],
                        mb.advantages[part], mb.returns[part], weight=len(part) / 256)  # fmt: skip
        logp, ent, values, state = kernel.evaluate(sub.obs, sub.actions)
        fl = ppo_loss_derivatives(cfg, sub, logp, ent, values, 0.2)
        kernel.backward(state, fl.dlogp, fl.dentropy, fl.dvalues, accumulate=j > 0)
    torch.testing.assert_close(flat.grad, whole, rtol=1e-5, atol=1e-7)


def test_twin_kernel_matches_two_separate_mlps():
    _, policy = _policy(CARTPOLE)
    assert twin_compatible(policy)
    flat = FlatParameters(parameter_order(policy))
    twin = kernel_for(policy, flat).twin
    x = torch.randn(32, 4)
    params, values = twin.forward(x)
    torch.testing.assert_close(params, MLPKernel(policy.pi, "tanh").forward(x), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(values, MLPKernel(policy.vf, "tanh").forward(x), rtol=1e-6, atol=1e-7)
    with torch.no_grad():  # and the module (torch.tanh) within the stated 2e-7 per activation
        torch.testing.assert_close(params, policy.pi(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # twin tanh MLPs
        {"activation": "relu"},  # twin ReLU MLPs
        {"pi_arch": (32,), "vf_arch": (64, 64)},  # two separate kernels
    ],
)
def test_rollout_inference_writes_into_kept_buffers_with_the_forwards_values(overrides):
    """``infer`` (a rollout step's forward, outputs written into buffers kept per batch size and grad mode) gives the
    values of the forward (``_forward``) bit for bit, at small and large batches (the doubled tanh form above
    SMALL_BATCH), inside and outside inference mode, and after in-place parameter updates; a second call with as
    many rows writes over the first one's results (the documented contract), one with another batch size does not."""
    from suite.accel.mlp import SMALL_BATCH, kernel_mode

    _, policy = _policy(CARTPOLE, **overrides)
    flat = FlatParameters(parameter_order(policy))
    kernel = kernel_for(policy, flat)
    assert (kernel.twin is not None) == ("pi_arch" not in overrides)
    g = torch.Generator().manual_seed(3)
    for mode in (True, False, True):
        with kernel_mode(mode):
            for B in (8, SMALL_BATCH + 36, 8):
                x = torch.randn(B, 4, generator=g)
                ref = kernel._forward(x, True)
                params, values = kernel.infer(x)
                assert torch.equal(params, ref[0]) and torch.equal(values, ref[1])
                if mode:
                    assert params.is_inference()
        with torch.no_grad():
            flat.data.add_(0.01 * torch.randn(flat.data.shape, generator=g))  # an optimiser step, in place
    with kernel_mode():
        first = kernel.infer(torch.randn(8, 4, generator=g))
        kept = first[0].clone()
        other = kernel.infer(torch.randn(16, 4, generator=g))  # another batch size: other buffers
        assert torch.equal(first[0], kept) and other[0].data_ptr() != first[0].data_ptr()
        second = kernel.infer(torch.randn(8, 4, generator=g))
        assert second[0].data_ptr() == first[0].data_ptr() and not torch.equal(first[0], kept)


def test_kernel_sampling_is_the_heads_draw_bit_for_bit_and_a_subclassed_head_keeps_its_own():
    """The kernel's categorical sampling (its noise drawn into a kept buffer, the chosen log-probs picked in numpy)
    gives the actions and log-probs of ``head.sample`` on the log-probs plus torch's gather, from the same random
    stream, at every batch size it keeps a buffer for; a head subclass samples its own way."""
    from suite.algorithms.networks import CategoricalHead

    _, policy = _policy(CARTPOLE)
    kernel = kernel_for(policy, FlatParameters(parameter_order(policy)))
    assert kernel.plain_categorical
    for B in (8, 3, 8, 64):
        params = torch.randn(B, 2) * 3
        torch.manual_seed(B)
        actions, logp = kernel.sample(params)
        torch.manual_seed(B)
        logp_all = torch.log_softmax(params, -1)
        ref = policy.head.sample(logp_all, None)
        assert torch.equal(actions, ref)
        if B >= 8:
            assert 0 < int(ref.sum()) < B  # both actions drawn
        assert torch.equal(logp, logp_all.gather(-1, ref.unsqueeze(-1)).squeeze(-1))

    class FirstAction(CategoricalHead):
        def sample(self, params, extra):
            return torch.zeros(params.shape[0], dtype=torch.long)

    policy.head = FirstAction(2)
    kernel = kernel_for(policy, FlatParameters(parameter_order(policy)))
    assert not kernel.plain_categorical
    actions, logp = kernel.sample(torch.randn(8, 2))
    assert not actions.any() and logp.shape == (8,)


def test_flat_parameters_share_storage_with_the_module_and_autograd_fills_the_flat_grad():
    _, policy = _policy(CARTPOLE)
    flat = FlatParameters(parameter_order(policy))
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    flat.data.add_(1.0)
    after = policy.state_dict()
    assert all(torch.equal(after[k], before[k] + 1.0) for k in before if k != "log_std")  # log_std is not trainable
    flat.zero_grad()
    policy.pi(torch.randn(3, 4)).sum().backward()
    assert float(flat.grad.abs().sum()) > 0
    assert policy.pi[0].weight.grad.data_ptr() == flat.grad[flat._offsets[id(policy.pi[0].weight)] :].data_ptr()


def test_flat_adam_is_torch_adam():
    torch.manual_seed(0)
    w = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(4))]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in w]
    flat = FlatParameters(w)
    adam = FlatAdam(flat, eps=1e-5)
    opt = torch.optim.Adam(ref, lr=1e-2, eps=1e-5, fused=True)
    for step in range(5):
        g = [torch.randn_like(p) * (step + 1) for p in w]
        for p, q, gi in zip(w, ref, g, strict=True):
            p.grad.copy_(gi)
            q.grad = gi.clone()
        adam.step(1e-2)
        opt.step()
    for p, q in zip(w, ref, strict=True):
        assert torch.equal(p.detach(), q.detach())


def test_fast_mean_std_and_var_are_numpys_bitwise():
    """The hot path's reductions (advantage normalisation, the fused loss's means, an update's explained variance)
    equal ``np.mean``/``np.std``/``np.var`` bit for bit: dtype and value, contiguous or strided, float32/float64, any
    size, and booleans."""
    from suite.accel.reductions import fast_mean, fast_std, fast_var

    rng = np.random.default_rng(0)
    for trial in range(3000):
        n = int(rng.integers(2, 700))
        dtype = (np.float32, np.float64)[trial % 2]
        scale = 10 ** rng.uniform(-3, 4)
        a = (rng.standard_normal(n) * scale + rng.uniform(-5, 5) * scale).astype(dtype)
        if trial % 3 == 0:  # a column of a packed table, as SampleTable hands it over
            a = (rng.standard_normal((n, 3)) * scale).astype(dtype)[:, 1]
        elif trial % 3 == 1:
            a = a.reshape(-1, 1)
        pairs = (
            (fast_mean(a), a.mean()),
            (fast_std(a, ddof=1), a.std(ddof=1)),
            (fast_std(a), a.std()),
            (fast_var(a), a.var()),
            (fast_var(a, ddof=1), a.var(ddof=1)),
        )
        for got, want in pairs:
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
        b = a > 0
        assert type(fast_mean(b)) is type(b.mean()) and fast_mean(b) == b.mean()


def test_fast_normalize_and_fast_clip_are_the_numpy_formulas_bitwise():
    """The minibatch's advantage normalisation with its mean and deviations computed once equals the formula it
    replaced, ``(a - mean) / (std(ddof=1) + 1e-8)`` (``fast_mean``/``fast_std``, themselves numpy's), and
    ``fast_clip`` equals ``np.clip``: bit for bit, contiguous or a strided column."""
    from suite.accel.reductions import fast_clip, fast_mean, fast_normalize, fast_std

    rng = np.random.default_rng(1)
    for trial in range(2000):
        n = int(rng.integers(2, 600))
        dtype = (np.float32, np.float64)[trial % 2]
        scale = 10 ** rng.uniform(-4, 3)
        a = (rng.standard_normal((n, 4)) * scale + rng.uniform(-3, 3) * scale).astype(dtype)
        col = a[:, 1] if trial % 2 else np.ascontiguousarray(a[:, 1])
        want = (col - fast_mean(col)) / (fast_std(col, ddof=1) + 1e-8)
        assert np.array_equal(want, (col - col.mean()) / (col.std(ddof=1) + 1e-8))
        got = fast_normalize(col, 1e-8)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
        lo, hi = 1 - 0.2 * (trial % 3), 1 + 0.2 * (trial % 3)
        r = np.exp(col / scale * 0.3)
        r[0] = np.nan
        clipped = fast_clip(r, lo, hi)
        assert clipped.dtype == np.clip(r, lo, hi).dtype and clipped.tobytes() == np.clip(r, lo, hi).tobytes()


def test_normalising_many_minibatches_at_once_is_each_one_alone_bitwise():
    """``fast_normalize_rows`` equals ``fast_normalize`` of each row (float32/float64, widths 2 to 600, a strided
    column's rows), and an update's prepared block gets the advantages ``_micro_batches`` computes for each minibatch
    alone, with epochs that end in a shorter minibatch and with minibatches of one sample."""
    import types

    from suite.accel.reductions import fast_normalize, fast_normalize_rows
    from suite.algorithms.actor_critic import ActorCriticTrainer

    rng = np.random.default_rng(2)
    for trial in range(600):
        m, b = int(rng.integers(1, 40)), int(rng.integers(2, 600))
        dtype = (np.float32, np.float64)[trial % 2]
        scale = 10 ** rng.uniform(-4, 3)
        table = (rng.standard_normal((m * b, 3)) * scale + rng.uniform(-3, 3) * scale).astype(dtype)
        col = table[:, 1]
        got = fast_normalize_rows(col.reshape(m, b), 1e-8)
        for i in range(m):
            want = fast_normalize(col[i * b : (i + 1) * b], 1e-8)
            assert got[i].dtype == want.dtype and got[i].tobytes() == want.tobytes()

    for n, bs, epochs in ((256, 64, 4), (300, 64, 3), (10, 3, 2), (5, 1, 2), (7, 7, 1)):
        trainer = types.SimpleNamespace(
            cfg=types.SimpleNamespace(batch_size=bs, normalize_advantage=True, grad_accumulation=1)
        )
        rows = rng.standard_normal((n * epochs, 6)).astype(np.float32)
        table = types.SimpleNamespace(advantages=lambda r: r[:, 1])
        bounds = [(lo, min(lo + bs, end)) for end in range(n, (epochs + 1) * n, n) for lo in range(end - n, end, bs)]
        adv = ActorCriticTrainer._block_advantages(trainer, table, rows, bounds)
        for lo, hi in bounds:
            alone = fast_normalize(rows[lo:hi, 1], 1e-8) if hi - lo > 1 else rows[lo:hi, 1]
            assert adv[lo:hi].tobytes() == alone.tobytes()


def test_the_sigmoid_form_in_one_call_equals_mul_then_sub():
    """``_hidden_act``'s ``2 s - 1`` as one ``add(-1, s, alpha=2)`` equals ``s.mul_(2).sub_(1)`` bit for bit (2 s is
    exact, so both round once), on every sigmoid value range including subnormal-small ones."""
    from suite.accel.mlp import _hidden_act

    g = torch.Generator().manual_seed(0)
    for shape in ((2, 256, 64), (300, 64), (2, 65, 7)):
        z = torch.randn(*shape, generator=g) * 12
        z.view(-1)[:4] = torch.tensor([-1e4, -100.0, 0.0, 1e4])
        want = torch.sigmoid(2 * z).mul_(2.0).sub_(1.0)
        got = _hidden_act(2 * z, True, True)
        assert torch.equal(got, want)


def test_twin_backward_reuses_its_buffers_without_carrying_anything_over():
    """The twin kernel's backward writes ``dL/dh`` into kept buffers (and the activation's derivative in place):
    a batch's gradients are the same, bit for bit, whatever batch (size or activation) ran before it."""

    def grads(kernel, flat, obs, actions):
        flat.zero_grad()
        _, _, values, state = kernel.evaluate(obs, actions)
        kernel.backward(state, np.linspace(-1, 1, obs.shape[0], dtype=np.float32), None, values - 0.5)
        return flat.grad.clone()

    for activation in ("tanh", "relu"):
        _, policy = _policy(CARTPOLE, activation=activation)
        flat = FlatParameters(parameter_order(policy))
        kernel = kernel_for(policy, flat)
        assert kernel.twin is not None
        g = torch.Generator().manual_seed(3)
        batches = {B: (torch.randn(B, 4, generator=g), torch.randint(0, 2, (B,), generator=g)) for B in (256, 40, 8)}
        first = {B: grads(kernel, flat, *batch) for B, batch in batches.items()}
        for B in (8, 256, 40, 256, 8):
            assert torch.equal(grads(kernel, flat, *batches[B]), first[B])


@pytest.mark.parametrize("arch", [(8, 12), (12, 8), (64, 32, 16)])
@pytest.mark.parametrize("spaces", [CARTPOLE, HOPPER])
def test_twin_kernel_with_hidden_layers_of_different_widths_equals_autograd_step_after_step(spaces, arch):
    """Hidden layers of different widths: every step's gradient is autograd's, with no buffer resized under it (a
    deprecated torch behaviour, turned into an error here) and none written over while read (three widths crashed
    the second backward before 2026-12-05)."""
    cfg, policy = _policy(spaces, pi_arch=arch, vf_arch=arch)
    flat = FlatParameters(parameter_order(policy))
    kernel = kernel_for(policy, flat)
    assert kernel.twin is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step, B in enumerate((64, 64, 40, 64)):
            mb = _minibatch(policy, B, 1, seed=step)
            _, _, g_a = _grads_autograd(cfg, policy, flat, mb, clip=0.2)
            flat.zero_grad()
            logp, ent, values, state = kernel.evaluate(mb.obs, mb.actions)
            fl = ppo_loss_derivatives(cfg, mb, logp, ent, values, 0.2)
            kernel.backward(state, fl.dlogp, fl.dentropy, fl.dvalues)
            torch.testing.assert_close(flat.grad, g_a, rtol=1e-4, atol=1e-6)


# -- ppo-rlvr-prm: the JS term and the input-gradient penalty by hand ----------------------------------------
@pytest.mark.parametrize("B", [32, 256])  # below and above SMALL_BATCH (torch.tanh vs the sigmoid form)
@pytest.mark.parametrize(
    ("spaces", "overrides"),
    [
        (CARTPOLE, {}),
        (CARTPOLE, {"activation": "relu"}),
        (CARTPOLE, {"pi_arch": (32, 16), "vf_arch": (64, 64)}),  # separate kernels, three hidden widths
        (CARTPOLE, {"pi_arch": (8, 12), "vf_arch": (8, 12)}),  # hidden layers narrower than jacobian._NARROW
        (HOPPER, {}),
        (HOPPER, {"pi_arch": (64,), "vf_arch": (64,)}),  # one hidden layer
        (CARTPOLE, {"pi_arch": (), "vf_arch": (64, 64)}),  # none: a linear policy, the same Jacobian for every sample
        (HOPPER, {"pi_arch": (), "vf_arch": ()}),
    ],
)
def test_jacobian_penalty_equals_autograds_double_backward(spaces, overrides, B):
    from suite.accel.jacobian import jacobian_penalty
    from suite.algorithms.ppo_rlvr_prm import input_gradient_penalty

    cfg, policy = _policy(spaces, **overrides)
    flat = FlatParameters(parameter_order(policy))
    kernel = kernel_for(policy, flat)
    mb = _minibatch(policy, B, 1)
    obs = mb.obs.clone().requires_grad_(True)
    flat.zero_grad()
    per_sample_a = input_gradient_penalty(policy.policy_params(obs), obs)
    (0.7 * per_sample_a.sum()).backward()
    g_a = flat.grad.clone()
    flat.zero_grad()
    kernel.evaluate(mb.obs, mb.actions)
    per_sample_f, grad = jacobian_penalty(*kernel.policy_network(), kernel.tanh, 0.7)
    grad.add()
    np.testing.assert_allclose(per_sample_f, per_sample_a.detach().numpy(), rtol=1e-4, atol=1e-7)
    assert g_a.abs().max() > 0
    torch.testing.assert_close(flat.grad, g_a, rtol=1e-4, atol=1e-6)


TEXT = (gym.spaces.Box(0, 1, (40,), np.float32), gym.spaces.Discrete(26))  # more outputs than a probe: Hutchinson


@pytest.mark.parametrize("K", [1, 3])
@pytest.mark.parametrize(
    ("spaces", "overrides"),
    [
        (TEXT, {}),
        (CARTPOLE, {"activation": "relu"}),
        (HOPPER, {"pi_arch": (64,), "vf_arch": (64,)}),
        (HOPPER, {"pi_arch": (8, 12), "vf_arch": (8, 12)}),  # hidden layers narrower than jacobian._NARROW
        (TEXT, {"pi_arch": (), "vf_arch": ()}),  # a linear policy
    ],
)
def test_jacobian_penalty_with_probes_equals_autograds_hutchinson(spaces, overrides, K):
    """Hutchinson's estimate by hand (``probes``) equals ``input_gradient_penalty(..., probes=K)`` with the same draws:
    its value per sample and its gradient."""
    from suite.accel.jacobian import jacobian_penalty
    from suite.algorithms.ppo_rlvr_prm import input_gradient_penalty

    cfg, policy = _policy(spaces, **overrides)
    flat = FlatParameters(parameter_order(policy))
    kernel = kernel_for(policy, flat)
    mb = _minibatch(policy, 128, 1)
    obs = mb.obs.clone().requires_grad_(True)
    flat.zero_grad()
    torch.manual_seed(3)
    per_sample_a = input_gradient_penalty(policy.policy_params(obs), obs, probes=K)
    (0.7 * per_sample_a.sum()).backward()
    g_a = flat.grad.clone()
    flat.zero_grad()
    kernel.evaluate(mb.obs, mb.actions)
    torch.manual_seed(3)
    probes = torch.stack([torch.randn(128, policy.head.n_params) for _ in range(K)])
    per_sample_f, grad = jacobian_penalty(*kernel.policy_network(), kernel.tanh, 0.7, probes)
    grad.add()
    np.testing.assert_allclose(per_sample_f, per_sample_a.detach().numpy(), rtol=1e-4, atol=1e-7)
    assert g_a.abs().max() > 0
    torch.testing.assert_close(flat.grad, g_a, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("K", [0, 2])
@pytest.mark.parametrize(
    ("spaces", "overrides"),
    [
        (CARTPOLE, {}),  # the twin kernel
        (CARTPOLE, {"activation": "relu"}),  # no activation-derivative part
        (CARTPOLE, {"pi_arch": (32, 16), "vf_arch": (64, 64)}),  # separate kernels
        (HOPPER, {"pi_arch": (8, 12), "vf_arch": (8, 12)}),
        (TEXT, {}),
        (HOPPER, {"pi_arch": (), "vf_arch": ()}),  # a linear policy: the direct part alone
    ],
)
def test_penalty_carried_by_the_kernels_backward_equals_its_own_backprop(spaces, overrides, K):
    """The update's path (``before_backward``: the direct part, then the kernel's backward adding the extra dL/dz to
    its own and accumulating) gives the gradient of the standalone path (the kernel's backward, then ``add``: the
    activation derivatives' part backpropagated on its own), up to float rounding; with the penalty's gradient a
    large share of the total."""
    from suite.accel.jacobian import jacobian_penalty

    cfg, policy = _policy(spaces, **overrides)
    flat = FlatParameters(parameter_order(policy))
    kernel = kernel_for(policy, flat)
    mb = _minibatch(policy, 96, 1)
    probes = torch.randn(K, 96, policy.head.n_params, generator=torch.Generator().manual_seed(5)) if K else None
    out = []
    for merged in (False, True):
        flat.zero_grad()
        logp, ent, values, state = kernel.evaluate(mb.obs, mb.actions)
        per_sample, grad = jacobian_penalty(*kernel.policy_network(), kernel.tanh, 50.0, probes)
        dlogp, dv = np.full_like(logp, 0.1), np.full_like(values, 0.1)
        if merged:
            extra_dz = grad.before_backward()
            assert (extra_dz is None) == (cfg.activation == "relu" or not cfg.pi_arch)
            kernel.backward(state, dlogp, None, dv, accumulate=True, extra_dz=extra_dz)
        else:
            kernel.backward(state, dlogp, None, dv)
            grad.add()
        out.append((per_sample, flat.grad.clone()))
    (p0, g0), (p1, g1) = out
    np.testing.assert_array_equal(p0, p1)
    flat.zero_grad()
    kernel.evaluate(mb.obs, mb.actions)
    jacobian_penalty(*kernel.policy_network(), kernel.tanh, 50.0, probes)[1].add()
    assert flat.grad.norm() > 0.5 * g0.norm()  # the penalty's part is most of it: a lost term would show
    torch.testing.assert_close(g1, g0, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("spaces", "overrides"),
    [
        (TEXT, {"smooth_probes": 1}),  # TextMatch-v0's defaults: Hutchinson with one probe, drawn in the loss
        (HOPPER, {"smooth_probes": 2, "js_samples": 2}),  # the JS draws, then the probes: the same stream
        (CARTPOLE, {}),  # the document's settings: 5 value heads, ent 0.01, js 0.5, smooth 1e-3 (raised below)
        (CARTPOLE, {"activation": "relu", "clip_range_vf": 0.2}),
        (HOPPER, {"js_samples": 2}),  # Gaussian: Monte Carlo JS with the same draws, and the log std's gradient
    ],
)
def test_fused_rlvr_prm_loss_and_gradient_equal_autograd(spaces, overrides):
    from suite.accel.ppo_rlvr_prm import RlvrPrmHandDerived
    from suite.algorithms.ppo_rlvr_prm import RlvrPrmConfig, RlvrPrmTrainer

    cfg = RlvrPrmConfig(hand_derived=True, smooth_coef=0.05, **overrides)
    torch.manual_seed(0)
    policy = ActorCritic(*spaces, net_config(cfg, n_value_heads=cfg.n_value_heads))
    with torch.no_grad():
        policy.pi[-1].weight.mul_(30.0)  # the output layer starts at gain 0.01: a trained policy's Jacobian is larger
    flat = FlatParameters(parameter_order(policy))
    kernel = kernel_for(policy, flat)
    mb = _minibatch(policy, 256, cfg.n_value_heads)
    with torch.no_grad():
        mb.extra = {"old_params": policy.policy_params(mb.obs) + 0.3 * torch.randn(256, policy.head.n_params)}
    mb.returns = torch.randn(256)
    trainer = types.SimpleNamespace(cfg=cfg, policy=policy, kernel=kernel, clip=0.2,
                                    old_log_std=policy.log_std.detach() - 0.2)  # fmt: skip
    accelerated = RlvrPrmHandDerived(trainer)  # type: ignore[arg-type]
    results = []
    base = mb
    for fused in (False, True):
        mb = dataclasses.replace(base)  # the autograd loss makes its obs require grad
        flat.zero_grad()
        torch.manual_seed(7)  # the Gaussian JS draws
        if fused:
            evaluated = accelerated.forward(mb)
            evaluated.backward(False)
            loss, metrics = evaluated.loss, evaluated.metrics
        else:
            loss_t, metrics_t = RlvrPrmTrainer.loss(trainer, mb)
            loss_t.backward()
            loss, metrics = float(loss_t.detach()), {k: float(v) for k, v in metrics_t.items()}
        results.append((loss, metrics, flat.grad.clone()))
    (loss_a, m_a, g_a), (loss_f, m_f, g_f) = results
    assert m_a["js"] > 1e-3 and m_a["smooth_penalty"] > 1e-3  # both terms are really there
    assert loss_f == pytest.approx(loss_a, rel=1e-5, abs=1e-6)
    for k in m_a:
        assert m_f[k] == pytest.approx(m_a[k], rel=1e-4, abs=1e-6), k
    torch.testing.assert_close(g_f, g_a, rtol=1e-4, atol=1e-6)


# -- inference mode -------------------------------------------------------------------------------------------
def _short_trial(algo, env, overrides):
    """(parameters, update metrics, learning curve, final evaluation) of a short trial."""
    from suite.trial import TrialContext, TrialSpec, seed_everything

    resolved = TrialSpec(algo, env, 0, 3_000, overrides=overrides, n_eval_episodes=2, eval_freq=3_000).resolve()
    seed_everything(0, 1)
    ctx = TrialContext(resolved)
    try:
        policy = resolved.algo.train(ctx, resolved.config)
        final = ctx.evaluate(policy, final=True)
    finally:
        ctx.close()
    params = {k: v.detach().clone() for k, v in policy.state_dict().items()}
    return params, ctx.updates, (ctx.curve_return, ctx.curve_length), (final["returns"], final["lengths"])


@pytest.mark.parametrize(
    ("algo", "env", "overrides"),
    [
        ("ppo", "CartPole-v1", {}),
        ("ppo-adaptive-clip", "TextMatch-v0", {}),
        ("ppo-rlvr-prm", "CartPole-v1", {}),  # the input-gradient penalty by hand
        ("ppo-rlvr-prm", "CartPole-v1", {"hand_derived": False}),  # kernel inference, autograd update
        ("grpo", "CartPole-v1", {}),
        ("grpo-pairwise", "TextMatch-v0", {}),
        ("grpo-pairwise", "TextMatch-v0", {"hand_derived": False}),
    ],
)
def test_inference_mode_changes_no_number_and_autograd_never_runs_in_it(monkeypatch, algo, env, overrides):
    """The hand-derived paths run under ``torch.inference_mode`` (:func:`~suite.accel.mlp.kernel_mode`): a short
    trial gives the same parameters, update metrics, learning curve and final evaluation, bit for bit, as with the
    mode switched off; the kernel's forwards run in it, and autograd's backward (the update's other path) never does."""
    import contextlib

    from suite.accel.mlp import PolicyKernel
    from suite.algorithms.core import GradientStepper

    seen: dict[str, set[bool]] = {}

    def spy(cls, name):
        original = getattr(cls, name)

        def wrapped(*args, **kwargs):
            seen.setdefault(name, set()).add(torch.is_inference_mode_enabled())
            return original(*args, **kwargs)

        monkeypatch.setattr(cls, name, wrapped)

    for cls, name in ((PolicyKernel, "infer"), (PolicyKernel, "evaluate"), (GradientStepper, "backward")):
        spy(cls, name)
    with_mode = _short_trial(algo, env, overrides)
    by_hand = overrides.get("hand_derived", True)
    assert seen["infer"] == {True}
    assert seen.get("evaluate", set()) == ({True} if by_hand else set())
    assert seen.get("backward", set()) == (set() if by_hand else {False})

    monkeypatch.setattr(torch, "inference_mode", lambda mode=True: contextlib.nullcontext())
    seen.clear()
    without = _short_trial(algo, env, overrides)
    assert seen["infer"] == {False}
    params, params_off = with_mode[0], without[0]
    assert params.keys() == params_off.keys() and all(torch.equal(params[k], params_off[k]) for k in params)
    assert with_mode[1:] == without[1:]


def test_kernel_buffers_stay_usable_outside_inference_mode():
    """Buffers the kernel keeps across calls are normal tensors even when made under inference mode, so the same
    kernel runs outside it afterwards (``suite profile speed`` times the network alone between training iterations)."""
    from suite.accel.mlp import kernel_mode

    _, policy = _policy(CARTPOLE)
    flat = FlatParameters(parameter_order(policy))
    kernel = kernel_for(policy, flat)
    obs, actions = torch.randn(256, 4), torch.randint(0, 2, (256,))

    def step():
        _, _, values, state = kernel.evaluate(obs, actions)
        kernel.backward(state, np.ones(256, dtype=np.float32), None, values)
        return kernel.sample(kernel.infer(obs[:8])[0])[0], flat.grad.clone()

    torch.manual_seed(5)
    with kernel_mode():
        inside = step()
    torch.manual_seed(5)
    outside = step()  # would raise on an inference tensor written in place
    assert torch.equal(inside[0], outside[0]) and torch.equal(inside[1], outside[1])
