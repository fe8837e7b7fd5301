"""``write_report``: a study's results database -> HTML page, Markdown, LaTeX and CSV tables, PNG/SVG figures.

Output layout (``reports/<study>/`` by default, relative to the current directory)::

    index.html            self-contained page (figures embedded; opens without a network)
    report.md             the same sections and tables in Markdown (figures linked)
    tables/<name>.csv     every statistics table at full precision, plus curves, budgets and provenance
    tables/<name>.tex     booktabs tables (\\usepackage{booktabs}); best per column in bold
    figures/<name>.png    figures, and the same as .svg
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import suite
from suite.errors import UserError
from suite.report import figures as fg
from suite.report import html as html_out
from suite.report import latex as latex_out
from suite.report import markdown as md_out
from suite.report.build import (
    DEFAULT_REPS,
    ReportData,
    budgets_frame,
    compute_tables,
    default_poi_reps,
    load_study,
    profile_frame,
    provenance_frame,
)
from suite.report.display import (
    FINAL_IQM_PIVOT,
    FINAL_MEAN_PIVOT,
    Column,
    DisplayTable,
    TableSpec,
    display_table,
    display_tables,
)
from suite.report.document import Document, Failure, FigureRef, Paragraph, Section
from suite.report.headline import HEADLINE_SPEC, Headline, build_headline
from suite.report.memory import memory_section
from suite.report.render import FigureJob, FigureRenderer
from suite.stats.scores import POI_REPS

REPORTS_DIR = Path("reports")
"""Parent of the default output folder ``reports/<study>/``."""

BUDGETS_SPEC = TableSpec(
    "budgets",
    "Budgets and seeds",
    "Step budget per trial and the env steps the trials actually trained (record 'steps'; below the budget only for "
    "failed trials or an algorithm's own early stop), the budget tier it matches (trial records store the budget; "
    "'custom' = none), seeds, evaluation episodes, and which training episodes the training curves hold ('capped at N "
    "steps': the algorithm cut episodes at its own step cap and left the cut ones out, so its curve and the "
    "training-curve stability columns compare only whole episodes that ended within the cap).",
    (Column("Algorithm", "algo", "text"), Column("Env", "env_label", "text"), Column("Budget (steps)", "budget", "text"),
     Column("Steps trained", "steps", "text"), Column("Tier", "tier", "text"), Column("Seeds", "seeds", "text"),
     Column("n seeds", "n_seeds", "int"), Column("Eval episodes", "n_eval_episodes", "text"),
     Column("Training curve", "train_curve", "text")),
    group=None,
)  # fmt: skip

PROVENANCE_SPEC = TableSpec(
    "provenance",
    "Provenance",
    "Where the runs came from, as recorded with every trial; several values are listed with their trial counts.",
    (Column("Field", "field", "text"), Column("Value(s)", "values", "text")),
    group=None,
)


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "study"


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    frame.to_csv(path, index=False)


def _budget_sentence(budgets: pd.DataFrame) -> str:
    tiers = sorted({t.strip() for cell in budgets["tier"] for t in str(cell).split(",")})
    per_env = []
    for env, group in budgets.groupby("env_label", sort=True):
        values = group.groupby("budget", sort=False)["algo"].apply(list)
        if len(values) == 1:
            per_env.append(f"{env}: {values.index[0]} steps")
        else:
            per_env.append(f"{env}: " + "; ".join(f"{b} steps ({', '.join(a)})" for b, a in values.items()))
    seeds = sorted(set(budgets["seeds"]))
    counts = sorted(set(budgets["n_seeds"]))
    n_seeds = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    seed_text = f"seeds {seeds[0]}" if len(seeds) == 1 else "seeds vary (see Budgets and seeds)"
    return (
        f"Budget tier: {', '.join(tiers)}. Budgets per trial: {'; '.join(per_env)}. "
        f"{n_seeds} seeds per algorithm and env ({seed_text}); evaluation episodes per evaluation: "
        f"{', '.join(sorted(set(budgets['n_eval_episodes'].astype(str))))}."
    )


FIGURE_COST: dict[str, Callable[[int, int], float]] = {
    "learning_curves": lambda envs, algos: envs,
    "training_curves": lambda envs, algos: envs,
    "final_scores": lambda envs, algos: 3 * envs,
    "aggregate": lambda envs, algos: 2,
    "performance_profile": lambda envs, algos: 1,
    "probability_of_improvement": lambda envs, algos: algos * algos / 20,
    "speed_memory": lambda envs, algos: 2,
}
"""Each figure's rough cost from the study's envs and algorithms (its panels; the heatmap's cells / 20), which orders
the drawing (:class:`suite.report.render.FigureJob`); only the order matters. In the main job's report (3 envs, 8
algorithms) the figures take 0.3-1.3 s each, in about this order."""


def _figures(data: ReportData, fig_dir: Path, curves: pd.DataFrame, renderer: FigureRenderer) -> dict[str, tuple[str, str]]:
    """Queue every figure whose inputs exist on ``renderer``; return their ``(alt, caption)`` by name."""
    colors = fg.algo_colors(data.algos)
    envs = data.envs
    out: dict[str, tuple[str, str]] = {}

    def add(name: str, draw: Callable[..., Any], args: tuple[Any, ...], alt: str, caption: str) -> None:
        renderer.add(FigureJob(name, draw, args, fig_dir, cost=FIGURE_COST[name](len(envs), len(data.algos))))
        out[name] = (alt, caption)

    if (curves["source"] == "eval").any():
        add("learning_curves", fg.plot_learning_curves, (curves, envs, colors, "eval"),
            "Evaluation return against env steps, one panel per env, one line per algorithm",
            "Evaluation return (mean over evaluation episodes) against env steps: IQM over ok runs (number of "
            "runs in the legend of each panel) with a 95% bootstrap band over runs.")  # fmt: skip
    if (curves["source"] == "train").any():
        add("training_curves", fg.plot_learning_curves, (curves, envs, colors, "train"),
            "Training-episode return against env steps, one panel per env",
            f"Return of training episodes (stochastic policy, running mean of {fg.TRAIN_WINDOW} episodes) "
            "against env steps: IQM over ok runs with a 95% bootstrap band.")  # fmt: skip
    final = data.tables.get("final_scores")
    if final is not None and final["n_ok"].sum() > 0:
        add("final_scores", fg.plot_final_scores, (final, envs, colors),
            "Interval estimates of final mean, median and IQM return per env and algorithm",
            "Final evaluation return: point estimate (black tick) and 95% stratified bootstrap CI (bar) per "
            "env and algorithm, over ok runs.")  # fmt: skip
    aggregate = data.tables.get("aggregate")
    if aggregate is not None and aggregate["n_ok"].sum() > 0:
        add("aggregate", fg.plot_aggregate, (aggregate, colors),
            "Aggregate IQM and optimality gap of normalised scores per algorithm",
            "Normalised final scores pooled over envs: IQM (higher is better) and optimality gap (lower is "
            "better) with 95% stratified bootstrap CIs.")  # fmt: skip
    if data.profile is not None and any(np.isfinite(v).any() for v in data.profile["profiles"].values()):
        profile = data.profile
        add("performance_profile", fg.plot_performance_profile, (profile, colors),
            "Performance profiles: fraction of runs above each normalised score",
            "Score distributions (rliable performance profiles): fraction of ok runs, pooled over envs, with "
            f"normalised score above tau; pointwise 95% bootstrap bands ({data.profile_reps:,} reps).")  # fmt: skip
    if data.poi_matrix is not None and len(data.poi_matrix) > 1:
        matrix = data.poi_matrix
        add("probability_of_improvement", fg.plot_poi, (matrix,),
            "Heatmap of the probability that the row algorithm improves on the column algorithm",
            "Cell (X, Y): P(X > Y), the probability that a run of X beats a run of Y on the same env, "
            "averaged over the envs both ran.")  # fmt: skip
    speed = data.tables.get("speed_memory")
    if speed is not None and speed["n_ok"].sum() > 0:
        add("speed_memory", fg.plot_speed_memory, (speed, colors),
            "Bar charts of training throughput and peak memory per env and algorithm",
            "Left: env steps per second of training (mean over ok runs, error bar: sd). Right: peak resident "
            "memory of the trial process (mean over ok runs).")  # fmt: skip
    return out


def _section(sid: str, title: str, *blocks: object) -> Section:
    return Section(sid, title, [b for b in blocks if b is not None])  # type: ignore[misc]


def _table_blocks(name: str, tables: dict[str, DisplayTable], data: ReportData) -> list[object]:
    """The caption and table of ``name``, or a note saying why it is missing."""
    if name in data.notes:
        return [Paragraph(f"Not computed: {data.notes[name]}", "note")]
    table = tables.get(name)
    if table is None:
        return []
    return [Paragraph(table.spec.caption, "caption"), table]


def _headline_section(data: ReportData, headline: Headline | None, figs: dict[str, FigureRef]) -> Section:
    """Results first: the IQM table with best and ties, speed and memory in a line each, the aggregate figure."""
    if headline is None:
        reason = data.notes.get("final_scores", "no final scores")
        return _section("headline", "Results", Paragraph(f"Not computed: {reason}", "note"), figs.get("aggregate"))
    return _section("headline", "Results", Paragraph(HEADLINE_SPEC.caption, "caption"), headline.table,
                    Paragraph(headline.verdict), Paragraph(headline.speed), Paragraph(headline.memory),
                    figs.get("aggregate"))  # fmt: skip


def _document(data: ReportData, tables: dict[str, DisplayTable], figs: dict[str, FigureRef], budgets: pd.DataFrame,
              provenance: pd.DataFrame, headline: Headline | None = None) -> Document:  # fmt: skip
    trials = data.trials
    counts = trials["status"].value_counts()
    n_ok, n_failed, n_div = (int(counts.get(s, 0)) for s in ("ok", "failed", "diverged"))
    summary = [
        f"Study '{data.study}': {len(trials)} trials ({n_ok} ok, {n_failed} failed, {n_div} diverged) of "
        f"{len(data.algos)} algorithms ({', '.join(data.algos)}) on {len(data.envs)} envs ({', '.join(data.envs)}), "
        f"read from {data.db_path}.",
        _budget_sentence(budgets),
        f"Statistics use ok trials only (failed and diverged ones are counted in every table and listed under "
        f"Failures). Confidence intervals are 95% stratified percentile bootstrap intervals (rliable) with "
        f"{data.reps:,} replications for scores and aggregates, {data.poi_reps:,} per pair for probability of "
        f"improvement and {data.profile_reps:,} for performance profiles (rliable's defaults: 50,000 and 2,000; "
        f"'suite report --reps N' sets them); bootstrap seed {data.seed}.",
    ]
    failures = data.tables["failures"]
    failure_blocks: list[object] = [Paragraph(tables["failures"].spec.caption, "caption"), tables["failures"]]
    for row in failures.itertuples(index=False):
        failure_blocks.append(
            Failure(
                title=f"{row.algo} / {row.env_label} / seed {row.seed}: {row.status}",
                error=str(row.error or "(no error text recorded)"),
                traceback=str(row.traceback or ""),
            )
        )
    if failures.empty:
        failure_blocks = [Paragraph("No failed or diverged trials.")]

    sections = [
        _section("setup", "What was run", Paragraph(BUDGETS_SPEC.caption, "caption"), tables["budgets"],
                 *_table_blocks("status", tables, data)),
        _section("final-scores", "Final scores", figs.get("final_scores"), *_table_blocks("final_scores", tables, data),
                 *_table_blocks("final_scores_normalised", tables, data)),
        _section("aggregate", "Aggregate (normalised)",
                 Paragraph("Figure: in Results, at the top.", "caption") if figs.get("aggregate") else None,
                 *_table_blocks("aggregate", tables, data)),
        _section("learning-curves", "Learning curves", figs.get("learning_curves"), figs.get("training_curves"),
                 None if figs.get("learning_curves") else Paragraph("No evaluation curves recorded.", "note")),
        _section("performance-profile", "Performance profile", figs.get("performance_profile"),
                 *([Paragraph(f"Not computed: {data.notes['performance_profile']}", "note")]
                   if "performance_profile" in data.notes else [])),
        _section("probability-of-improvement", "Probability of improvement", figs.get("probability_of_improvement"),
                 *_table_blocks("probability_of_improvement", tables, data)),
        _section("significance", "Pairwise tests", *_table_blocks("significance", tables, data)),
        _section("sample-efficiency", "Sample efficiency", *_table_blocks("sample_efficiency", tables, data)),
        _section("stability", "Stability", *_table_blocks("stability", tables, data)),
        _section("speed-memory", "Speed and memory", figs.get("speed_memory"), *_table_blocks("speed_memory", tables, data)),
        _section("references", "Reference numbers", *_table_blocks("env_references", tables, data)),
        _section("failures", f"Failures ({len(failures)})", *failure_blocks),
        _section("provenance", "Provenance", Paragraph(PROVENANCE_SPEC.caption, "caption"), tables["provenance"]),
        _section("files", "Files",
                 Paragraph("Next to this page: report.md (the same tables in Markdown), tables/*.csv (every table at "
                           "full precision, learning curves, budgets, provenance), tables/*.tex (booktabs LaTeX, "
                           "needs \\usepackage{booktabs}), figures/*.png and figures/*.svg.")),
    ]  # fmt: skip
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    footer = f"Generated by rl-suite {suite.__version__} on {now} from {data.db_path}."
    return Document(f"rl-suite report: {data.study}", summary, sections, footer,
                    headline=_headline_section(data, headline, figs))  # fmt: skip


def write_report(
    study: str = "default",
    db: str | os.PathLike[str] | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    reps: int = DEFAULT_REPS,
    *,
    poi_reps: int | None = None,
    seed: int = 0,
    helper: bool | None = None,
) -> Path:
    """Write the report of one study (see the module docstring for the files).

    Args:
        study: Study name as recorded in the database.
        db: Results database (None: ``$SUITE_DB`` or ``results/suite.db``).
        out_dir: Output folder; None means ``reports/<study>/`` relative to the current directory. Existing
            files of the same names are replaced; other files are left alone.
        reps: Bootstrap replications for score and aggregate CIs (performance profiles use at most 2,000).
        poi_reps: Replications per algorithm pair for probability of improvement; None spreads a fixed budget
            over the pairs (see :mod:`suite.report.build`).
        seed: Base seed of every bootstrap; the same inputs and seed give the same numbers.
        helper: draw figures in a helper process too (:mod:`suite.report.render`); None: when a second CPU is free
            and ``SUITE_REPORT_HELPER`` is not ``0``. The files are the same either way.

    Returns:
        Path of ``index.html``.

    Raises:
        UserError: missing database, not a results database, unknown study (listing the recorded ones), bad reps.
    """
    if reps < 10:
        raise UserError(f"reps must be >= 10, got {reps}")
    if poi_reps is not None and poi_reps < 10:
        raise UserError(f"poi_reps must be >= 10, got {poi_reps}")
    data = load_study(study, db)
    with FigureRenderer(helper) as renderer:  # the helper's imports overlap the statistics below
        return _write(study, data, out_dir, reps, poi_reps, seed, renderer)


def _write(study: str, data: ReportData, out_dir: str | os.PathLike[str] | None, reps: int, poi_reps: int | None,
           seed: int, renderer: FigureRenderer) -> Path:  # fmt: skip
    """:func:`write_report` once the study is loaded."""
    data.reps, data.seed = int(reps), int(seed)
    data.poi_reps = int(poi_reps) if poi_reps is not None else default_poi_reps(len(data.algos), data.reps)
    data.profile_reps = min(data.reps, POI_REPS)
    compute_tables(data)

    out = Path(out_dir) if out_dir is not None else REPORTS_DIR / _safe_name(study)
    table_dir, fig_dir = out / "tables", out / "figures"
    try:
        table_dir.mkdir(parents=True, exist_ok=True)
        fig_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the report folder {out}: {exc}") from exc

    budgets = budgets_frame(data)
    provenance = provenance_frame(data.trials)
    curves = fg.learning_curves_frame(data.trials, data.evals, data.curves, seed=data.seed)

    # CSV: the statistics frames at full precision (final_scores holds the normalised columns too).
    for name, frame in data.tables.items():
        if name != "final_scores_normalised":
            _write_csv(frame, table_dir / f"{name}.csv")
    if data.poi_matrix is not None:
        data.poi_matrix.to_csv(table_dir / "probability_of_improvement_matrix.csv")
    if data.profile is not None:
        _write_csv(profile_frame(data.profile), table_dir / "performance_profile.csv")
    _write_csv(curves, table_dir / "learning_curves.csv")
    _write_csv(budgets, table_dir / "budgets.csv")
    _write_csv(provenance, table_dir / "provenance.csv")

    final = data.tables.get("final_scores")
    headline = build_headline(final, data.tables.get("speed_memory")) if final is not None else None
    if headline is not None:
        _write_csv(headline.frame, table_dir / "headline.csv")

    tables = display_tables(data.tables)
    if headline is not None:
        tables[HEADLINE_SPEC.name] = headline.table
    tables["budgets"] = display_table(budgets, BUDGETS_SPEC)
    tables["provenance"] = display_table(provenance, PROVENANCE_SPEC)

    tier_note = _budget_sentence(budgets)
    for name, table in tables.items():
        label = f"tab:{_safe_name(study)}-{name}"
        note = tier_note if name not in ("provenance", "budgets", "failures", "env_references", "status") else ""
        if name in (FINAL_MEAN_PIVOT.name, FINAL_IQM_PIVOT.name, "final_scores", "final_scores_normalised", "aggregate"):
            note = f"{note} Best per column in bold.".strip()
        if name == HEADLINE_SPEC.name:
            note = f"{note} Bold: the best per env and every algorithm whose 95% CI overlaps the best's (a tie).".strip()
        (table_dir / f"{name}.tex").write_text(latex_out.render_table(table, label=label, note=note), encoding="utf-8")

    captions = _figures(data, fig_dir, curves, renderer)
    memory = memory_section(data.trials, table_dir, fig_dir)  # drawn here while the helper takes the first figures
    pngs = renderer.finish()
    figs = {name: FigureRef(name, alt, caption, pngs[name]) for name, (alt, caption) in captions.items()}
    doc = _document(data, tables, figs, budgets, provenance, headline)
    # Memory per phase (suite.report.memory): its own section, right after "Speed and memory".
    at = next((i + 1 for i, section in enumerate(doc.sections) if section.id == "speed-memory"), len(doc.sections))
    doc.sections.insert(at, memory)
    (out / "report.md").write_text(md_out.render_document(doc), encoding="utf-8")
    index = out / "index.html"
    index.write_text(html_out.render_document(doc), encoding="utf-8")
    return index
