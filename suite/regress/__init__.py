"""Regression-test performance: ``suite regress BASE [HEAD]``, a gate that catches a slower, hungrier or worse revision.

Modules:
    revisions: git revisions (commits, the working tree) as content-keyed source trees.
    build: a cached, runnable install per revision over a shared dependency environment.
    plan: the study both revisions run, as one explicit study file.
    runner: the interleaved runs, each through the revision's own ``suite run``.
    records: a run's database as one row per trial (the *runs* frame), with outcome and parameter hashes.
    compare: the decisions per (algorithm, env): returns, speed, memory, each with its test.
    output: the verdict table, regression.md/.html and CSVs.
    reference: the committed reference run (``results/reference/``).
    gate: the command, tying them together.
"""

from suite.regress.compare import Thresholds
from suite.regress.gate import RegressOptions, regress
from suite.regress.runner import RevisionFailed

__all__ = ["RegressOptions", "RevisionFailed", "Thresholds", "regress"]
