"""What a judged cell holds: the measurement of each arm, the judgement, and where its records came from.

Kept apart from :mod:`suite.claims.reproduce` (which makes them) and :mod:`suite.claims.tables` (which writes them)
so that neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from suite.claims.claimset import Arm, Cell
from suite.claims.verdict import Judgement
from suite.throughput import Throughput


@dataclass
class ArmResult:
    """What one arm of one cell measured."""

    arm: Arm
    """The arm."""
    keys: list[str]
    """Trial keys (one per seed)."""
    values: np.ndarray
    """Metric value of each ok run with a defined value (``inf``: never got there), ``(n,)``."""
    observed: np.ndarray
    """For a time to an event: how far each of those runs was watched, ``(n,)`` (NaN otherwise)."""
    point: float
    """The cell's statistic over ``values``."""
    n_ok: int
    """Ok trials."""
    n_failed: int
    """Failed or diverged trials."""
    n_missing: int
    """Trials not in the database."""
    run_budget: int
    """Budget each trial ran at."""
    steps_trained: list[int]
    """Distinct ``steps`` of its recorded trials (what was trained; the budget, except for failures and early stops)."""
    throughput: Throughput
    """How fast its trials ran, phase by phase: what the core-hours to settle a cell are extrapolated from."""
    versions: list[str]
    """Distinct ``algo version`` of its recorded trials."""
    curve: str
    """Which training episodes its curve holds: ``whole episodes`` or ``capped at N steps (...)``."""
    ended: str = ""
    """When its last recorded trial ended (UTC date)."""
    machines: list[str] = field(default_factory=list)
    """The CPUs its trials ran on (provenance)."""


@dataclass
class CellResult:
    """A measured, judged cell."""

    index: int
    """Position in the claim set."""
    cell: Cell
    """The claim."""
    tier: str
    """Tier it ran at."""
    arms: list[ArmResult]
    """A, then B."""
    judgement: Judgement
    """The verdict and the numbers behind it."""
    settle_tier: str | None = None
    """When the budget was short: the tier that runs the claim's budget."""
    core_hours: float | None = None
    """When the budget or the seeds were short: estimated core-hours to settle it (recorded speeds)."""
    records: str = ""
    """Where its records are, relative to the table's folder (``records.db``, or a detailed run's folder)."""

    @property
    def verdict(self) -> str:
        """The verdict word."""
        return self.judgement.verdict

    @property
    def reason(self) -> str:
        """Why."""
        return self.judgement.reason

    @property
    def point(self) -> float:
        """The measured quantity."""
        return self.judgement.measured[0]

    @property
    def lo(self) -> float:
        """Its 95% interval, lower end."""
        return self.judgement.measured[1]

    @property
    def hi(self) -> float:
        """Its 95% interval, upper end."""
        return self.judgement.measured[2]

    @property
    def seeds_needed(self) -> int | None:
        """Seeds per arm that would settle it."""
        return self.judgement.seeds_needed
