"""``suite profile speed``: where a trial's time goes, and how close it runs to the limit of its env and network.

One training slice of an algorithm on an env is run three times in this process, same seed (the limit within the
first):

1. **timed**: a :class:`LapClock` on the trial context (``ctx.clock``) is read by the shared core, which charges
   the wall time of each part of its loop to a name: ``inference`` (policy forward and sampling), ``env_step``,
   ``storage`` (buffers, reward handling, episode bookkeeping) in the rollout; ``minibatch`` (gathering samples),
   ``forward`` (network forward and loss), ``backward``, ``optimizer`` (gradient statistics, clip, Adam) in the
   update; the trial's phases give ``advantages`` and ``evaluation`` (one final evaluation);
2. **limit**: the same work with everything but the env and the network removed, timed in the same run, between
   the training's iterations (:class:`InterleavedLimit`: after each rollout + update, that iteration's share, on the
   trainer's own network with its state kept, so the training is unchanged; training and limit then meet the same
   moments of a shared machine's speed; ``interleave=False`` times it after the slice instead): the env
   stepped alone (the trainer's vector env, random actions, as many vector steps as training took, or as many
   sub-env steps where training stepped only the running episodes' sub-envs, as GRPO's groups do) and the network
   alone (as many inference forwards of the same batch, as many forward + backward + optimiser steps of the same
   minibatch size, on random inputs, through the same path training used: the hand-derived kernel of
   :mod:`suite.accel.mlp` where the update runs an accelerator, modules and autograd otherwise; with the network
   passes the loss itself makes on that path, such as ``ppo-rlvr-prm``'s input-gradient penalty: the trainer's
   ``loss_network_passes`` names them, the accelerator's ``network_extra`` runs them). Training steps/s as a
   fraction of the limit's steps/s says how much of the loop is overhead. The network alone's **arithmetic** says
   how much of the limit is itself overhead: the FLOPs of its matrix products and convolutions (torch's
   ``FlopCounterMode`` on one inference and one train step), their rate over the network's time, and this machine's
   rate on a large matmul, measured in the same run;
3. **plain**: as a trial runs it, without the lap clock and the limit, for the headline training time and steps/s
   and the fraction of the limit (the lap clock's own reads cost a few percent of ``ppo``'s CartPole training);
4. **top functions**: under ``cProfile`` (which adds a fixed cost to every Python call, so it inflates Python-heavy parts;
   its times are for ranking, the timed run's are the figures).

The loops call a clock at every part of a step: in every normal trial the null clock
(:class:`suite.algorithms.core.NullClock`, a method that does nothing; ``docs/accel.md`` measures what its calls
cost), under this profiler a :class:`LapClock`, which reads the time (``process_time``, or ``perf_counter`` with
``clock="wall"``) and updates a few dicts per part: a few percent of ``ppo``'s CartPole training, which is why the
headline figures come from the plain run. ``sb3-*`` algorithms get phases, the env
limit and the top functions (their networks are SB3's, outside the suite's core).
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from suite.errors import UserError

DEFAULT_STEPS = 20_480
"""Training slice for vector-observation envs (80 rollouts of CartPole's zoo settings)."""

DEFAULT_STEPS_IMAGE = 3_072
"""Training slice for Atari (3 rollouts of the zoo's 8 envs x 128 steps)."""

PARTS = {
    "rollout": ("inference", "env_step", "storage"),
    "update": ("minibatch", "forward", "backward", "group_gradients", "optimizer"),
}
"""The parts the core's clock names, per phase (``update_setup`` and anything unnamed is reported as ``other``)."""


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}
"""``cpu``: this process's CPU time (robust on a shared machine, equal to wall time on an idle one for the
single-threaded loop; misses async env workers); ``wall``: elapsed time."""


