"""The shared parity harness: an accelerator against the specification it computes, on real trials.

For each of an accelerator's :class:`~suite.accel.ParityCase` settings, :func:`check_parity` builds two trainers of the
case from the same seed, one running the accelerator and one the specification by autograd, collects the same batch
with both, and checks

1. **values and gradients**: on the first :data:`BATCHES` (micro-)batches of a real update, from the same parameters
   and the same random stream, the accelerator's loss, metrics and gradient equal the specification's within
   :data:`VALUE_TOL` and :data:`GRAD_TOL` (float32 arithmetic in another order: relative 1e-4);
2. **several updates**: :data:`UPDATES` whole updates of each trainer on that batch leave parameters within
   :data:`UPDATE_TOL` of each other after every one, and metrics within :data:`METRIC_TOL`. Adam divides each step by
   the gradient's running scale, so an entry whose gradient is near zero can move by a fraction of the learning rate
   under rounding; the tolerance allows that and no more.

:func:`check_fingerprint` says whether the specification's source is still the one the accelerator was checked
against. ``tests/test_accel_parity.py`` runs both over every registered accelerator, plugins' included; a plugin may
call them from its own tests (``suite.api``). It builds real trials, so it sits above the trial runner, not in
:mod:`suite.accel`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from suite.accel import Accelerator, Evaluated, ParityCase

BATCHES = 3
"""(Micro-)batches of an update whose values and gradients are compared."""
UPDATES = 3
"""Whole updates of both paths compared parameter by parameter."""
VALUE_TOL = {"rtol": 1e-4, "atol": 1e-6}
"""Loss and metrics of one batch: float32 rounding in another order of operations."""
GRAD_TOL = {"rtol": 1e-4, "atol": 1e-6}
"""The flat gradient of one batch."""
UPDATE_TOL = {"rtol": 2e-4, "atol": 1e-5}
"""Parameters after each of :data:`UPDATES` updates (Adam's steps on gradients that agree to rounding)."""
METRIC_TOL = {"rtol": 1e-3, "atol": 1e-5}
"""An update's metrics, averaged over its minibatches."""


def owner_class(specification: Any) -> type:
    """The trainer class whose method ``specification`` is (``PPOTrainer.loss`` -> ``PPOTrainer``)."""
    import sys

    owner: Any = sys.modules[specification.__module__]
    for part in specification.__qualname__.split(".")[:-1]:
        owner = getattr(owner, part)
    if not isinstance(owner, type):
        raise TypeError(f"{specification.__qualname__} is not a method of a trainer class")
    return owner


@contextmanager
def trainer_of(accelerator: Accelerator, case: ParityCase, seed: int = 3) -> Iterator[Any]:
    """A trainer of ``case`` (its class: the specification's owner), seeded as a trial is; its envs closed after."""
    from suite.trial import TrialContext, TrialSpec, seed_everything

    spec = TrialSpec(case.algo, case.env, seed, 10**6, overrides=dict(case.overrides), env_kwargs=dict(case.env_kwargs))
    resolved = spec.resolve()
    seed_everything(seed, 1)
    ctx = TrialContext(resolved)
    try:
        yield owner_class(accelerator.specification)(ctx, resolved.config)
    finally:
        ctx.close()


def copy_batch(batch: Any) -> Any:
    """A deep copy of a batch (dataclasses, dicts, tensors, arrays) as normal tensors: made outside inference mode, so
    autograd can use them."""
    with torch.inference_mode(False):
        return _copy(batch)


def _copy(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, np.ndarray):
        return x.copy()
    if isinstance(x, dict):
        return {k: _copy(v) for k, v in x.items()}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.replace(x, **{f.name: _copy(getattr(x, f.name)) for f in dataclasses.fields(x) if f.init})
    return x


def _as_float(value: Any) -> float:
    return float(value.detach()) if isinstance(value, torch.Tensor) else float(value)


def _run(trainer: Any, forward: Any, batch: Any, rng: torch.Tensor) -> tuple[float, dict[str, float], torch.Tensor]:
    torch.set_rng_state(rng)
    trainer.stepper.zero_grad()
    evaluated: Evaluated = forward(copy_batch(batch))
    evaluated.backward(False)
    metrics = {k: _as_float(v) for k, v in evaluated.metrics.items()}
    return _as_float(evaluated.loss), metrics, trainer.stepper.flat.grad.clone()


def _use(got: torch.Tensor, want: torch.Tensor, tol: dict[str, float]) -> float:
    """The largest share of the tolerance a difference uses: max |got - want| / (atol + rtol |want|)."""
    return float(((got - want).abs() / (tol["atol"] + tol["rtol"] * want.abs())).max())


def _close(name: str, got: float, want: float, tol: dict[str, float]) -> None:
    if not abs(got - want) <= tol["atol"] + tol["rtol"] * abs(want):
        raise AssertionError(f"{name}: accelerator {got!r} vs specification {want!r} (tolerance {tol})")


def check_parity(accelerator: Accelerator, case: ParityCase) -> dict[str, float]:
    """Run the checks of the module docstring on one case.

    Returns:
        The headroom: the largest share of :data:`GRAD_TOL` the gradients used (``gradients``) and of
        :data:`UPDATE_TOL` the parameters used (``updates``); 1.0 is the tolerance itself.

    Raises:
        AssertionError: the accelerator does not apply to the case, or disagrees with the specification.
    """
    used = {"gradients": 0.0, "updates": 0.0}
    with trainer_of(accelerator, case) as fast, trainer_of(accelerator, case) as reference:
        if fast.accelerator is None or not accelerator.applies(fast):
            raise AssertionError(f"{accelerator.name} does not apply to its parity case {case.label}")
        reference.accelerator = None  # the specification by autograd
        batches = []
        for trainer in (fast, reference):
            torch.manual_seed(11)
            batches.append(trainer.prepare())
        # 2. several updates of both paths, from the same state, on the same batch
        for u in range(UPDATES):
            metrics = []
            for trainer, prepared in zip((fast, reference), batches, strict=True):
                torch.manual_seed(100 + u)
                metrics.append(trainer.optimise(prepared, progress=0.3))
            got, want = fast.stepper.flat.data, reference.stepper.flat.data
            used["updates"] = max(used["updates"], _use(got, want, UPDATE_TOL))
            if not torch.allclose(got, want, rtol=UPDATE_TOL["rtol"], atol=UPDATE_TOL["atol"]):
                worst = float((got - want).abs().max())
                raise AssertionError(f"{case.label}: parameters after update {u + 1} differ by up to {worst:.3g}")
            if set(metrics[0]) != set(metrics[1]):
                raise AssertionError(f"{case.label}: update metrics {sorted(metrics[0])} vs {sorted(metrics[1])}")
            for name, value in metrics[1].items():
                _close(f"{case.label}: update {u + 1} {name}", metrics[0][name], value, METRIC_TOL)
        # 1. values and gradients of the first batches of one more update, both paths from the same parameters
        recorded: list[tuple[Any, torch.Tensor]] = []
        forward = fast.accelerator.forward

        def recording(batch: Any) -> Evaluated:
            if len(recorded) < BATCHES:
                recorded.append((copy_batch(batch), torch.get_rng_state()))
            return forward(batch)

        restore = fast.stepper.snapshot()
        fast.accelerator.forward = recording
        try:
            torch.manual_seed(200)
            fast.optimise(batches[0], progress=0.3)
        finally:
            del fast.accelerator.forward
            restore()
        if not recorded:
            raise AssertionError(f"{case.label}: the update never called the accelerator")
        for i, (batch, rng) in enumerate(recorded):
            loss_s, metrics_s, grad_s = _run(fast, fast.spec_forward, batch, rng)
            loss_a, metrics_a, grad_a = _run(fast, fast.accelerator.forward, batch, rng)
            _close(f"{case.label}: batch {i} loss", loss_a, loss_s, VALUE_TOL)
            if set(metrics_a) != set(metrics_s):
                raise AssertionError(f"{case.label}: metrics {sorted(metrics_a)} vs specification's {sorted(metrics_s)}")
            for name, value in metrics_s.items():
                _close(f"{case.label}: batch {i} {name}", metrics_a[name], value, VALUE_TOL)
            if not float(grad_s.abs().max()) > 0:
                raise AssertionError(f"{case.label}: batch {i} has a zero gradient; the case checks nothing")
            used["gradients"] = max(used["gradients"], _use(grad_a, grad_s, GRAD_TOL))
            if not torch.allclose(grad_a, grad_s, rtol=GRAD_TOL["rtol"], atol=GRAD_TOL["atol"]):
                worst = float((grad_a - grad_s).abs().max())
                raise AssertionError(f"{case.label}: batch {i} gradients differ by up to {worst:.3g}")
    return used


def check_fingerprint(accelerator: Accelerator) -> None:
    """Raise unless the specification's source is the one the accelerator records (:attr:`Accelerator.fingerprint`).

    Raises:
        AssertionError: naming the functions and the fingerprint to record once parity holds again.
    """
    now = accelerator.current_fingerprint()
    if now != accelerator.fingerprint:
        names = ", ".join(f"{f.__module__}.{f.__qualname__}" for f in accelerator.sources)
        raise AssertionError(
            f"accelerator {accelerator.name!r} was checked against another version of its specification ({names}): "
            f"make it compute the specification again (the parity harness), then record fingerprint={now!r}"
        )
