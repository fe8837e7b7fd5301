"""Accelerators: faster CPU paths of the algorithms' losses, kept apart from the specifications they compute.

An algorithm's module holds its loss as plain autograd code, the *specification*: it runs on any torch device and
is what a reader learns the algorithm from. An *accelerator* computes the same loss and fills the same gradients
another way (on the suite's small MLP policies: a hand-derived backward in numpy and a few fixed ATen calls, several
times faster than eager autograd there). It is registered against the specification it accelerates
(:func:`register_accelerator`), and a trainer uses it when one applies to its policy and config on the CPU, else the
specification by autograd (:func:`accelerate`). ``docs/accel.md`` lists the accelerators, what each does, and what it
was measured to save.

The interface, all of it:

* :class:`Evaluated`: one (micro-)batch's loss, evaluated: its value, its metrics and a ``backward(accumulate)``
  that writes its gradient into the parameters' (flat) gradients. A trainer's specification path and an
  accelerator's both produce one, so the update loop does not know which ran.
* An accelerator, built per trainer, has ``forward(batch) -> Evaluated`` for the trainer's batch type (a
  :class:`~suite.algorithms.core.Minibatch`, a GRPO slice, a pairwise episode batch). Optionally
  ``minibatch_extra(extra) -> extra`` (per-sample inputs it precomputes once per update, actor-critic family) and
  ``network_extra() -> (what, run)`` (network passes its loss makes beyond the network's forward and backward, which
  ``suite profile speed`` adds to its limit).
* :class:`Accelerator`: the registration: the specification function, the algorithm ids that train with it, when
  it applies, how to build it, the source fingerprint of the specification it was checked against, and the cases
  of the shared parity harness.

**The parity harness** (:mod:`suite.parity`, run by ``tests/test_accel_parity.py``) runs every registered
accelerator, plugins' included, through the same checks: loss value, metrics and gradients on real minibatches of a
trial against the specification's, then several whole updates of both paths from the same state (tolerances stated
there); and the fingerprint of the specification's source (:func:`fingerprint`: its syntax tree without docstrings,
so formatting and comments do not count) against the one the accelerator records. Change a specification and its
accelerator fails the harness until it is made to agree again and its fingerprint updated; until then trials run the
changed specification, never the stale accelerator (:func:`is_current`, checked once per process).

A trainer that wants accelerators provides, besides the update loop that calls ``forward``: ``stepper`` (its
:class:`~suite.algorithms.core.GradientStepper`), ``accelerator`` (None runs the specification),
``spec_forward(batch) -> Evaluated`` (the specification by autograd), ``prepare()`` (one collection and its
advantages, or None) and ``optimise(prepared, progress)`` (one update): the harness drives exactly these
(:class:`suite.algorithms.trainer.Trainer` implements them).
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import textwrap
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch


class Evaluated:
    """One (micro-)batch's loss, evaluated by a specification (autograd) or an accelerator (by hand).

    Attributes:
        loss: the (micro-)batch's loss as the update uses it (already scaled by its share of a minibatch): a float
            or a 0-d tensor.
        metrics: name -> float or 0-d tensor, the diagnostics the update averages.
        backward: ``backward(accumulate)`` writes the loss's gradient into the parameters' gradients: added to them
            (``True``: a later micro-batch of the same step) or in place of them (``False``). Call it at most once.
    """

    __slots__ = ("backward", "loss", "metrics")

    def __init__(self, loss: Any, metrics: Mapping[str, Any], backward: Callable[[bool], None]):
        self.loss, self.metrics, self.backward = loss, metrics, backward


class LossPath(Protocol):
    """What :attr:`Accelerator.build` returns: the accelerated loss of one trainer."""

    def forward(self, batch: Any) -> Evaluated: ...


@dataclass(frozen=True)
class ParityCase:
    """One trial setting the parity harness checks an accelerator on (the accelerator must apply to it)."""

    algo: str
    """Registered algorithm id."""
    env: str
    """Env id."""
    overrides: Mapping[str, Any] = field(default_factory=dict)
    """Hyperparameter overrides of the case."""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Env options (e.g. ``{"language": "code"}``)."""

    @property
    def label(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in {**self.env_kwargs, **self.overrides}.items())
        return f"{self.algo}/{self.env}" + (f"[{extra}]" if extra else "")