class LapClock:
    """Charges time to named parts of the training loop: :meth:`lap` gives the time since the previous lap (or since
    the current phase began) to ``name``, with the number of samples it processed; :meth:`begin`/:meth:`end` time
    the phases themselves with the same clock."""

    def __init__(self, kind: str = "cpu") -> None:
        if kind not in CLOCKS:
            raise UserError(f"unknown clock {kind!r}; allowed: {', '.join(CLOCKS)}")
        self.now = CLOCKS[kind]
        self.totals: dict[tuple[str, str], float] = {}
        self.calls: dict[tuple[str, str], int] = {}
        self.samples: dict[tuple[str, str], int] = {}
        self.phases: dict[str, float] = {}
        self.phase = "none"
        self.trainer: Any = None
        self._t = self._phase_t0 = self.now()

    def attach(self, trainer: Any) -> None:
        """Called by a trainer that reads this clock (the profiler uses its policy, stepper and envs)."""
        self.trainer = trainer

    def begin(self, phase: str) -> None:
        self.phase = phase
        self._t = self._phase_t0 = self.now()

    def end(self) -> None:
        if self.phase != "none":
            self.phases[self.phase] = self.phases.get(self.phase, 0.0) + self.now() - self._phase_t0
        self.phase = "none"

    def lap(self, name: str, samples: int = 0) -> None:
        t = self.now()
        key = (self.phase, name)
        self.totals[key] = self.totals.get(key, 0.0) + t - self._t
        self.calls[key] = self.calls.get(key, 0) + 1
        self.samples[key] = self.samples.get(key, 0) + samples
        self._t = t

    def part(self, name: str) -> tuple[float, int, int]:
        """``(seconds, calls, samples)`` of a part summed over phases."""
        keys = [k for k in self.totals if k[1] == name]
        return (
            sum(self.totals[k] for k in keys),
            sum(self.calls[k] for k in keys),
            sum(self.samples[k] for k in keys),
        )


@dataclass
class SpeedProfile:
    """What :func:`profile_speed` measured. Times in seconds."""

    algo: str
    env_label: str
    steps: int
    phases: dict[str, float]
    """Phase -> seconds (``rollout``, ``advantages``, ``update``, ``eval``)."""
    parts: dict[str, dict[str, float]]
    """Phase -> part -> seconds (with ``other`` = the phase's time not charged to a named part)."""
    calls: dict[str, int]
    """Part -> calls."""
    train_time: float
    limit: dict[str, Any] = field(default_factory=dict)
    """``env_s``, ``network_s``, ``limit_s``, their work (``env_vector_steps``...), ``network_path``."""
    top: list[dict[str, Any]] = field(default_factory=list)
    """cProfile's top functions: ``function``, ``calls``, ``tottime_s``, ``cumtime_s``."""
    clock: str = "cpu"
    """``cpu`` (process CPU time) or ``wall``: what every time here is."""
    plain_train_time: float | None = None
    """The slice's training time in a run as a trial makes it: the same slice again, without the lap clock (a clock
    read and a few dict updates per part of every step, a few percent of ``ppo``'s CartPole training) and without
    the limit's work between iterations. :attr:`train_time` is the part-by-part run's. None: not measured."""

    @property
    def training_time(self) -> float:
        """The training time the headline figures use: :attr:`plain_train_time` when measured, else :attr:`train_time`."""
        return self.plain_train_time if self.plain_train_time is not None else self.train_time

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.training_time if self.training_time > 0 else 0.0

    @property
    def limit_fraction(self) -> float | None:
        """Training steps/s over the limit's steps/s (= limit time / :attr:`training_time`)."""
        lim = self.limit.get("limit_s")
        return lim / self.training_time if lim and self.training_time > 0 else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "algo": self.algo,
            "env": self.env_label,
            "steps": self.steps,
            "train_time_s": self.train_time,
            "plain_train_time_s": self.plain_train_time,
            "steps_per_second": self.steps_per_second,
            "phases": self.phases,
            "parts": self.parts,
            "calls": self.calls,
            "limit": self.limit,
            "limit_fraction": self.limit_fraction,
            "top_functions": self.top,
            "clock": self.clock,
        }


