"""Kept so that ``from suite.executor import run_trials`` keeps working; the executors live in :mod:`suite.executors`."""

from suite.executors import RunSummary, run_trials

__all__ = ["RunSummary", "run_trials"]