@dataclass(frozen=True)
class Accelerator:
    """A registered accelerator: which specification it computes, when, and how the harness checks it."""

    name: str
    """Short id, e.g. ``ppo-hand-derived``."""
    specification: Callable[..., Any]
    """The function it computes another way: the trainer's specification method (``PPOTrainer.loss``), looked up by
    identity (:func:`accelerate`); a subclass that keeps it keeps its accelerator."""
    algorithms: tuple[str, ...]
    """Algorithm ids whose trainers use the specification (documentation, and the harness's cases name them)."""
    fingerprint: str
    """:func:`fingerprint` of :attr:`covers` when the accelerator was last checked against them."""
    applies: Callable[[Any], bool]
    """``applies(trainer)``: whether it computes the trainer's loss with its policy and config (on the CPU)."""
    build: Callable[[Any], LossPath]
    """``build(trainer)``: the accelerated loss of that trainer."""
    covers: tuple[Callable[..., Any], ...] = ()
    """Every function whose source defines the specification's maths (the specification first); default: it alone."""
    parity: tuple[ParityCase, ...] = ()
    """Settings of the parity harness (at least one; each must be one the accelerator applies to)."""
    summary: str = ""
    """One line: what it does differently (``docs/accel.md`` has the figures)."""

    @property
    def sources(self) -> tuple[Callable[..., Any], ...]:
        """The functions the fingerprint is taken over."""
        return self.covers or (self.specification,)

    def current_fingerprint(self) -> str:
        """:func:`fingerprint` of the specification's source as it is now."""
        return fingerprint(*self.sources)


_ACCELERATORS: dict[str, Accelerator] = {}


def register_accelerator(accelerator: Accelerator) -> Accelerator:
    """Register an accelerator (a built-in one, or a plugin's at its import). Returns it.

    Raises:
        ValueError: its name is taken (by another specification: a plugin file loaded again replaces its own), or it
            names no parity case.
    """
    taken = _ACCELERATORS.get(accelerator.name)
    if taken is not None and _where(taken.specification) != _where(accelerator.specification):
        raise ValueError(f"accelerator {accelerator.name!r} is already registered; choose another name")
    if not accelerator.parity:
        raise ValueError(f"accelerator {accelerator.name!r} names no parity case: the harness must check it")
    _ACCELERATORS[accelerator.name] = accelerator
    _CURRENT.pop(accelerator.name, None)
    return accelerator


def _where(fn: Callable[..., Any]) -> tuple[str, str]:
    return fn.__module__, fn.__qualname__


def unregister_accelerator(name: str) -> None:
    """Remove a registration (a plugin whose import failed is undone; tests)."""
    _ACCELERATORS.pop(name, None)
    _CURRENT.pop(name, None)


def accelerators() -> list[Accelerator]:
    """Every registered accelerator. The built-in ones register when :mod:`suite.algorithms` is imported (after the
    algorithms they accelerate), plugins' when the plugin loads: this module imports neither."""
    return list(_ACCELERATORS.values())


def accelerate(trainer: Any, specification: Callable[..., Any]) -> LossPath | None:
    """The accelerated loss of ``trainer``, whose specification is ``specification``, or None: none is registered for
    it, none applies to the trainer's policy and config, the trainer runs on another device than the CPU, or the
    specification's source is not the one the accelerator was checked against (:func:`is_current`: then the trial
    runs the specification, with a warning, rather than a stale accelerator)."""
    if getattr(trainer, "device", torch.device("cpu")).type != "cpu":
        return None
    for acc in _ACCELERATORS.values():
        if acc.specification is specification and acc.applies(trainer) and is_current(acc):
            return acc.build(trainer)
    return None


_CURRENT: dict[str, bool] = {}


def is_current(accelerator: Accelerator) -> bool:
    """Whether the specification's source still has the fingerprint the accelerator records (once per process and
    accelerator: a few milliseconds). A stale one warns once; where the source cannot be read (an install without
    ``.py`` files) the accelerator is trusted, as the parity harness checked it where the source was."""
    known = _CURRENT.get(accelerator.name)
    if known is None:
        try:
            known = accelerator.current_fingerprint() == accelerator.fingerprint
        except (OSError, TypeError):
            known = True
        if not known:
            warnings.warn(
                f"accelerator {accelerator.name!r} was checked against another version of its specification: the "
                "specification runs instead (autograd) until the parity harness passes and its fingerprint is updated",
                RuntimeWarning,
                stacklevel=3,
            )
        _CURRENT[accelerator.name] = known
    return known


def fingerprint(*functions: Callable[..., Any]) -> str:
    """16 hex digits identifying the code of ``functions`` (:func:`source_fingerprint` of their source)."""
    return source_fingerprint(*(textwrap.dedent(inspect.getsource(fn)) for fn in functions))


def source_fingerprint(*sources: str) -> str:
    """SHA-256 (16 hex digits) over each source's syntax tree with docstrings removed, written back as canonical code:
    formatting, comments and documentation do not count; any change to what the code computes does."""
    digest = hashlib.sha256()
    for text in sources:
        tree = ast.parse(text)
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (
                isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                and body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
        digest.update(ast.unparse(tree).encode())  # the code as canonical text (not ast.dump: its fields vary by version)
    return digest.hexdigest()[:16]
