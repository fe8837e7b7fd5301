"""``suite profile speed``: the lap clock's accounting, the profile's parts and limit, results unchanged, the CLI."""

from __future__ import annotations

import json

import pytest

from suite.cli import main
from suite.profile.speed import (
    InterleavedLimit,
    LapClock,
    _resolve,
    _run_slice,
    format_speed_profile,
    gemm_rate,
    profile_speed,
)
from suite.trial import deterministic_view, run_trial


def test_lap_clock_charges_each_interval_to_its_part_and_phase():
    t = iter([1.0, 1.5, 4.0, 4.25, 10.0])
    clock = LapClock("wall")
    clock.now = lambda: next(t)  # type: ignore[method-assign]
    clock.begin("rollout")  # t=1.0
    clock.lap("inference", 8)  # 0.5
    clock.lap("env_step")  # 2.5
    clock.lap("inference", 8)  # 0.25
    clock.end()  # rollout: 10.0 - 1.0
    assert clock.part("inference") == (0.75, 2, 16)
    assert clock.part("env_step") == (2.5, 1, 0)
    assert clock.phases == {"rollout": 9.0}


def test_profile_of_a_ppo_slice_counts_the_loop_and_measures_its_limit():
    """512 CartPole steps = 2 rollouts of 8 envs x 32 steps, 20 epochs of one 256-sample minibatch each."""
    prof = profile_speed("ppo", "CartPole-v1", steps=512, with_cprofile=True, top=5)
    assert prof.steps == 512
    assert prof.calls["env_step"] == 64 and prof.calls["storage"] == 64
    assert prof.calls["inference"] == 64 + 2  # + the value of the last observation of each rollout
    assert prof.calls["forward"] == prof.calls["backward"] == prof.calls["optimizer"] == 40
    assert set(prof.parts["rollout"]) == {"inference", "env_step", "storage", "other"}
    assert {"minibatch", "forward", "backward", "optimizer"} <= set(prof.parts["update"])
    assert set(prof.phases) == {"rollout", "advantages", "update", "eval"}
    lim = prof.limit
    assert lim["env_vector_steps"] == 64 and lim["train_steps"] == 40 and lim["train_batch"] == 256
    assert lim["inference_batch"] == 8 and lim["network_path"] == "hand-derived kernel"
    assert lim["limit_s"] == pytest.approx(lim["env_s"] + lim["network_s"])
    # the headline training time is a third run's, without the lap clock or the limit (the parts' run pays for both)
    assert prof.plain_train_time is not None and 0 < prof.plain_train_time < 5 * prof.train_time
    assert prof.training_time == prof.plain_train_time
    assert prof.limit_fraction == pytest.approx(lim["limit_s"] / prof.plain_train_time)
    assert prof.steps_per_second == pytest.approx(512 / prof.plain_train_time)
    without = profile_speed("ppo", "CartPole-v1", steps=512, with_cprofile=False, plain=False)
    assert without.plain_train_time is None and without.limit_fraction == pytest.approx(
        without.limit["limit_s"] / without.train_time
    )
    assert len(prof.top) == 5 and all(row["calls"] >= 1 for row in prof.top)
    text = format_speed_profile(prof)
    assert "env step" in text and "training runs at" in text and "top functions" in text
    assert "the part-by-part run below, with its clock, took" in text
    assert "network arithmetic:" in text and "of this machine's matmul rate" in text


def _mlp_macs(widths: list[int]) -> tuple[int, int]:
    """Multiply-adds per sample of an MLP with these widths: (all layers, all but the first)."""
    layers = [a * b for a, b in zip(widths[:-1], widths[1:], strict=True)]
    return sum(layers), sum(layers[1:])


