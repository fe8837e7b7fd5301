"""Statistics for benchmark results: final scores with CIs, aggregates, significance, efficiency, stability, speed.

Modules:
    references: per-env threshold, random and reference scores (``suite/data/envs.toml``).
    scores: rliable-based point estimates and stratified bootstrap CIs over ``(num_runs, num_tasks)`` scores.
    significance: Welch / exact Mann-Whitney tests, Holm correction, seeds needed (Colas et al. 2018).

NaN in gives NaN out (or a ValueError where NaN already has a meaning); see each module.
    curves: sample efficiency and reliability metrics over learning curves (Chan et al. 2020), speed helpers.
    tables: the pandas layer the reports call (one function per table).
"""

from suite.stats.curves import (
    area_under_curve,
    cvar,
    detrend,
    dispersion_across_runs,
    dispersion_across_time,
    drawdown,
    eval_steps_to_threshold,
    long_term_risk,
    risk_across_runs,
    short_term_risk,
    trace_summary,
    wall_time_to_threshold,
)
from suite.stats.references import EnvReference, env_reference, known_env_ids
from suite.stats.scores import (
    BOOTSTRAP_REPS,
    POI_REPS,
    aggregate_intervals,
    iqm,
    optimality_gap,
    performance_profile_intervals,
    probability_of_improvement,
    probability_of_improvement_interval,
    score_distribution,
    score_intervals,
    seeded_global_rng,
)
from suite.stats.significance import (
    UNDEFINED,
    SeedsNeeded,
    cohens_d,
    holm_adjust,
    mann_whitney_test,
    seeds_needed,
    seeds_needed_text,
    welch_power,
    welch_test,
)
from suite.stats.tables import (
    aggregate_table,
    count_statuses,
    env_references,
    final_score_table,
    performance_profile,
    probability_of_improvement_matrix,
    probability_of_improvement_table,
    sample_efficiency_per_trial,
    sample_efficiency_table,
    significance_table,
    speed_memory_table,
    stability_table,
)

__all__ = [
    "BOOTSTRAP_REPS",
    "POI_REPS",
    "UNDEFINED",
    "EnvReference",
    "SeedsNeeded",
    "aggregate_intervals",
    "aggregate_table",
    "area_under_curve",
    "cohens_d",
    "count_statuses",
    "cvar",
    "detrend",
    "dispersion_across_runs",
    "dispersion_across_time",
    "drawdown",
    "env_reference",
    "env_references",
    "eval_steps_to_threshold",
    "final_score_table",
    "holm_adjust",
    "iqm",
    "known_env_ids",
    "long_term_risk",
    "mann_whitney_test",
    "optimality_gap",
    "performance_profile",
    "performance_profile_intervals",
    "probability_of_improvement",
    "probability_of_improvement_interval",
    "probability_of_improvement_matrix",
    "probability_of_improvement_table",
    "risk_across_runs",
    "sample_efficiency_per_trial",
    "sample_efficiency_table",
    "score_distribution",
    "score_intervals",
    "seeded_global_rng",
    "seeds_needed",
    "seeds_needed_text",
    "short_term_risk",
    "significance_table",
    "speed_memory_table",
    "stability_table",
    "trace_summary",
    "wall_time_to_threshold",
    "welch_power",
    "welch_test",
]
