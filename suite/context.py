"""What an algorithm needs from the trial it runs in, as Protocols: :class:`TrialContext`, :class:`Agent`.

An algorithm's ``train(ctx, config) -> Agent`` is written against these, never against the trial runner
(:mod:`suite.trial`, which implements them): the registry, the envs and the algorithms sit below the runner and
name what they need here, so no low module imports the runner back (docs/design.md, "The import rule").
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only: importing the protocols costs nothing
    import numpy as np

    from suite.envs.specs import EnvSpec

PHASES = ("rollout", "advantages", "update", "eval")
"""The phases of a trial, timed (and, with a probe, measured for memory) separately. Every algorithm runs its loop
inside them: ``rollout`` (acting and storing), ``advantages`` (returns/advantages of the batch), ``update``
(gradient steps) and ``eval`` (the trial's evaluations). Training time is the sum of all but ``eval``."""


class PhaseProbe(Protocol):
    """Something measured around every phase (the memory probe is one); registered with
    :meth:`TrialContext.add_probe`. Calls must be cheap: they happen several times per update."""

    def enter(self, phase: str) -> None:
        """A phase starts (phases never nest)."""
        ...

    def exit(self, phase: str) -> None:
        """The phase that started last ends."""
        ...

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per phase, the fields to merge into the record's ``phases[phase]``."""
        ...


class Agent(Protocol):
    """What an algorithm's ``train`` returns: something that acts and can be saved."""

    def predict(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """Env-ready actions ``(B, *action_shape)`` for raw observations ``(B, *obs_shape)``."""
        ...

    def state_dict(self) -> Mapping[str, Any]: ...


class TrialContext(Protocol):
    """What an algorithm sees of its trial: the env and seeds, the step budget, the phases and the recorder.

    :class:`suite.trial.TrialContext` is the runner's implementation; a test may pass any object with these members.
    """

    @property
    def env_id(self) -> str:
        """The trial's env id."""
        ...

    @property
    def env_spec(self) -> EnvSpec:
        """What the suite knows about the env (spaces, episode limit, family)."""
        ...

    @property
    def env_kwargs(self) -> Mapping[str, Any]:
        """The trial's resolved env kwargs."""
        ...

    @property
    def seed(self) -> int:
        """The trial seed."""
        ...

    @property
    def total_timesteps(self) -> int:
        """The env-step budget."""
        ...

    @property
    def train_seed(self) -> int:
        """Reset seed of training sub-env 0 (sub-env ``k`` gets ``train_seed + k``)."""
        ...

    @property
    def seed_rng(self) -> np.random.Generator:
        """Generator for algorithms that need fresh reset seeds (:meth:`draw_seeds`)."""
        ...

    steps: int
    """Env steps taken so far; the algorithm advances it."""

    @property
    def eval_freq(self) -> int:
        """Env steps between periodic evaluations."""
        ...

    @property
    def remaining_steps(self) -> int:
        """Env steps left in the budget."""
        ...

    def make_envs(self, n_envs: int, **kwargs: Any) -> Any:
        """Training envs for this trial (:func:`suite.envs.make_vec_env` kwargs; closed by the runner)."""
        ...

    def draw_seeds(self, k: int) -> np.ndarray:
        """``k`` fresh training reset seeds, disjoint from the evaluation seeds."""
        ...

    def add_probe(self, probe: PhaseProbe) -> None:
        """Measure ``probe`` around every phase from now on."""
        ...

    def phase(self, name: str) -> AbstractContextManager[None]:
        """``with ctx.phase("rollout"): ...``: time (and probe) one phase of the loop (one of :data:`PHASES`)."""
        ...

    def begin_phase(self, name: str) -> None:
        """Start phase ``name``, ending the current one (for loops that are not a ``with`` block)."""
        ...

    def end_phase(self) -> None:
        """End the current phase (no-op when none is running)."""
        ...

    def record_metric(self, name: str, value: float) -> None:
        """A trial-level scalar, stored in the record's ``metrics``."""
        ...

    def record_episodes(self, step: int, returns: np.ndarray, lengths: np.ndarray) -> None:
        """Finished training episodes (raw score) ending at global env step ``step``."""
        ...

    def record_update(self, metrics: Mapping[str, float]) -> None:
        """One update's diagnostics (a row of the record's ``updates``)."""
        ...

    def after_iteration(self, agent: Agent) -> None:
        """Call after each rollout + update: runs the periodic evaluation when its step has come."""
        ...

    def evaluate(self, agent: Agent, final: bool) -> dict[str, Any]:
        """Evaluate ``agent`` on the trial's evaluation seeds now; returns the evaluation row."""
        ...