def test_the_arithmetic_counts_every_matrix_product_of_the_twin_mlp():
    """CartPole's zoo network, policy 4-64-64-2 and value 4-64-64-1: an inference of B samples is 2 B MACs per weight
    (one product per layer), a train step 2 B x (forward + dW of every layer + dx of every layer but the first), the
    in-place products of the hand-derived backward included. The rate is their sum over the network's time."""
    prof = profile_speed("ppo", "CartPole-v1", steps=512, with_cprofile=False)
    lim = prof.limit
    (pi_all, pi_upper), (vf_all, vf_upper) = _mlp_macs([4, 64, 64, 2]), _mlp_macs([4, 64, 64, 1])
    macs_all, macs_upper = pi_all + vf_all, pi_upper + vf_upper
    assert lim["flops_per_inference"] == 2 * 8 * macs_all
    assert lim["flops_per_train_step"] == 2 * 256 * (2 * macs_all + macs_upper) == 13_402_112
    flops = lim["flops_per_inference"] * lim["inference_calls"] + lim["flops_per_train_step"] * lim["train_steps"]
    assert lim["network_flops"] == flops
    assert lim["network_flop_rate"] == pytest.approx(flops / lim["network_s"])
    assert lim["gemm_flop_rate"] > 0 and lim["gemm_size"] == 512


def test_the_arithmetic_counts_the_in_place_products_of_accumulated_micro_batches():
    """Micro-batches accumulate their gradients with in-place ``addmm_``/``baddbmm_`` (FlopCounterMode does not count
    those by itself): a step of 4 x 64 samples is the same arithmetic as a step of 256."""
    whole = profile_speed("ppo", "CartPole-v1", steps=256, with_cprofile=False)
    parts = profile_speed("ppo", "CartPole-v1", steps=256, overrides={"grad_accumulation": 4}, with_cprofile=False)
    assert parts.limit["flops_per_train_step"] == whole.limit["flops_per_train_step"] == 13_402_112


def test_gemm_rate_is_the_best_round():
    """Rounds of 8 calls timed at 1, 2 and 0.5 clock units: the best is 0.5 / 8 per product of 2 x 4^3 FLOPs."""
    ticks = iter([0.0, 1.0, 1.0, 3.0, 3.0, 3.5])
    assert gemm_rate(lambda: next(ticks), size=4, reps=8, rounds=3) == pytest.approx(2 * 4**3 / (0.5 / 8))


def test_the_limit_does_the_same_work_per_step_under_gradient_accumulation():
    """4 micro-batches of 64 make one step of 256 samples: the limit times steps of 256, not of 64."""
    prof = profile_speed("ppo", "CartPole-v1", steps=256, overrides={"grad_accumulation": 4}, with_cprofile=False)
    assert prof.calls["forward"] == 4 * prof.calls["optimizer"] == 4 * 20
    assert prof.limit["train_steps"] == 20 and prof.limit["train_batch"] == 256


def test_the_limit_makes_the_network_passes_the_loss_makes(monkeypatch):
    """``ppo-rlvr-prm``'s hand-derived update runs its input-gradient penalty's passes (the policy network's Jacobian,
    forward and backward) every train step: the limit makes them too, once per train step of the same batch, and
    names them; on the autograd path it says it lacks them; without the penalty there is nothing to add."""
    import suite.accel.ppo_rlvr_prm as rlvr

    batches = []
    real = rlvr.jacobian_penalty

    def counting(acts, *args, **kwargs):
        batches.append(acts[0].shape[0])
        return real(acts, *args, **kwargs)

    monkeypatch.setattr(rlvr, "jacobian_penalty", counting)
    prof = profile_speed("ppo-rlvr-prm", "CartPole-v1", steps=256, with_cprofile=False)
    lim = prof.limit
    assert lim["network_path"] == "hand-derived kernel + input-gradient penalty (exact)"
    # the training's, between them the limit's, the one train step whose FLOPs are counted, and the plain run's
    assert len(batches) == 2 * prof.calls["forward"] + lim["train_steps"] + 1
    assert batches == [256] * len(batches) and lim["train_steps"] == 20 and lim["train_batch"] == 256
    batches.clear()
    auto = profile_speed("ppo-rlvr-prm", "CartPole-v1", steps=256, overrides={"hand_derived": False}, with_cprofile=False)
    assert auto.limit["network_path"].endswith("; without the loss's input-gradient penalty (exact)") and not batches
    plain = profile_speed("ppo-rlvr-prm", "CartPole-v1", steps=256, overrides={"smooth_coef": 0.0}, with_cprofile=False)
    assert plain.limit["network_path"] == "hand-derived kernel" and not batches


