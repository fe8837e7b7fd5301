"""Profilers: where a trial's memory goes (:mod:`suite.profile.memory`), and, beside it, where its time goes.

Each profiler measures the suite's own training loop (the phases of :mod:`suite.trial`) and never changes a
result: a trial run under a profiler gives the same record (:func:`suite.trial.deterministic_view`) as without.
"""
