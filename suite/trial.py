"""A trial: one algorithm trained on one env with one seed and budget, measured and recorded.

A trial is a pure function of (algorithm id + version, resolved config, env id + kwargs, seed, budget,
torch threads): :func:`run_trial` seeds Python, numpy, torch, every env and action space, fixes torch's
thread count, trains, evaluates on seeds disjoint from the training seeds, and returns a record (a plain
dict, the schema :mod:`suite.store` persists). Failures are data: an exception gives status ``failed``
with its traceback, a NaN/inf gives ``diverged``; neither escapes.

The seed layout (training and evaluation seeds, disjoint) is :mod:`suite.seeding`; what an algorithm sees of the
trial is the :class:`suite.context.TrialContext` protocol, which :class:`TrialContext` here implements.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import resource
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from suite import __version__
from suite.config import config_identity, config_to_dict, stable_hash
from suite.context import PHASES, Agent, PhaseProbe
from suite.envs.factory import make_vec_env
from suite.envs.infos import finished_episodes
from suite.envs.metrics import TRIAL_END_HOOKS
from suite.envs.specs import env_label, get_env_spec, resolve_env_kwargs
from suite.errors import Diverged, UserError
from suite.kernels import check_mode as check_kernels
from suite.kernels import check_process as check_kernel_process
from suite.kernels import default_mode
from suite.kernels import read_back as read_back_kernels
from suite.memory_probe import check_mode, start_memory_probe
from suite.plugins import load_plugins
from suite.provenance import collect_provenance, utc_now_iso
from suite.registry import AlgorithmSpec, check_compatible, get_algorithm
from suite.schedstat import RunQueueClock
from suite.seeding import EVAL_SEED_BASE, TRAIN_SEED_STRIDE, eval_seeds, seed_everything
from suite.store.models import model_filename

RECORD_FORMAT = 2
"""Format version of a record and of a saved model file."""

_DEVICE = ["cpu"]
"""The device a :class:`TrialSpec` gets when none is given (``--device`` of ``suite reproduce``, whose specs come from the
claim set: :func:`default_device`)."""


_KERNELS: list[str | None] = [None]
"""The kernel mode a :class:`TrialSpec` gets when none is given (``--kernels`` of commands whose specs are made
further down: :func:`trial_kernels`); None: :func:`suite.kernels.default_mode`."""


def default_kernels() -> str:
    """The kernel mode of a new :class:`TrialSpec` that names none: the innermost :func:`trial_kernels`, else
    ``$SUITE_KERNELS``, else :data:`suite.kernels.DEFAULT`."""
    return _KERNELS[-1] or default_mode()


@contextlib.contextmanager
def trial_kernels(mode: str | None) -> Iterator[None]:
    """Make ``mode`` the default of the TrialSpecs created inside the block (None: leave the default)."""
    _KERNELS.append(check_kernels(mode) if mode is not None else _KERNELS[-1])
    try:
        yield
    finally:
        _KERNELS.pop()


def default_device() -> str:
    """The device of a new :class:`TrialSpec` that names none: ``cpu`` unless inside :func:`trial_device`."""
    return _DEVICE[-1]


@contextlib.contextmanager
def trial_device(device: str) -> Iterator[None]:
    """Make ``device`` the default of the TrialSpecs created inside the block (``suite reproduce --device``)."""
    _DEVICE.append(device)
    try:
        yield
    finally:
        _DEVICE.pop()


_GPUS_ELSEWHERE = [False]
"""True inside :func:`gpus_checked_where_trials_run`."""


@contextlib.contextmanager
def gpus_checked_where_trials_run() -> Iterator[None]:
    """Inside the block :func:`check_device` checks a CUDA device's spelling only: the trials run on other machines
    (a Ray cluster's nodes), whose GPUs this one need not have; each trial checks its device where it runs."""
    _GPUS_ELSEWHERE.append(True)
    try:
        yield
    finally:
        _GPUS_ELSEWHERE.pop()


def check_device(text: str) -> str:
    """The torch device ``text`` names, checked: ``cpu``, ``cuda`` or ``cuda:N`` where torch sees that GPU (only
    the spelling inside :func:`gpus_checked_where_trials_run`).

    Raises:
        UserError: anything else, or a CUDA device on a machine where torch sees none (one line).
    """
    try:
        device = torch.device(text)
    except (RuntimeError, TypeError):
        raise UserError(f"--device {text!r} is not a torch device; allowed: cpu, cuda, cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise UserError(f"--device {text!r}: the suite runs on cpu or cuda; allowed: cpu, cuda, cuda:N")
    if device.type == "cuda" and not _GPUS_ELSEWHERE[-1]:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise UserError(f"--device {text}: torch {torch.__version__} sees no CUDA GPU on this machine; use --device cpu")
        if device.index is not None and device.index >= count:
            raise UserError(f"--device {text}: torch sees {count} CUDA GPU(s) (cuda:0 to cuda:{count - 1})")
    return text


@dataclass(frozen=True)
class TrialSpec:
    """What the user asks for; :meth:`resolve` validates it and fills in every default."""

    algo: str
    """Registry id or alias."""
    env_id: str
    """Suite env id (``suite list`` shows them)."""
    seed: int
    """Trial seed (>= 0)."""
    total_timesteps: int
    """Env-step budget. Every algorithm stops at it (rounded up to whole steps of its vector env, so the overshoot
    is below ``n_envs``): the last rollout is shortened, episode-group algorithms train on the groups completed
    within it, SB3's ``learn`` is stopped by the trial callback. The record's ``steps`` is what was trained."""
    overrides: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Hyperparameter overrides applied over the per-env defaults."""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Env options (e.g. TextMatch ``language``/``target``)."""
    threads: int = 1
    """torch intra-op threads; bitwise reproducibility needs the same count."""
    n_eval_episodes: int = 10
    """Episodes per evaluation."""
    eval_freq: int = 0
    """Env steps between periodic evaluations; 0 = a tenth of the budget."""
    study: str | None = None
    """Study name, for grouping in the results database."""
    plugins: tuple[str, ...] = ()
    """Plugins (``.py`` file paths, absolute, or module names) to load before resolving: :meth:`resolve` loads them
    in whichever process runs it (worker, Ray task), so they register the same algorithms and envs everywhere.
    Not part of the trial key (the algorithm id and version are); the record's provenance names the plugin."""
    eval_deterministic: bool = True
    """Evaluate the policy's mode (True) or actions sampled from it (False, e.g. rl-baselines3-zoo's Atari agents).
    Part of the trial key only when False, so every trial key made before the option exists stays the same."""
    memory_profile: str = "rss"
    """How memory is measured per phase: ``off``, ``rss`` or ``full`` (:mod:`suite.memory_probe`). Not part of the
    key: it measures, it never changes a result."""
    device: str = field(default_factory=default_device)
    """torch device of the algorithm's specification (``cpu``, ``cuda``, ``cuda:N``); accelerators run on the CPU
    only. Part of the key only when it is not ``cpu``, so every CPU trial keeps its key."""
    kernels: str = field(default_factory=default_kernels)
    """Kernel mode (:mod:`suite.kernels`): ``native`` or ``portable``. Part of the key only when portable, so every
    native trial keeps the key it had before the modes existed."""

    def resolve(self) -> ResolvedTrial:
        load_plugins(self.plugins)  # also the installed (entry-point) plugins; a no-op once loaded
        if self.seed < 0:
            raise UserError(f"seed must be >= 0, got {self.seed}")
        if self.total_timesteps < 1:
            raise UserError(f"the step budget must be >= 1, got {self.total_timesteps}")
        if self.threads < 1:
            raise UserError(f"threads must be >= 1, got {self.threads}")
        if self.n_eval_episodes < 1:
            raise UserError(f"n_eval_episodes must be >= 1, got {self.n_eval_episodes}")
        check_mode(self.memory_profile)
        check_device(self.device)
        kernels = check_kernels(self.kernels)
        algo = get_algorithm(self.algo)
        get_env_spec(self.env_id)
        check_compatible(algo, self.env_id)
        env_kwargs = resolve_env_kwargs(self.env_id, dict(self.env_kwargs))
        config = algo.make_config(self.env_id, dict(self.overrides))
        check_env = getattr(config, "check_env", None)
        if check_env is not None:  # env-dependent config checks (e.g. a storage dtype only images allow)
            check_env(get_env_spec(self.env_id))
        config_dict = config_to_dict(config)
        config_hash = stable_hash(config_identity(config))
        eval_freq = self.eval_freq or max(self.total_timesteps // 10, 1)
        identity = {
            "algo": algo.id,
            "algo_version": algo.version,
            "env_id": self.env_id,
            "env_kwargs": env_kwargs,
            "seed": self.seed,
            "budget": self.total_timesteps,
            "config_hash": config_hash,
            "threads": self.threads,
            "n_eval_episodes": self.n_eval_episodes,
            "eval_freq": eval_freq,
        }
        if not self.eval_deterministic:
            identity["eval_deterministic"] = False
        if self.device != "cpu":
            identity["device"] = self.device
        if kernels != "native":
            identity["kernels"] = kernels
            if algo.portable_revision > 1:  # its portable path changed since revision 1 (registry)
                identity["kernels_revision"] = algo.portable_revision
        return ResolvedTrial(
            spec=self,
            algo=algo,
            config=config,
            config_dict=config_dict,
            config_hash=config_hash,
            env_kwargs=env_kwargs,
            eval_freq=eval_freq,
            key=stable_hash(identity, 64),
        )


def _kernels_revision(resolved: ResolvedTrial) -> dict[str, int]:
    """``{"revision": n}`` for a portable trial of an algorithm whose portable path is at revision ``n`` > 1 (the
    revision its key holds), else nothing: the provenance of every other trial stays as it was."""
    revision = resolved.algo.portable_revision
    return {"revision": revision} if resolved.spec.kernels != "native" and revision > 1 else {}


@dataclass(frozen=True)
class ResolvedTrial:
    """A validated trial with its resolved config and its identity key."""

    spec: TrialSpec
    algo: AlgorithmSpec
    config: Any
    config_dict: dict[str, Any]
    config_hash: str
    env_kwargs: dict[str, Any]
    eval_freq: int
    key: str
    """SHA-256 over (algo, version, env, env kwargs, seed, budget, config hash, threads, eval protocol)."""

    @property
    def label(self) -> str:
        return f"{self.algo.id}/{env_label(self.spec.env_id, self.env_kwargs)}/seed{self.spec.seed}"


def evaluate_policy(
    predict: Callable[[np.ndarray], np.ndarray],
    env_id: str,
    env_kwargs: Mapping[str, Any],
    seeds: list[int],
    tick: Callable[[], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Run one episode per seed, all in one vector env (one policy call per step for all of them); ``tick`` is
    called after every step (the trial's sign of life to the executor during a long evaluation: whole Pong games).

    Returns:
        ``(returns (E,), lengths (E,))``: raw episode scores (Atari: the game score) and lengths.
    """
    n = len(seeds)
    envs = make_vec_env(env_id, n, training=False, env_kwargs=dict(env_kwargs), vectorization="sync")
    try:
        obs, _ = envs.reset(seed=list(seeds))
        returns = np.full(n, np.nan)
        lengths = np.zeros(n, dtype=np.int64)
        done = np.zeros(n, dtype=bool)
        while not done.all():
            obs, _, _, _, info = envs.step(predict(obs))
            if info.get("final_info"):  # some episode ended (most steps end none: skip the bookkeeping)
                mask, ret, length = finished_episodes(info, n)
                new = mask & ~done
                returns[new], lengths[new] = ret[new], length[new]
                done |= mask
            if tick is not None:
                tick()
        return returns, lengths
    finally:
        envs.close()


class TrialContext:
    """The runner's :class:`suite.context.TrialContext`: env construction, seeds, the phase clock and the recorder."""

    def __init__(self, resolved: ResolvedTrial, progress: Callable[[int], None] | None = None):
        spec = resolved.spec
        self.resolved = resolved
        self.env_id = spec.env_id
        self.env_spec = get_env_spec(spec.env_id)
        self.env_kwargs = resolved.env_kwargs
        self.seed = spec.seed
        self.device = spec.device
        """torch device of the algorithm's networks and update (accelerators run on the CPU only)."""
        self.total_timesteps = spec.total_timesteps
        self.train_seed = spec.seed * TRAIN_SEED_STRIDE
        """Reset seed of sub-env 0 (sub-env k gets ``train_seed + k``)."""
        self.seed_rng = np.random.default_rng(spec.seed)
        """Generator for algorithms that need fresh reset seeds (draw in [0, 2**30))."""
        self.steps = 0
        """Env steps taken so far (algorithms advance it)."""
        self.curve_step: list[int] = []
        self.curve_return: list[float] = []
        self.curve_length: list[int] = []
        self.evals: list[dict[str, Any]] = []
        self.updates: list[dict[str, Any]] = []
        self.metrics: dict[str, float] = {}
        """Trial-level scalars beyond the standard record (an algorithm's or env's own), see :meth:`record_metric`."""
        self.times: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.cpu_times: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        """CPU seconds of this process per phase: unlike wall time, barely moved by other load on a shared machine."""
        self.waits: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        """Run-queue wait per phase: seconds the thread running the phases was runnable but another task had the CPU
        (:mod:`suite.schedstat`; recorded only where the kernel provides it). ``time - wait`` is the phase's wall time
        with the load of other processes taken out and its own sleeps and waits kept."""
        self._run_queue = RunQueueClock()
        self.phase_calls: dict[str, int] = dict.fromkeys(PHASES, 0)
        self.probes: list[PhaseProbe] = []
        self._phase: str | None = None
        self._phase_t0 = 0.0
        self._phase_c0 = 0.0
        self._phase_q0: float | None = None
        self._envs: list[Any] = []
        self._next_eval = resolved.eval_freq
        self._progress = progress
        self._eval_seeds = eval_seeds(spec.seed, spec.n_eval_episodes)

    # -- envs ----------------------------------------------------------------------------------------------
    def make_envs(self, n_envs: int, **kwargs: Any) -> Any:
        """Training envs for this trial (closed by the runner). kwargs go to :func:`suite.envs.make_vec_env`."""
        kwargs.setdefault("env_kwargs", dict(self.env_kwargs))
        envs = make_vec_env(self.env_id, n_envs, **kwargs)
        self._envs.append(envs)
        return envs

    def draw_seeds(self, k: int) -> np.ndarray:
        """``k`` fresh training reset seeds from the trial's stream (disjoint from evaluation seeds)."""
        return self.seed_rng.integers(0, EVAL_SEED_BASE, size=k)

    @property
    def eval_freq(self) -> int:
        """Env steps between periodic evaluations (resolved: a tenth of the budget unless the spec says)."""
        return self.resolved.eval_freq

    @property
    def remaining_steps(self) -> int:
        """Env steps left in the budget; an algorithm collects at most this many more (rounded up to whole
        vector steps), so every algorithm is evaluated at the same step count."""
        return max(self.total_timesteps - self.steps, 0)

    # -- phases ----------------------------------------------------------------------------------------------
    def add_probe(self, probe: PhaseProbe) -> None:
        """Measure ``probe`` around every phase from now on."""
        self.probes.append(probe)

    def begin_phase(self, name: str) -> None:
        """Start phase ``name`` (ending the current one, if any). For loops that are not a ``with`` block, like
        SB3's callbacks; prefer :meth:`phase`."""
        if name not in self.times:
            raise ValueError(f"unknown phase {name!r}; phases: {', '.join(PHASES)}")
        self.end_phase()
        for probe in self.probes:
            probe.enter(name)
        # the run-queue wait is read last, here and at the end: a thread is often preempted as a system call returns
        # (the CPU clock's read is one) and its wait is counted when it runs again, so a preemption at the return of
        # the beginning's read falls inside both the wall and the wait window, one at the end's read inside neither.
        # Read before the CPU clock, the wait counted preemptions the wall clock did not: wall - wait fell below
        # the CPU time under load (tests/test_schedstat.py).
        self._phase, self._phase_c0 = name, time.process_time()
        self._phase_t0 = time.perf_counter()
        self._phase_q0 = self._run_queue.read()

    def end_phase(self) -> None:
        """End the current phase (no-op when none is running)."""
        if self._phase is None:
            return
        name, self._phase = self._phase, None
        self.cpu_times[name] += time.process_time() - self._phase_c0
        self.times[name] += time.perf_counter() - self._phase_t0
        waited = self._run_queue.read()
        if waited is not None and self._phase_q0 is not None:
            self.waits[name] += waited - self._phase_q0
        self.phase_calls[name] += 1
        for probe in self.probes:
            probe.exit(name)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """``with ctx.phase("rollout"): ...``: time (and probe) one phase of the loop."""
        outer = self._phase
        if outer is not None:
            self.end_phase()
        self.begin_phase(name)
        try:
            yield
        finally:
            self.end_phase()
            if outer is not None:
                self.begin_phase(outer)

    def train_time(self) -> float:
        """Seconds spent training so far: every phase but ``eval``."""
        return sum(t for name, t in self.times.items() if name != "eval")

    def phases_record(self) -> dict[str, dict[str, Any]]:
        """``{phase: {"time_s", "cpu_s", "wait_s", "calls", ...probe fields}}`` for the phases that ran (``wait_s``,
        the run-queue wait, only where the kernel provides it)."""
        waits = self._run_queue.available
        out = {
            name: {"time_s": self.times[name], "cpu_s": self.cpu_times[name], "calls": self.phase_calls[name]}
            | ({"wait_s": self.waits[name]} if waits else {})
            for name in self.times
            if self.phase_calls[name]
        }
        for probe in self.probes:
            for name, fields in probe.summary().items():
                out.setdefault(name, {"time_s": 0.0, "calls": 0}).update(fields)
        return out

    # -- recording -----------------------------------------------------------------------------------------
    def record_metric(self, name: str, value: float) -> None:
        """A trial-level scalar (stored in the record's ``metrics``; the last value of a name wins)."""
        self.metrics[name] = float(value)

    def record_episodes(self, step: int, returns: np.ndarray, lengths: np.ndarray) -> None:
        """Finished training episodes (raw score) ending at global env step ``step``."""
        n = len(returns)
        self.curve_step.extend([int(step)] * n)
        self.curve_return.extend(float(r) for r in returns)
        self.curve_length.extend(int(x) for x in lengths)

    def record_update(self, metrics: Mapping[str, float]) -> None:
        row: dict[str, Any] = {"update": len(self.updates) + 1, "step": self.steps}
        row.update({k: float(v) for k, v in metrics.items()})
        self.updates.append(row)

    def after_iteration(self, agent: Agent) -> None:
        """Call after each rollout+update: runs the periodic evaluation when its step has come."""
        if self.steps >= self._next_eval and self.steps < self.total_timesteps:
            self.evaluate(agent, final=False)
            freq = self.resolved.eval_freq
            self._next_eval = (self.steps // freq + 1) * freq
        if self._progress is not None:
            self._progress(self.steps)

    def evaluate(self, agent: Agent, final: bool) -> dict[str, Any]:
        with self.phase("eval"):
            progress, steps = self._progress, self.steps
            deterministic = self.resolved.spec.eval_deterministic
            make = getattr(agent, "predictor", None)  # the suite's policies: one plan per evaluation
            predict = make(deterministic) if make is not None else (lambda o: agent.predict(o, deterministic=deterministic))
            # Sampled actions draw from torch's generator (SB3's DQN from numpy's, for its epsilon): both are forked,
            # seeded from the evaluation seeds, so an evaluation never moves the training's random streams.
            numpy_state = None if deterministic else np.random.get_state()
            with torch.random.fork_rng(devices=[], enabled=not deterministic):
                if not deterministic:
                    torch.manual_seed(self._eval_seeds[0] + len(self.evals))
                    np.random.seed((self._eval_seeds[0] + len(self.evals)) % 2**32)
                try:
                    returns, lengths = evaluate_policy(
                        predict, self.env_id, self.env_kwargs, self._eval_seeds,
                        tick=None if progress is None else (lambda: progress(steps)),
                    )  # fmt: skip
                finally:
                    if numpy_state is not None:
                        np.random.set_state(numpy_state)
        row = {
            "step": self.steps,
            "final": final,
            "returns": returns.tolist(),
            "lengths": lengths.tolist(),
            "wall_time_s": self.train_time(),  # training time so far, evaluation excluded
        }
        self.evals.append(row)
        return row

    def close(self) -> None:
        for envs in self._envs:
            with contextlib.suppress(Exception):
                envs.close()
        self._envs.clear()
        self._run_queue.close()


def _peak_rss_mb() -> float:
    # ru_maxrss is in KiB on Linux; the trial runs in its own process, so this is the trial's peak.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _current_rss_mb() -> float:
    import psutil

    return psutil.Process(os.getpid()).memory_info().rss / 2**20


def save_model(path: Path, agent: Agent, resolved: ResolvedTrial) -> None:
    """Plain tensors + resolved config, loadable with ``torch.load(..., weights_only=True)``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": RECORD_FORMAT,
        "algo": resolved.algo.id,
        "algo_version": resolved.algo.version,
        "env_id": resolved.spec.env_id,
        "env_kwargs": dict(resolved.env_kwargs),
        "seed": resolved.spec.seed,
        "key": resolved.key,  # the file's name holds only a prefix (suite.store.models)
        "config": resolved.config_dict,
        "state_dict": {k: v.detach().cpu().clone() for k, v in agent.state_dict().items()},
    }
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_policy(path: str | Path) -> tuple[Any, dict[str, Any]]:
    """Rebuild a saved policy (``torch.load(weights_only=True)``: plain tensors only) and return it with the
    saved payload (algo, env, config). A file that is not a suite policy is a UserError."""
    try:
        payload = torch.load(path, weights_only=True)
    except FileNotFoundError:
        raise UserError(f"no such model file: {path}") from None
    except Exception as exc:  # noqa: BLE001  (any unpickling error means: not our file)
        raise UserError(f"{path} is not a saved suite policy ({type(exc).__name__})") from None
    if not isinstance(payload, dict) or "state_dict" not in payload or "algo" not in payload:
        raise UserError(f"{path} is not a saved suite policy")
    algo = get_algorithm(payload["algo"])
    if algo.policy_factory is None:
        raise UserError(f"{algo.id} policies cannot be rebuilt for re-evaluation")
    cfg = algo.make_config(payload["env_id"], payload["config"])
    envs = make_vec_env(payload["env_id"], 1, training=False, env_kwargs=payload["env_kwargs"], vectorization="sync")
    try:
        policy = algo.policy_factory(envs.single_observation_space, envs.single_action_space, cfg)
    finally:
        envs.close()
    policy.load_state_dict(payload["state_dict"])
    policy.eval()
    return policy, payload


def run_trial(
    resolved: ResolvedTrial,
    *,
    models_dir: Path | None = None,
    progress: Callable[[int], None] | None = None,
    memory_capture: Path | None = None,
) -> dict[str, Any]:
    """Train, evaluate, measure; return the trial record. Never raises for a failure inside the trial.
    ``memory_capture``: with ``memory_profile="full"``, keep memray's capture file there (for a flame graph)."""
    spec = resolved.spec
    check_kernel_process(spec.kernels)  # a portable trial only where the libraries were loaded held (one line)
    for module in resolved.algo.imports:  # before the clock, the seeds and the memory baseline
        importlib.import_module(module)
    started = utc_now_iso()
    t0 = time.perf_counter()
    seed_everything(spec.seed, spec.threads)
    baseline_rss = _current_rss_mb()
    ctx = TrialContext(resolved, progress)
    memory = start_memory_probe(ctx, spec.memory_profile, capture=memory_capture)
    status, error, tb, model_path, failure_kind = "ok", None, None, None, None
    try:
        agent = resolved.algo.train(ctx, resolved.config)
        last = ctx.evals[-1] if ctx.evals else None
        if last is not None and last["step"] == ctx.steps:
            last["final"] = True  # the periodic evaluation already ran at the last step
        else:
            ctx.evaluate(agent, final=True)
        hook = TRIAL_END_HOOKS.get(spec.env_id)
        if hook is not None:
            with ctx.phase("eval"):
                hook(ctx, agent)
        if models_dir is not None:
            model_path = Path(models_dir) / model_filename(resolved.algo.id, spec.env_id, spec.seed, resolved.key)
            save_model(model_path, agent, resolved)
    except Diverged as exc:
        status, error, tb, failure_kind = "diverged", f"Diverged: {exc}", traceback.format_exc(), "diverged"
    except Exception as exc:  # noqa: BLE001  (failures are data: record, never propagate)
        status, error, tb, failure_kind = "failed", f"{type(exc).__name__}: {exc}", traceback.format_exc(), "exception"
    finally:
        ctx.end_phase()
        ctx.close()
        if memory is not None:
            memory.stop()
    return _assemble(
        resolved, ctx, status=status, error=error, tb=tb, wall=time.perf_counter() - t0, started=started,
        model_path=model_path, baseline_rss=baseline_rss, failure_kind=failure_kind,
        peak_rss=memory.peak_mb() if memory is not None else _peak_rss_mb(),
    )  # fmt: skip


def failure_record(
    resolved: ResolvedTrial, error: str, wall_time_s: float = 0.0, failure_kind: str = "worker_died"
) -> dict[str, Any]:
    """The record of a trial whose process died before it could report (crash, OOM kill, timeout)."""
    ctx = TrialContext(resolved)
    now = utc_now_iso()
    return _assemble(
        resolved, ctx, status="failed", error=error, tb=None, wall=wall_time_s, started=now,
        model_path=None, baseline_rss=None, peak_rss=None, failure_kind=failure_kind,
    )  # fmt: skip


def _assemble(
    resolved: ResolvedTrial,
    ctx: TrialContext,
    *,
    status: str,
    error: str | None,
    tb: str | None,
    wall: float,
    started: str,
    model_path: Path | None,
    baseline_rss: float | None,
    peak_rss: float | None,
    failure_kind: str | None = None,
) -> dict[str, Any]:
    spec = resolved.spec
    train_time = ctx.train_time()
    final = next((e for e in reversed(ctx.evals) if e["final"]), None)
    final_returns = np.asarray(final["returns"]) if final else None
    return {
        "format": RECORD_FORMAT,
        "key": resolved.key,
        "study": spec.study,
        "algo": resolved.algo.id,
        "algo_version": resolved.algo.version,
        "env_id": spec.env_id,
        "env_kwargs": dict(resolved.env_kwargs),
        "env_label": env_label(spec.env_id, resolved.env_kwargs),
        "seed": spec.seed,
        "budget": spec.total_timesteps,
        "threads": spec.threads,
        "n_eval_episodes": spec.n_eval_episodes,
        "eval_freq": resolved.eval_freq,
        "config": resolved.config_dict,
        "config_hash": resolved.config_hash,
        "status": status,
        "error": error,
        "traceback": tb,
        "steps": ctx.steps,
        "wall_time_s": wall,
        "rollout_time_s": ctx.times["rollout"],
        "update_time_s": train_time - ctx.times["rollout"],  # advantages + gradient steps
        "eval_time_s": ctx.times["eval"],
        "steps_per_second": ctx.steps / train_time if train_time > 0 else 0.0,
        "peak_rss_mb": peak_rss,
        "baseline_rss_mb": baseline_rss,
        "final_eval_mean": float(final_returns.mean()) if final_returns is not None else None,
        "final_eval_std": float(final_returns.std()) if final_returns is not None else None,
        "provenance": {
            **collect_provenance(spec.threads, algo=resolved.algo.id, env_id=spec.env_id),
            "device": spec.device,
            "kernels": {**read_back_kernels(), "mode": spec.kernels, **_kernels_revision(resolved)},
        },
        "suite_version": __version__,
        "started_at": started,
        "ended_at": utc_now_iso(),
        "model_path": str(model_path) if model_path else None,
        "curve": {"step": ctx.curve_step, "return": ctx.curve_return, "length": ctx.curve_length},
        "evals": ctx.evals,
        "updates": ctx.updates,
        "attempts": 1,
        "failure_kind": failure_kind,
        "phases": ctx.phases_record(),
        "metrics": dict(ctx.metrics),
    }


def deterministic_view(record: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a record that must be identical when a trial is run twice (no clocks, no memory)."""
    volatile = {
        "wall_time_s", "rollout_time_s", "update_time_s", "eval_time_s", "steps_per_second", "peak_rss_mb",
        "baseline_rss_mb", "provenance", "started_at", "ended_at", "model_path", "traceback", "phases", "attempts",
    }  # fmt: skip
    out = {k: v for k, v in record.items() if k not in volatile}
    out["evals"] = [{k: v for k, v in e.items() if k != "wall_time_s"} for e in record.get("evals", [])]
    return out