def test_profile_of_an_autograd_algorithm_names_its_path():
    prof = profile_speed("ppo", "ALE/Pong-v5", steps=64, overrides={"n_envs": 2, "n_steps": 32, "batch_size": 32},
                         with_cprofile=False)  # fmt: skip
    assert prof.limit["network_path"] == "modules + autograd"
    # convolutions counted, forward and backward: a step of 32 samples is 2-3x the forward of 32 (16 inferences of 2;
    # the first convolution needs no input gradient)
    forward_32 = 16 * prof.limit["flops_per_inference"]
    assert 2 * forward_32 < prof.limit["flops_per_train_step"] < 3 * forward_32
    assert prof.calls["optimizer"] == 4 * 2  # 4 epochs of 2 minibatches, one rollout


def test_the_clock_changes_no_result():
    resolved = _resolve("ppo", "CartPole-v1", 768, {}, {}, 0, 1)
    ctx, _, _ = _run_slice(resolved, LapClock("cpu"))
    plain = run_trial(resolved)
    assert ctx.curve_return == plain["curve"]["return"]
    assert [e["returns"] for e in ctx.evals] == [e["returns"] for e in plain["evals"]]
    assert ctx.updates == deterministic_view(plain)["updates"]


@pytest.mark.parametrize(
    ("algo", "overrides"),
    [
        ("ppo", {}),
        ("ppo-rlvr-prm", {"smooth_probes": 1}),  # the limit's penalty passes draw probes from the global stream
        ("grpo", {}),
    ],
)
def test_the_interleaved_limit_changes_no_result(algo, overrides):
    """The limit timed between the iterations runs on the trainer's own network and optimiser mid-training: the
    training goes on exactly as without it (same curve, evaluations, update metrics)."""
    resolved = _resolve(algo, "CartPole-v1", 768, overrides, {}, 0, 1)
    laps = LapClock("cpu")
    limit = InterleavedLimit(resolved, laps)
    try:
        ctx, _, _ = _run_slice(resolved, laps, limit)
    finally:
        limit.close()
    assert limit.iterations >= 2 and limit.network_s > 0 and limit.env_vector_steps > 0
    plain = run_trial(resolved)
    assert ctx.curve_return == plain["curve"]["return"]
    assert [e["returns"] for e in ctx.evals] == [e["returns"] for e in plain["evals"]]
    assert ctx.updates == deterministic_view(plain)["updates"]


def test_the_limit_between_iterations_does_the_work_of_the_limit_after_the_slice():
    """Timed between the iterations or after the slice, the limit does the same work: as many env steps, inferences
    and train steps of the same batches."""
    between = profile_speed("ppo", "CartPole-v1", steps=768, with_cprofile=False)
    after = profile_speed("ppo", "CartPole-v1", steps=768, with_cprofile=False, interleave=False)
    assert between.limit["interleaved"] and not after.limit["interleaved"]
    work = ("env_vector_steps", "inference_calls", "inference_batch", "train_steps", "train_batch", "network_path")
    assert {k: between.limit[k] for k in work} == {k: after.limit[k] for k in work}
    assert between.limit["env_vector_steps"] == 96 and between.limit["train_steps"] == 60


def test_cli_profile_speed_prints_the_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "speed.json"
    assert main(["profile", "speed", "--algo", "ppo", "--env", "CartPole-v1", "--steps", "256", "--top", "0",
                 "--json", str(out)]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "ppo on CartPole-v1: 256 steps" in printed and "policy inference" in printed
    data = json.loads(out.read_text())
    assert data["steps"] == 256 and data["clock"] == "cpu" and "machine" in data


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--algo", "ppo", "--env", "CartPole-v1", "--steps", "0"], "--steps must be >= 1"),
        (["--algo", "nope", "--env", "CartPole-v1"], "unknown algorithm 'nope'"),
        (["--algo", "ppo", "--env", "CartPole-v1", "--set", "obs_storage_dtype=uint8"], "needs image observations"),
        (["--algo", "ppo", "--env", "CartPole-v1", "--top", "-1"], "--top must be >= 0"),
    ],
)
def test_cli_profile_speed_mistakes_are_one_line(argv, message, capsys):
    assert main(["profile", "speed", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("suite: error:") and message in err[0]


def test_cli_profile_without_a_profiler_is_a_user_error(capsys):
    assert main(["profile"]) == 2
    assert "suite profile needs a profiler" in capsys.readouterr().err