def _resolve(
    algo: str,
    env: str,
    steps: int | None,
    overrides: Mapping[str, Any],
    env_kwargs: Mapping[str, Any],
    seed: int,
    threads: int,
) -> Any:
    from suite.envs import get_env_spec
    from suite.trial import TrialSpec

    if steps is not None and steps < 1:
        raise UserError(f"--steps must be >= 1, got {steps}")
    if steps is None:
        steps = DEFAULT_STEPS_IMAGE if get_env_spec(env).observation == "image" else DEFAULT_STEPS
    # one evaluation, at the end (eval_freq = the budget): its time is the profile's "evaluation"
    spec = TrialSpec(algo, env, seed, steps, overrides=dict(overrides), env_kwargs=dict(env_kwargs), threads=threads,
                     n_eval_episodes=10, eval_freq=steps)  # fmt: skip
    return spec.resolve()


def _run_slice(
    resolved: Any, clock: LapClock | None, on_iteration: Callable[[list[dict[str, Any]]], None] | None = None
) -> tuple[Any, Any, list[dict[str, Any]]]:
    """Train the slice and evaluate once; returns ``(ctx, policy, make_envs calls)``. The context is closed.

    ``on_iteration(make_envs calls)`` runs after every rollout + update (the trainer's ``ctx.after_iteration``, before
    its periodic evaluation), outside every phase: the interleaved limit's work (:class:`InterleavedLimit`)."""
    from suite.trial import TrialContext, seed_everything

    seed_everything(resolved.spec.seed, resolved.spec.threads)
    ctx = TrialContext(resolved)
    made: list[dict[str, Any]] = []
    make_envs = ctx.make_envs

    def recording_make_envs(n_envs: int, **kwargs: Any) -> Any:
        made.append({"n_envs": n_envs, **kwargs})
        return make_envs(n_envs, **kwargs)

    ctx.make_envs = recording_make_envs  # type: ignore[method-assign]
    if clock is not None:
        ctx.clock = clock  # type: ignore[attr-defined]
        begin_phase, end_phase = ctx.begin_phase, ctx.end_phase

        def timed_begin(name: str) -> None:
            begin_phase(name)
            clock.begin(name)

        def timed_end() -> None:
            clock.end()
            end_phase()

        ctx.begin_phase = timed_begin  # type: ignore[method-assign]
        ctx.end_phase = timed_end  # type: ignore[method-assign]
    if on_iteration is not None:
        after_iteration = ctx.after_iteration

        def timed_after_iteration(agent: Any) -> None:
            on_iteration(made)
            after_iteration(agent)

        ctx.after_iteration = timed_after_iteration  # type: ignore[method-assign]
    try:
        policy = resolved.algo.train(ctx, resolved.config)
        ctx.evaluate(policy, final=True)
    finally:
        ctx.end_phase()
        ctx.close()
    return ctx, policy, made


class _EnvAlone:
    """The trainer's (first) vector env, made again, stepped with random actions (a pool of 64 drawn once)."""

    def __init__(self, resolved: Any, made: list[dict[str, Any]]):
        from suite.envs import make_vec_env

        kwargs = dict(made[0])
        n_envs = kwargs.pop("n_envs")
        kwargs.setdefault("env_kwargs", dict(resolved.env_kwargs))
        self.envs = make_vec_env(resolved.spec.env_id, n_envs, **kwargs)
        self.envs.reset(seed=resolved.spec.seed * 10_000)
        self.envs.action_space.seed(resolved.spec.seed)
        self.pool = [self.envs.action_space.sample() for _ in range(64)]
        self.i = 0

    def time(self, vector_steps: int, now: Any) -> float:
        """Seconds for ``vector_steps`` steps."""
        envs, pool, i = self.envs, self.pool, self.i
        t = now()
        for k in range(i, i + vector_steps):
            envs.step(pool[k % 64])
        self.i = i + vector_steps
        return now() - t

    def close(self) -> None:
        self.envs.close()


def _time_env(resolved: Any, made: list[dict[str, Any]], vector_steps: int, now: Any) -> float:
    """Seconds to step the trainer's (first) vector env ``vector_steps`` times with random actions."""
    env = _EnvAlone(resolved, made)
    try:
        return env.time(vector_steps, now)
    finally:
        env.close()


