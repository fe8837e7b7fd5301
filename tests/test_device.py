"""``--device``: the specifications run on the trial's torch device, the accelerators on the CPU only.

No GPU is needed here: the CPU-only pieces refuse another device (``torch``'s ``meta`` device stands for one: it
has shapes and no data), and the code paths a GPU takes (inputs moved to the device, outputs back, no kernel, no
accelerator) run on the CPU with every CPU shortcut switched off."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import suite.algorithms  # noqa: F401  (registers the algorithms)
from suite.accel import accelerate
from suite.accel.flat import FlatAdam, FlatParameters
from suite.accel.mlp import kernel_for, parameter_order
from suite.algorithms.core import GradientStepper, net_config
from suite.algorithms.networks import ActorCritic
from suite.algorithms.ppo import PPOConfig, PPOTrainer

CARTPOLE = (gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2))
META = torch.device("meta")


def test_off_the_cpu_a_policy_has_no_kernel_and_no_accelerator_but_flat_parameters_and_adam_state():
    cfg = PPOConfig(normalize=True)
    policy = ActorCritic(*CARTPOLE, net_config(cfg, normalize_obs=True)).to_device(META)
    assert policy.device == META and policy.pi[0].weight.device == META
    assert policy.obs_rms is not None and policy.obs_rms.mean.device.type == "cpu"  # numpy statistics stay on the CPU
    assert kernel_for(policy) is None
    flat = FlatParameters(parameter_order(policy))
    adam = FlatAdam(flat, 1e-5)
    assert flat.data.device == flat.grad.device == adam.exp_avg.device == adam.step_count.device == META
    trainer = type("T", (), {"device": META})()
    assert accelerate(trainer, PPOTrainer.loss) is None  # checked before any registration is asked


def test_flat_parameters_refuse_parameters_on_two_devices():
    a, b = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2, device=META))
    with pytest.raises(ValueError, match="one device"):
        FlatParameters([a, b])


def _device_path(trainer) -> None:
    """Switch a CPU trainer onto the path a trainer on another device takes (batches moved, no kernel, no
    accelerator); on the CPU every move is a no-op, so what runs is that path's code."""
    trainer.off_cpu = True
    trainer.accelerator = None
    trainer.collector.kernel = None
    trainer.collector.device = torch.device("cpu")
    if hasattr(trainer, "kernel"):
        trainer.kernel = None


@pytest.mark.parametrize(
    ("algo", "env", "overrides"),
    [
        ("ppo", "CartPole-v1", {"n_steps": 64}),
        ("ppo", "Hopper-v5", {"n_steps": 64}),
        ("ppo-adaptive-clip", "CartPole-v1", {"n_steps": 64, "critic": "lstm", "popart": True}),
        ("ppo-rlvr-prm", "CartPole-v1", {"n_steps": 64}),
        ("grpo", "CartPole-v1", {}),
        ("grpo-pairwise", "TextMatch-v0", {}),
    ],
)
def test_the_specification_path_a_device_takes_trains(algo, env, overrides):
    """Two iterations of every suite algorithm on that path: parameters finite and moved, the usual metrics."""
    from suite.accel import accelerators
    from suite.parity import owner_class
    from suite.trial import TrialContext, TrialSpec, seed_everything

    resolved = TrialSpec(algo, env, 0, 10**6, overrides=overrides).resolve()
    seed_everything(0, 1)
    ctx = TrialContext(resolved)
    try:
        spec = next(a.specification for a in accelerators() if algo in a.algorithms)
        trainer = owner_class(spec)(ctx, resolved.config)
        _device_path(trainer)
        before = trainer.stepper.flat.data.clone()
        for _ in range(2):
            prepared = trainer.prepare()
            assert prepared is not None
            metrics = trainer.optimise(prepared, progress=0.5)
        assert torch.isfinite(trainer.stepper.flat.data).all() and not torch.equal(before, trainer.stepper.flat.data)
        assert metrics["grad_norm"] > 0
    finally:
        ctx.close()


def test_the_evaluation_of_a_policy_off_the_cpu_moves_inputs_and_actions():
    """``predict`` moves the prepared observations to the policy's device and the actions back; the MLP plan of
    ``predictor`` is for CPU policies (elsewhere it is ``predict``)."""
    policy = ActorCritic(*CARTPOLE, net_config(PPOConfig()))
    obs = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    assert np.array_equal(policy.predict(obs), policy.predictor()(obs))
    stepper = GradientStepper(list(policy.parameters()), PPOConfig().learning_rate, 0.5)
    stepper.check_finite()


# -- the plumbing: TrialSpec.device, --device ------------------------------------------------------------------------
def test_cpu_is_the_default_and_leaves_the_key_as_it_was_another_device_is_part_of_it(monkeypatch):
    from suite.trial import TrialSpec, trial_device

    plain = TrialSpec("ppo", "CartPole-v1", 0, 1000)
    assert plain.device == "cpu"
    assert TrialSpec("ppo", "CartPole-v1", 0, 1000, device="cpu").resolve().key == plain.resolve().key
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    on_gpu = TrialSpec("ppo", "CartPole-v1", 0, 1000, device="cuda").resolve()
    assert on_gpu.key != plain.resolve().key and on_gpu.config_hash == plain.resolve().config_hash
    with trial_device("cuda:1"):  # suite reproduce --device: the claim set's specs take it
        assert TrialSpec("ppo", "CartPole-v1", 0, 1000).device == "cuda:1"
    assert TrialSpec("ppo", "CartPole-v1", 0, 1000).device == "cpu"


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("cuda", "sees no CUDA GPU on this machine; use --device cpu"),
        ("cuda:0", "sees no CUDA GPU"),
        ("gpu", "is not a torch device"),
        ("mps", "the suite runs on cpu or cuda"),
    ],
)
def test_a_device_the_machine_does_not_have_is_one_error_line(monkeypatch, device, message):
    from suite.errors import UserError
    from suite.trial import TrialSpec

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError, match=message):
        TrialSpec("ppo", "CartPole-v1", 0, 1000, device=device).resolve()


@pytest.mark.parametrize("command", [["run", "--algo", "ppo", "--env", "CartPole-v1", "--steps", "100"],
                                     ["reproduce", "seed003-textmatch", "--no-run"]])  # fmt: skip
def test_cli_device_without_a_gpu_is_one_line_exit_2(monkeypatch, tmp_path, capsys, command):
    from suite.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.chdir(tmp_path)
    assert main([*command, "--device", "cuda", "--db", str(tmp_path / "r.db")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("suite: error: --device cuda: torch") and "no CUDA GPU" in err[0]


def test_cli_evaluate_takes_a_device_and_a_record_names_its_device(tmp_path, capsys, monkeypatch):
    from suite.cli import main
    from suite.trial import TrialSpec, run_trial

    rec = run_trial(TrialSpec("ppo", "CartPole-v1", 0, 256, n_eval_episodes=1).resolve(), models_dir=tmp_path)
    assert rec["provenance"]["device"] == "cpu" and rec["status"] == "ok"
    assert main(["evaluate", rec["model_path"], "--episodes", "2", "--device", "cpu"]) == 0
    assert "mean return" in capsys.readouterr().out
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["evaluate", rec["model_path"], "--device", "cuda"]) == 2