def _env_vector_steps(made: list[dict[str, Any]], env_calls: int, env_substeps: int) -> int:
    """Vector steps the env alone takes for ``env_calls`` training steps that stepped ``env_substeps`` sub-envs: a
    collector that steps only some sub-envs (GRPO's running episodes) reports the sub-env steps it took, and the env
    alone then does as many sub-env steps (all sub-envs each vector step; the cost is ~linear in them)."""
    n_envs = int(made[0]["n_envs"])
    return -(-env_substeps // n_envs) if 0 < env_substeps < env_calls * n_envs else env_calls


@contextmanager
def _state_kept(stepper: Any) -> Iterator[None]:
    """Run the network alone on the trainer's own network and optimiser mid-training and leave no trace: what a step
    changes (:meth:`~suite.algorithms.core.GradientStepper.snapshot`) and the global torch random stream (a loss's extra
    passes may draw probes from it) are as they were afterwards, so the training goes on bit for bit (tested)."""
    restore = stepper.snapshot()
    rng = torch.get_rng_state()
    try:
        yield
    finally:
        restore()
        torch.set_rng_state(rng)


class InterleavedLimit:
    """The limit timed iteration by iteration, between the training's own iterations (``on_iteration`` of
    :func:`_run_slice`): after each rollout + update, the env alone takes as many vector steps as that rollout and the
    network alone makes that iteration's inferences and train steps (its own batch sizes), on the trainer's network
    with its state kept (:func:`_state_kept`). Training and limit then share the machine's moment: on a shared
    machine whose speed moves within seconds, timing the limit after the whole slice moved the fraction by 0.2 between
    two runs of the same slice (0.71 and 0.53 on CartPole)."""

    def __init__(self, resolved: Any, laps: LapClock):
        self.resolved, self.laps = resolved, laps
        self.env: _EnvAlone | None = None
        self.env_s = self.network_s = 0.0
        self.env_vector_steps = self.inference_calls = self.inference_samples = self.train_steps = 0
        self.train_samples = self.iterations = 0
        self.network_path: str | None = None
        self._seen = (0, 0, 0, 0, 0, 0)

    def __call__(self, made: list[dict[str, Any]]) -> None:
        from suite.algorithms.core import GradientStepper

        laps = self.laps
        _t, env_calls, env_sub = laps.part("env_step")
        _t, inf_calls, inf_samples = laps.part("inference")
        _t, _n, fwd_samples = laps.part("forward")
        _t, opt_calls, _n = laps.part("optimizer")
        now = (env_calls, env_sub, inf_calls, inf_samples, fwd_samples, opt_calls)
        d_env, d_sub, d_inf, d_inf_samples, d_fwd_samples, d_opt = (a - b for a, b in zip(now, self._seen, strict=True))
        self._seen = now
        self.iterations += 1
        if made and d_env:
            if self.env is None:
                self.env = _EnvAlone(self.resolved, made)
            steps = _env_vector_steps(made, d_env, d_sub)
            self.env_s += self.env.time(steps, laps.now)
            self.env_vector_steps += steps
        trainer = laps.trainer
        if trainer is not None and isinstance(getattr(trainer, "stepper", None), GradientStepper) and (d_inf or d_opt):
            inference = (d_inf, d_inf_samples // max(d_inf, 1))
            training = (d_opt, d_fwd_samples // max(d_opt, 1))
            with _state_kept(trainer.stepper):
                seconds, self.network_path = _time_network(trainer, inference, training, laps.now)
            self.network_s += seconds
            self.inference_calls += d_inf
            self.inference_samples += inference[0] * inference[1]
            self.train_steps += d_opt
            self.train_samples += training[0] * training[1]

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None


def _time_network(trainer: Any, inference: tuple[int, int], training: tuple[int, int], now: Any) -> tuple[float, str]:
    """Seconds for ``inference = (calls, batch)`` forwards and ``training = (steps, batch)`` forward + backward +
    optimiser steps of the trainer's network on random inputs, by the path training used. Returns (s, path)."""
    from suite.accel.mlp import kernel_mode

    policy = trainer.policy
    kernel = getattr(trainer, "kernel", None) or getattr(getattr(trainer, "collector", None), "kernel", None)
    accelerator = getattr(trainer, "accelerator", None)
    fused_update = accelerator is not None
    g = torch.Generator().manual_seed(0)

    envs = getattr(trainer, "envs", None) or trainer.collector.envs
    obs_shape = tuple(envs.single_observation_space.shape)

    def inputs(batch: int) -> torch.Tensor:
        if policy.image:
            return torch.randint(0, 256, (batch, *obs_shape), dtype=torch.uint8, generator=g)
        return torch.randn(batch, int(np.prod(obs_shape)), generator=g)

    n_inf, b_inf = inference
    n_train, b_train = training
    x_inf = inputs(max(b_inf, 1))
    x_train = inputs(max(b_train, 1))
    actions = torch.zeros(max(b_train, 1), *policy.action_shape, dtype=torch.long if policy.discrete else torch.float32)
    by_hand = fused_update and kernel is not None
    describe = getattr(trainer, "loss_network_passes", None)  # the loss's own passes beyond forward and backward
    extra = describe() if describe is not None else None
    make_run = getattr(accelerator, "network_extra", None) if by_hand else None
    run_extra = make_run() if extra is not None and make_run is not None else None
    t = now()
    with kernel_mode() if kernel is not None else torch.no_grad():  # the grad modes training's paths run in
        for _ in range(n_inf):
            if kernel is not None:
                kernel.infer(x_inf)
            else:
                policy(x_inf)
    with kernel_mode(by_hand):
        _train_steps(trainer, kernel if by_hand else None, x_train, actions, n_train, run_extra)
    elapsed = now() - t
    path = "hand-derived kernel" if by_hand else "modules + autograd"
    if kernel is not None and not fused_update:
        path += " (kernel inference)"
    if extra is not None:
        path += f" + {extra}" if run_extra is not None else f"; without the loss's {extra}"
    return elapsed, path


def _train_steps(
    trainer: Any, kernel: Any, x_train: torch.Tensor, actions: torch.Tensor, n_train: int, run_extra: Any
) -> None:
    """``n_train`` forward + backward + optimiser steps on ``x_train``: by the kernel (not None) or by autograd."""
    policy, stepper = trainer.policy, trainer.stepper
    for _ in range(n_train):
        stepper.zero_grad()
        if kernel is not None:
            logp, ent, values, state = kernel.evaluate(x_train, actions)
            dv = None if values is None else np.ones_like(values)
            # as the update: the extra passes first, their dL/dz carried by the kernel's backward, which accumulates
            extra_dz = run_extra() if run_extra is not None else None
            kernel.backward(state, np.ones_like(logp), None, dv, accumulate=run_extra is not None, extra_dz=extra_dz)
        else:
            params, values = policy(x_train)
            (params.sum() + (values.sum() if values is not None else 0.0)).backward()
        stepper.apply()


def _network_flops(trainer: Any, inference: tuple[int, int], training: tuple[int, int]) -> tuple[int, int]:
    """FLOPs of matrix products and convolutions (torch's ``FlopCounterMode``, plus the in-place ``addmm_`` and
    ``baddbmm_`` it leaves out) in one inference call of ``inference[1]`` samples and one train step of ``training[1]``
    samples, by the path :func:`_time_network` times, with the trainer's state kept. Elementwise work (activations,
    the heads' numpy arithmetic, Adam) is not counted: it is what the network's time holds beyond the products."""
    from torch.utils.flop_counter import FlopCounterMode, flop_registry

    aten = torch.ops.aten

    def in_place(packet: Any) -> Any:  # the out-of-place formula, already taking FlopCounterMode's arguments
        def formula(*args: Any, **kwargs: Any) -> Any:
            return flop_registry[packet](*args, **kwargs)

        formula._get_raw = True  # type: ignore[attr-defined]
        return formula

    custom = {aten.addmm_: in_place(aten.addmm), aten.baddbmm_: in_place(aten.baddbmm)}
    counts = []
    for work in (((1, inference[1]), (0, 1)), ((0, 1), (1, training[1]))):
        mode = FlopCounterMode(display=False, custom_mapping=custom)
        with _state_kept(trainer.stepper), mode:
            _time_network(trainer, work[0], work[1], time.perf_counter)
        counts.append(int(mode.get_total_flops()))
    return counts[0], counts[1]


GEMM_SIZE = 512
"""Side of the square float32 matmul that measures this machine's matrix-product rate (~3 ms a call at one thread)."""


def gemm_rate(now: Callable[[], float], size: int = GEMM_SIZE, reps: int = 8, rounds: int = 3) -> float:
    """FLOP/s of a ``size``-square float32 ``torch.mm`` at the current thread count, best of ``rounds`` rounds of
    ``reps`` calls: what the CPU's BLAS does when the products are large enough for per-call costs not to count."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    out = torch.empty(size, size)
    torch.mm(a, b, out=out)
    best = float("inf")
    for _ in range(rounds):
        t = now()
        for _ in range(reps):
            torch.mm(a, b, out=out)
        best = min(best, (now() - t) / reps)
    return 2.0 * size**3 / best if best > 0 else float("inf")


def _arithmetic(prof: SpeedProfile, trainer: Any, now: Callable[[], float]) -> None:
    """Add the network alone's arithmetic to ``prof.limit``: its counted FLOPs (:func:`_network_flops` times the
    limit's calls), their rate over the network's time, and this machine's matmul rate (:func:`gemm_rate`) in the
    same run. A rate far below the matmul rate says the network's own time is per-call and elementwise work, which a
    faster kernel could still remove; one close to it, that the limit is arithmetic."""
    lim = prof.limit
    if "network_s" not in lim or not (lim["train_steps"] or lim["inference_calls"]):
        return  # no network limit (an algorithm outside the suite's core) or no network work to count
    per_inference, per_train_step = _network_flops(
        trainer, (1, max(int(lim["inference_batch"]), 1)), (1, max(int(lim["train_batch"]), 1))
    )
    flops = per_inference * lim["inference_calls"] + per_train_step * lim["train_steps"]
    lim["flops_per_inference"], lim["flops_per_train_step"], lim["network_flops"] = per_inference, per_train_step, flops
    lim["network_flop_rate"] = flops / lim["network_s"] if lim["network_s"] > 0 else None
    lim["gemm_flop_rate"] = gemm_rate(now)
    lim["gemm_size"] = GEMM_SIZE


def _plain_train_time(resolved: Any, clock: str) -> float:
    """Training time (evaluation excluded) of the slice run again as a trial runs it: no lap clock, no limit."""
    ctx, _policy, _made = _run_slice(resolved, None)
    times = ctx.cpu_times if clock == "cpu" else ctx.times
    return sum(t for name, t in times.items() if name != "eval")


def _top_functions(resolved: Any, top: int) -> list[dict[str, Any]]:
    prof = cProfile.Profile()
    prof.enable()
    try:
        _run_slice(resolved, None)
    finally:
        prof.disable()
    stats = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    for (filename, line, name), (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = filename.split("site-packages/")[-1].split("/suite/")[-1] if "/" in filename else filename
        rows.append({"function": f"{where}:{line}({name})", "calls": ncalls, "tottime_s": tottime, "cumtime_s": cumtime})
    rows.sort(key=lambda r: -r["tottime_s"])
    return rows[:top]


def profile_speed(
    algo: str,
    env: str,
    *,
    steps: int | None = None,
    overrides: Mapping[str, Any] | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    seed: int = 0,
    threads: int = 1,
    top: int = 15,
    with_cprofile: bool = True,
    clock: str = "cpu",
    interleave: bool = True,
    plain: bool = True,
) -> SpeedProfile:
    """Time a training slice by parts, measure its limit and (optionally) its top functions (module docstring).
    ``plain``: also train the slice once more without the profiler's clock, for the headline training time
    (:attr:`SpeedProfile.plain_train_time`).

    Raises:
        UserError: a bad id, override or step count (before anything runs).
    """
    from suite.envs import env_label

    laps = LapClock(clock)
    resolved = _resolve(algo, env, steps, overrides or {}, env_kwargs or {}, seed, threads)
    limit = InterleavedLimit(resolved, laps) if interleave else None
    try:
        ctx, _policy, made = _run_slice(resolved, laps, limit)
        if limit is not None and limit.iterations:
            limit(made)  # work after the last ctx.after_iteration, if any (none in the suite's own loops)
    finally:
        if limit is not None:
            limit.close()
    phases = dict(laps.phases)
    parts: dict[str, dict[str, float]] = {}
    for phase, seconds in phases.items():
        named = {name: t for (ph, name), t in laps.totals.items() if ph == phase}
        if named:
            named["other"] = max(seconds - sum(named.values()), 0.0)
            parts[phase] = named
    calls = {name: laps.part(name)[1] for (_ph, name) in laps.totals}
    prof = SpeedProfile(
        algo=resolved.algo.id, env_label=env_label(env, resolved.env_kwargs), steps=ctx.steps, phases=phases,
        parts=parts, calls=calls, train_time=sum(t for name, t in phases.items() if name != "eval"), clock=clock,
    )  # fmt: skip
    # the limit: env alone and network alone, for the same work
    _t, env_calls, env_substeps = laps.part("env_step")
    trainer = laps.trainer
    _t, inf_calls, inf_samples = laps.part("inference")
    _t, _fwd_calls, fwd_samples = laps.part("forward")
    _t, opt_calls, _n = laps.part("optimizer")
    # timed between the iterations where the loop lets it (ctx.after_iteration, the suite's GradientStepper), else after
    between = limit is not None and limit.iterations > 0
    if between and limit is not None and limit.env_vector_steps:
        prof.limit["env_vector_steps"], prof.limit["env_s"] = limit.env_vector_steps, limit.env_s
    elif made and env_calls:
        between = False
        vector_steps = _env_vector_steps(made, env_calls, env_substeps)
        prof.limit["env_vector_steps"] = vector_steps
        prof.limit["env_s"] = _time_env(resolved, made, vector_steps, laps.now)
    if between and limit is not None and limit.network_path is not None:
        prof.limit["network_s"], prof.limit["network_path"] = limit.network_s, limit.network_path
        prof.limit["inference_calls"] = limit.inference_calls
        prof.limit["inference_batch"] = limit.inference_samples // max(limit.inference_calls, 1)
        prof.limit["train_steps"] = limit.train_steps
        prof.limit["train_batch"] = limit.train_samples // max(limit.train_steps, 1)
    elif trainer is not None and hasattr(trainer, "stepper"):
        between = False
        inference = (inf_calls, inf_samples // max(inf_calls, 1))
        # the same samples per optimiser step (a step of k accumulated micro-batches is one step of their sum)
        training = (opt_calls, fwd_samples // max(opt_calls, 1))
        prof.limit["network_s"], prof.limit["network_path"] = _time_network(trainer, inference, training, laps.now)
        prof.limit["inference_calls"], prof.limit["inference_batch"] = inference
        prof.limit["train_steps"], prof.limit["train_batch"] = training
    prof.limit["interleaved"] = between
    _arithmetic(prof, trainer, laps.now)
    if "env_s" in prof.limit:
        prof.limit["limit_s"] = prof.limit["env_s"] + prof.limit.get("network_s", 0.0)
        prof.limit["limit_steps_per_second"] = prof.steps / prof.limit["limit_s"] if prof.limit["limit_s"] else None
    if plain:
        prof.plain_train_time = _plain_train_time(resolved, clock)
    if with_cprofile:
        prof.top = _top_functions(resolved, top)
    return prof


def format_speed_profile(prof: SpeedProfile) -> str:
    """The terminal report: parts per phase, the limit and the top functions."""
    lines = [f"{prof.algo} on {prof.env_label}: {prof.steps:,} steps, training {prof.training_time:.2f} s, "
             f"{prof.steps_per_second:,.0f} steps/s (evaluation excluded; {prof.clock} time)"]  # fmt: skip
    if prof.plain_train_time is not None:
        took = f"{prof.train_time:.2f} s"
        lines.append(f"  (a run as a trial makes it; the part-by-part run below, with its clock, took {took})")
    lines.append("")
    total = prof.train_time + prof.phases.get("eval", 0.0)
    lines.append(f"{'phase / part':<24}{'time s':>9}{'share':>8}{'calls':>9}{'per call':>12}")
    labels = {"inference": "policy inference", "env_step": "env step", "optimizer": "optimiser",
              "minibatch": "minibatch gather", "update_setup": "update setup", "eval": "evaluation"}  # fmt: skip
    for phase in ("rollout", "advantages", "update", "eval"):
        if phase not in prof.phases:
            continue
        t = prof.phases[phase]
        lines.append(f"{labels.get(phase, phase):<24}{t:>9.3f}{t / total:>8.1%}")
        for name, s in sorted(prof.parts.get(phase, {}).items(), key=lambda kv: -kv[1]):
            n = prof.calls.get(name, 0)
            per = f"{1e6 * s / n:>9.1f} us" if n and name != "other" else ""
            lines.append(
                f"  {labels.get(name, name):<22}{s:>9.3f}{s / total:>8.1%}{(n if name != 'other' else ''):>9}{per:>12}"
            )
    lim = prof.limit
    lines.append("")
    if "env_s" in lim:
        when = "timed between the training's iterations" if lim.get("interleaved") else "timed after the slice"
        lines.append(f"limit (same work, {when}): env alone {lim['env_s']:.3f} s ({lim['env_vector_steps']:,} vector steps)"
                     + (f" + network alone {lim['network_s']:.3f} s ({lim['inference_calls']:,} inferences of "
                        f"{lim['inference_batch']}, {lim['train_steps']:,} train steps of {lim['train_batch']}; "
                        f"{lim['network_path']})" if "network_s" in lim else " (network: not the suite's core)"))  # fmt: skip
        frac = prof.limit_fraction
        lines.append(f"  = {lim['limit_s']:.3f} s, {lim['limit_steps_per_second']:,.0f} steps/s; training runs at "
                     f"{frac:.2f} of the limit" if frac is not None else "")  # fmt: skip
    if lim.get("network_flop_rate") and lim.get("gemm_flop_rate"):
        rate, gemm = lim["network_flop_rate"], lim["gemm_flop_rate"]
        lines.append(f"network arithmetic: {lim['network_flops'] / 1e9:.2f} GFLOP of matrix products "
                     f"({lim['flops_per_train_step'] / 1e6:.2f} MFLOP a train step, {lim['flops_per_inference'] / 1e6:.3f} "
                     f"an inference) in the network's {lim['network_s']:.3f} s = {rate / 1e9:.1f} GFLOP/s, "
                     f"{rate / gemm:.2f} of this machine's matmul rate ({gemm / 1e9:.1f} GFLOP/s, "
                     f"{lim['gemm_size']}-square, same threads)")  # fmt: skip
    if prof.top:
        lines += ["", "top functions (cProfile, a second run of the slice; its overhead inflates Python-heavy code):",
                  f"  {'tottime s':>10}{'cumtime s':>11}{'calls':>10}  function"]  # fmt: skip
        for row in prof.top:
            lines.append(f"  {row['tottime_s']:>10.3f}{row['cumtime_s']:>11.3f}{row['calls']:>10}  {row['function']}")
    return "\n".join(lines)


def write_json(prof: SpeedProfile, path: Path) -> None:
    from suite.provenance import collect_provenance, utc_now_iso

    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format_version": 1, "timestamp": utc_now_iso(), "machine": collect_provenance(1), **prof.as_dict()}
    path.write_text(json.dumps(payload, indent=2, default=float))
