"""Reports: the written tables hold exactly the statistics layer's numbers, every file exists, database strings
are escaped, failures are listed, user mistakes are one-line errors; TensorBoard event files per trial.

The results database is real: a few tiny PPO trials run through :func:`suite.trial.run_trial` and saved with
:meth:`ResultsStore.save_trial`, plus two hand-made failure records with HTML/LaTeX-hostile strings.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from suite.cli import main
from suite.errors import UserError
from suite.report import write_report, write_tensorboard
from suite.report.build import compact_ranges, default_poi_reps, tier_of, training_curve_label
from suite.report.display import (
    Cell,
    Column,
    TableSpec,
    display_table,
    format_ci,
    format_number,
    format_p,
)
from suite.report.headline import headline_frame, verdict_line
from suite.report.latex import format_cell, latex_escape
from suite.report.markdown import markdown_unescape
from suite.stats import tables as st
from suite.store import ResultsStore
from suite.trial import TrialSpec, run_trial

STUDY = "report-test"
REPS = 200
POI_REPS = 100
HOSTILE = "<script>alert(1)</script> & 50% $x_1$ #{a}~^\\"
HOSTILE_LABEL = "CartPole-v1 <b>&amp;</b> 100%"
VARIANT = "ppo-lr1e-4"

EXPECTED_TABLES = (
    "status", "final_scores", "aggregate", "probability_of_improvement", "significance", "sample_efficiency",
    "stability", "speed_memory", "env_references", "failures", "budgets", "provenance", "headline",
)  # fmt: skip
EXPECTED_FIGURES = (
    "learning_curves", "training_curves", "final_scores", "aggregate", "performance_profile",
    "probability_of_improvement", "speed_memory", "memory_phases",
)  # fmt: skip


def make_results_db(path: Path) -> Path:
    """A real database: ppo (3 seeds) and a lower-learning-rate ppo variant (2 seeds) on CartPole-v1 and
    TextMatch-v0, 2,048 steps each, plus one failed and one diverged record with hostile strings, and one
    trial of another study.

    The variant is a real PPO trial stored under another algorithm id, so the report has two algorithms to
    compare without depending on which other algorithms are registered.
    """
    with ResultsStore(path) as store:
        template: dict[str, Any] | None = None
        for env_id in ("CartPole-v1", "TextMatch-v0"):
            for algo, overrides, seeds in (("ppo", {}, (0, 1, 2)), (VARIANT, {"learning_rate": 1e-4}, (0, 1))):
                for seed in seeds:
                    spec = TrialSpec(
                        algo="ppo", env_id=env_id, seed=seed, total_timesteps=2048, n_eval_episodes=5,
                        overrides=overrides, study=STUDY,
                    )  # fmt: skip
                    record = run_trial(spec.resolve())
                    assert record["status"] == "ok", record["error"]
                    record["algo"] = algo
                    record["key"] = f"{algo}-{record['key']}"
                    store.save_trial(record)
                    template = template or record
        assert template is not None
        failed = copy.deepcopy(template)
        failed.update(
            key="failed-0001", seed=7, status="failed", error=f"RuntimeError: {HOSTILE}",
            traceback=f"Traceback (most recent call last):\n  raise RuntimeError({HOSTILE!r})\n",
            final_eval_mean=None, final_eval_std=None, curve=None, evals=None, updates=None,
        )  # fmt: skip
        store.save_trial(failed)
        diverged = copy.deepcopy(failed)
        diverged.update(key="diverged-0001", seed=8, status="diverged", env_label=HOSTILE_LABEL, error="Diverged: nan loss")
        store.save_trial(diverged)
        # Another study in the same file: must not leak into the report.
        other = copy.deepcopy(template)
        other.update(key="other-study-0001", study="elsewhere")
        store.save_trial(other)
    return path


HEADLINE_STUDY = "headline-test"
HEADLINE_SCORES: dict[tuple[str, str], list[float]] = {
    # CartPole: alpha's IQM is the highest, beta's CI overlaps it (a tie), gamma is far below.
    ("alpha", "CartPole-v1"): [480, 490, 500, 500, 500],
    ("beta", "CartPole-v1"): [470, 485, 495, 500, 500],
    ("gamma", "CartPole-v1"): [20, 22, 25, 30, 35],
    # Acrobot: alpha alone.
    ("alpha", "Acrobot-v1"): [-80, -85, -90, -88, -82],
    ("beta", "Acrobot-v1"): [-300, -310, -320, -305, -315],
    ("gamma", "Acrobot-v1"): [-500, -500, -500, -500, -500],
}
"""Final returns of a hand-made study whose headline is known without computing it."""

MAIN_JOB_ALGOS = ("grpo", "grpo-pairwise", "ppo", "ppo-adaptive-clip", "ppo-rlvr-prm", "sb3-a2c", "sb3-dqn", "sb3-ppo")
MAIN_JOB_ENVS: dict[str, tuple[str, dict[str, Any], float, float]] = {
    # label: env id, kwargs, a low and a high final return (the main job's envs, suite/studies/default.toml)
    "CartPole-v1": ("CartPole-v1", {}, 10.0, 500.0),
    "TextMatch-v0": ("TextMatch-v0", {}, -0.5, 5.0),
    "TextMatch-v0[code:12345]": ("TextMatch-v0", {"language": "code", "target": "12345"}, -0.5, 5.0),
}


def main_job_scores() -> dict[tuple[str, str], list[float]]:
    """Final returns shaped like the main job's (8 algorithms x its 3 envs x 5 seeds), spread between a low and a
    high return per env: the size of report whose first screen must hold the headline."""
    rng = np.random.default_rng(0)
    out = {}
    for i, algo in enumerate(MAIN_JOB_ALGOS):
        for label, (_, _, low, high) in MAIN_JOB_ENVS.items():
            centre = low + (high - low) * (i + 1) / (len(MAIN_JOB_ALGOS) + 1)
            out[(algo, label)] = (centre + rng.normal(0, (high - low) / 30, 5)).round(2).tolist()
    return out


def make_headline_db(path: Path, scores: dict[tuple[str, str], list[float]], study: str = HEADLINE_STUDY) -> Path:
    """A hand-made database: one ok record per (algo, env label, seed) with the given final return, a throughput of
    ``1,000 + 100 x algorithm index`` steps/s (+ seed) and a peak RSS of ``300 + 10 x algorithm index`` MB (+ seed),
    no curves. Algorithm index: position in sorted order. A label of :data:`MAIN_JOB_ENVS` gives its env id and
    kwargs; any other label is an env id without kwargs."""
    algos = sorted({algo for algo, _ in scores})
    with ResultsStore(path) as store:
        for (algo, env), values in scores.items():
            rank = algos.index(algo)
            env_id, kwargs = MAIN_JOB_ENVS.get(env, (env, {}))[:2]
            for seed, value in enumerate(values):
                store.save_trial(
                    {"key": f"{algo}-{env}-{seed}", "study": study, "algo": algo, "algo_version": "1.0.0",
                     "env_id": env_id, "env_kwargs": kwargs, "env_label": env, "seed": seed, "budget": 10_000,
                     "status": "ok", "steps": 10_000, "final_eval_mean": float(value), "final_eval_std": 0.0,
                     "n_eval_episodes": 10, "steps_per_second": 1_000.0 + 100 * rank + seed,
                     "peak_rss_mb": 300.0 + 10 * rank + seed, "wall_time_s": 10.0, "rollout_time_s": 6.0,
                     "update_time_s": 3.0, "config": {}, "provenance": {}}
                )  # fmt: skip
    return path


@pytest.fixture(scope="session")
def results_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_results_db(tmp_path_factory.mktemp("report-db") / "suite.db")


@pytest.fixture(scope="session")
def report_dir(results_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "out"
    index = write_report(study=STUDY, db=results_db, out_dir=out, reps=REPS, poi_reps=POI_REPS)
    assert index == out / "index.html"
    return out


@pytest.fixture(scope="session")
def trials(results_db: Path) -> pd.DataFrame:
    with ResultsStore(results_db, create=False) as store:
        return store.trials(study=STUDY)


@pytest.fixture(scope="session")
def series(results_db: Path, trials: pd.DataFrame) -> dict[str, pd.DataFrame]:
    keys = trials["key"].tolist()
    with ResultsStore(results_db, create=False) as store:
        return {"curves": store.curves(keys), "evals": store.evals(keys), "updates": store.updates(keys)}


def read_csv(report_dir: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(report_dir / "tables" / f"{name}.csv", dtype={"key": str})


def assert_frames_equal(written: pd.DataFrame, expected: pd.DataFrame) -> None:
    """Same columns and rows; numbers equal to float precision (CSV round-trips floats exactly), text equal."""
    assert list(written.columns) == list(expected.columns)
    assert len(written) == len(expected)
    for column in expected.columns:
        want = expected[column]
        got = written[column]
        if pd.api.types.is_bool_dtype(want):
            assert got.astype(bool).tolist() == want.astype(bool).tolist(), column
        elif pd.api.types.is_numeric_dtype(want):
            np.testing.assert_allclose(
                pd.to_numeric(got, errors="coerce").to_numpy(float),
                pd.to_numeric(want, errors="coerce").to_numpy(float),
                rtol=1e-12,
                atol=0,
                equal_nan=True,
                err_msg=column,
            )
        else:
            assert got.fillna("").astype(str).tolist() == want.fillna("").astype(str).tolist(), column


def markdown_tables(text: str) -> list[pd.DataFrame]:
    """Every pipe table of a Markdown file, cells unescaped and bold markers removed."""
    tables, block = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append(line)
            continue
        if len(block) >= 2:
            rows = [[markdown_unescape(c.strip()).strip("*") for c in re.split(r"(?<!\\)\|", r)[1:-1]] for r in block]
            tables.append(pd.DataFrame(rows[2:], columns=rows[0]))
        block = []
    return tables


def find_table(tables: list[pd.DataFrame], *headers: str) -> pd.DataFrame:
    matches = [t for t in tables if all(h in t.columns for h in headers)]
    assert matches, f"no table with headers {headers}"
    return matches[0]


def cell_numbers(cell: str) -> list[float]:
    return [float(x.replace(",", "")) for x in re.findall(r"-?[\d,]*\.?\d+(?:e[-+]\d+)?", cell)]


def assert_close_to_shown(cell: str, values: list[float]) -> None:
    """The numbers in a cell are the values rounded to the shown precision."""
    shown = cell_numbers(cell)
    assert len(shown) == len(values), (cell, values)
    for text_value, value in zip(shown, values, strict=True):
        assert math.isclose(text_value, value, rel_tol=5e-3, abs_tol=6e-4), (cell, values)


@pytest.fixture(scope="session")
def headline_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of the hand-made study :data:`HEADLINE_SCORES`."""
    db = make_headline_db(tmp_path_factory.mktemp("headline-db") / "suite.db", HEADLINE_SCORES)
    out = tmp_path_factory.mktemp("headline") / "out"
    write_report(study=HEADLINE_STUDY, db=db, out_dir=out, reps=REPS)
    return out


# -------------------------------------------------------------------------------------------- headline


def test_headline_holds_the_statistics_layers_iqm_and_marks_ties(headline_report: Path) -> None:
    written = read_csv(headline_report, "headline").set_index(["env_label", "algo"])
    trials = pd.DataFrame(
        [{"algo": a, "env_label": e, "env_id": e, "env_kwargs": {}, "status": "ok", "final_eval_mean": float(v)}
         for (a, e), values in HEADLINE_SCORES.items() for v in values]
    )  # fmt: skip
    final = st.final_score_table(trials, reps=REPS, seed=0).set_index(["env_label", "algo"])
    for index, row in written.iterrows():
        np.testing.assert_allclose(row[["iqm", "iqm_lo", "iqm_hi"]].to_numpy(float),
                                   final.loc[index, ["iqm", "iqm_lo", "iqm_hi"]].to_numpy(float), rtol=1e-12)  # fmt: skip
    # The hand-made numbers: IQM of 5 runs = mean of the middle 3 (alpha 496.67, beta 493.33 on CartPole).
    assert written.loc[("CartPole-v1", "alpha"), "iqm"] == pytest.approx(1490 / 3)
    assert written.loc[("CartPole-v1", "beta"), "iqm"] == pytest.approx(1480 / 3)
    marks = {k: (bool(r.best), bool(r.bold), bool(r.tie)) for k, r in written.iterrows()}
    assert marks == {
        ("CartPole-v1", "alpha"): (True, True, True), ("CartPole-v1", "beta"): (False, True, True),
        ("CartPole-v1", "gamma"): (False, False, False), ("Acrobot-v1", "alpha"): (True, True, False),
        ("Acrobot-v1", "beta"): (False, False, False), ("Acrobot-v1", "gamma"): (False, False, False),
    }  # fmt: skip
    # beta's CI reaches alpha's: that is what makes it a tie (and gamma's does not).
    assert written.loc[("CartPole-v1", "beta"), "iqm_hi"] >= written.loc[("CartPole-v1", "alpha"), "iqm_lo"]
    assert written.loc[("CartPole-v1", "gamma"), "iqm_hi"] < written.loc[("CartPole-v1", "alpha"), "iqm_lo"]


def test_report_md_opens_with_the_headline(headline_report: Path) -> None:
    md = (headline_report / "report.md").read_text()
    assert md.index("## Results") < md.index(f"Study '{HEADLINE_STUDY}'") < md.index("## What was run")
    assert md.splitlines()[2] == "## Results"  # right under the title
    first = markdown_tables(md)[0]  # the first table of the file is the headline's
    assert list(first.columns) == ["Algorithm", "Acrobot-v1", "CartPole-v1"]
    written = read_csv(headline_report, "headline").set_index(["env_label", "algo"])
    rows = [line for line in md.splitlines() if line.startswith("| ")][1:4]
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        algo = cells[0]
        for env, cell in zip(["Acrobot-v1", "CartPole-v1"], cells[1:], strict=True):
            row = written.loc[(env, algo)]
            text = format_ci(row["iqm"], row["iqm_lo"], row["iqm_hi"])
            assert cell == (f"**{text}**" if row["bold"] else text), (algo, env)
    assert "Best per env: Acrobot-v1: alpha; CartPole-v1: tie between alpha (highest IQM) and beta (95% CIs overlap)." in md
    # Throughput 1,000 + 100 x rank + seed (mean over seeds 0-4: + 2); peak RSS 300 + 10 x rank + seed.
    assert ("Speed (env steps per second of training, mean over ok runs): Acrobot-v1: fastest gamma 1,202, slowest "
            "alpha 1,002; CartPole-v1: fastest gamma 1,202, slowest alpha 1,002.") in md  # fmt: skip
    assert ("Memory (peak resident MB of the trial process, mean over ok runs): Acrobot-v1: least alpha 302.0, most "
            "gamma 322.0; CartPole-v1: least alpha 302.0, most gamma 322.0.") in md  # fmt: skip
    assert md.index("](figures/aggregate.png)") < md.index("## What was run")


def test_index_html_opens_with_the_headline(headline_report: Path) -> None:
    page = (headline_report / "index.html").read_text()
    body = page[page.index("<main>") :]
    assert body.index("</h1>") < body.index('data-headline="true"') < body.index('<div class="summary">')
    headline = body[body.index('data-headline="true"') : body.index("</section>")]
    assert headline.count("<strong>") == 3  # CartPole alpha and beta (a tie), Acrobot alpha
    assert "<strong>496.7 [" in headline and "<strong>493.3 [" in headline and "<strong>-85.00 [" in headline
    assert 'id="fig-aggregate"' in headline and page.count('id="fig-aggregate"') == 1
    assert "Best per env: Acrobot-v1: alpha; CartPole-v1: tie between alpha" in headline


def test_headline_frame_edge_cases() -> None:
    nan = float("nan")
    final = pd.DataFrame(
        [("e", "a", 3, 10.0, 9.0, 11.0), ("e", "b", 3, 10.0, 8.0, 12.0), ("e", "c", 3, 7.5, 7.0, 7.9),
         ("f", "a", 1, 5.0, nan, nan), ("f", "b", 1, 4.0, nan, nan), ("g", "a", 0, nan, nan, nan),
         ("h", "a", 2, 1.0, 0.5, 1.5), ("h", "b", 0, nan, nan, nan)],
        columns=["env_label", "algo", "n_ok", "iqm", "iqm_lo", "iqm_hi"],
    )  # fmt: skip
    frame = headline_frame(final)
    marks = {(r.env_label, r.algo): (r.best, r.bold, r.tie) for r in frame.itertuples()}
    assert marks == {
        ("e", "a"): (True, True, True), ("e", "b"): (True, True, True),  # equal IQMs: both best
        ("e", "c"): (False, False, False),  # 7.9 < 8.0: its CI stops short of both bests' CIs
        ("f", "a"): (True, True, False), ("f", "b"): (False, False, False),  # a collapsed CI is its point
        ("g", "a"): (False, False, False),  # no ok run
        ("h", "a"): (True, True, False), ("h", "b"): (False, False, False),
    }  # fmt: skip
    assert verdict_line(frame) == (
        "Best per env: e: tie between a and b (equal IQM); f: a; g: no ok runs; h: a (the only algorithm with ok runs)."
    )


# ----------------------------------------------------------------------------------------------- files


def test_every_expected_file_is_written(report_dir: Path) -> None:
    assert (report_dir / "index.html").stat().st_size > 10_000
    assert (report_dir / "report.md").stat().st_size > 1_000
    for name in EXPECTED_TABLES:
        assert (report_dir / "tables" / f"{name}.csv").is_file(), name
        assert (report_dir / "tables" / f"{name}.tex").is_file(), name
    for name in ("final_mean_by_env", "final_iqm_by_env", "final_scores_normalised"):
        assert (report_dir / "tables" / f"{name}.tex").is_file(), name
    for name in ("learning_curves", "performance_profile", "probability_of_improvement_matrix"):
        assert (report_dir / "tables" / f"{name}.csv").is_file(), name
    for name in EXPECTED_FIGURES:
        png = (report_dir / "figures" / f"{name}.png").read_bytes()
        assert png.startswith(b"\x89PNG"), name
        assert (report_dir / "figures" / f"{name}.svg").read_text().lstrip().startswith("<?xml"), name


def test_html_is_self_contained(report_dir: Path) -> None:
    page = (report_dir / "index.html").read_text()
    assert "http://" not in page.replace("http://www.w3.org", "")
    assert "https://" not in page
    assert "<script" not in page  # nothing executable, and no external resource of any kind
    assert '<link rel="stylesheet"' not in page
    assert page.count('src="data:image/png;base64,') == len(EXPECTED_FIGURES)
    assert "max-width: 1100px" in page and "overflow-x: auto" in page


# ------------------------------------------------------------------------------------- numbers equal stats


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NaN reliability metrics of 2,048-step curves (shown as n/a)
def test_csv_tables_equal_the_statistics_functions(report_dir: Path, trials: pd.DataFrame, series: dict) -> None:
    evals, curves, updates = series["evals"], series["curves"], series["updates"]
    expected = {
        "status": st.count_statuses(trials),
        "final_scores": st.final_score_table(trials, reps=REPS, seed=0),
        "aggregate": st.aggregate_table(trials, reps=REPS, seed=0),
        "probability_of_improvement": st.probability_of_improvement_table(trials, reps=POI_REPS, seed=0),
        "significance": st.significance_table(trials),
        "sample_efficiency": st.sample_efficiency_table(trials, evals),
        "stability": st.stability_table(trials, curves, evals, updates),
        "speed_memory": st.speed_memory_table(trials, evals),
    }
    expected["stability"]["train_curve"] = "whole episodes"  # no algorithm here caps its training episodes
    for name, frame in expected.items():
        assert_frames_equal(read_csv(report_dir, name), frame.reset_index(drop=True))
    matrix = pd.read_csv(report_dir / "tables" / "probability_of_improvement_matrix.csv", index_col=0)
    want = st.probability_of_improvement_matrix(trials, reps=POI_REPS, seed=0)
    np.testing.assert_allclose(matrix.to_numpy(float), want.to_numpy(float), rtol=1e-12, equal_nan=True)
    profile = st.performance_profile(trials, reps=min(REPS, 2000), seed=0)
    written = read_csv(report_dir, "performance_profile")
    for algo, values in profile["profiles"].items():
        rows = written[written["algo"] == algo]
        np.testing.assert_allclose(rows["fraction"].to_numpy(float), values, rtol=1e-12)
        np.testing.assert_allclose(rows["lo"].to_numpy(float), profile["lo"][algo], rtol=1e-12)


def test_markdown_and_latex_cells_show_the_statistics(report_dir: Path, trials: pd.DataFrame) -> None:
    final = st.final_score_table(trials, reps=REPS, seed=0).set_index(["algo", "env_label"])
    aggregate = st.aggregate_table(trials, reps=REPS, seed=0).set_index("algo")
    md = markdown_tables((report_dir / "report.md").read_text())
    md_final = find_table(md, "Env", "Algorithm", "Mean [95% CI]", "IQM [95% CI]").set_index(["Algorithm", "Env"])
    md_agg = find_table(md, "Algorithm", "Optimality gap [95% CI]").set_index("Algorithm")
    mean_tex = (report_dir / "tables" / "final_mean_by_env.tex").read_text()
    final_tex = (report_dir / "tables" / "final_scores.tex").read_text()
    agg_tex = (report_dir / "tables" / "aggregate.tex").read_text()
    checked = 0
    for (algo, env), row in final.iterrows():
        if row["n_ok"] == 0:
            assert md_final.loc[(algo, env), "Mean [95% CI]"] == "n/a"
            continue
        for stat, header in (("mean", "Mean [95% CI]"), ("median", "Median [95% CI]"), ("iqm", "IQM [95% CI]")):
            values = [row[stat], row[f"{stat}_lo"], row[f"{stat}_hi"]]
            cell = md_final.loc[(algo, env), header]
            assert cell == format_ci(*values)
            assert_close_to_shown(cell, values)
            assert format_cell(Cell(cell, numeric=True)) in final_tex
        assert format_cell(Cell(format_ci(row["mean"], row["mean_lo"], row["mean_hi"]), numeric=True)) in mean_tex
        checked += 1
    assert checked == 4  # 2 algorithms x 2 envs with ok runs
    for algo, row in aggregate.iterrows():
        for stat, header in (("iqm", "IQM [95% CI]"), ("optimality_gap", "Optimality gap [95% CI]")):
            values = [row[stat], row[f"{stat}_lo"], row[f"{stat}_hi"]]
            cell = md_agg.loc[algo, header]
            assert cell == format_ci(*values)
            assert_close_to_shown(cell, values)
            assert format_cell(Cell(cell, numeric=True)) in agg_tex


def test_best_cell_per_column_is_bold_in_latex(report_dir: Path, trials: pd.DataFrame) -> None:
    final = st.final_score_table(trials, reps=REPS, seed=0)
    tex = (report_dir / "tables" / "final_mean_by_env.tex").read_text()
    assert r"\usepackage{booktabs}" in tex.splitlines()[0]
    assert r"\toprule" in tex and r"\midrule" in tex and r"\bottomrule" in tex
    for env, rows in final[final["n_ok"] > 0].groupby("env_label"):
        best = rows.loc[rows["mean"].idxmax()]
        best_cell = Cell(format_ci(best["mean"], best["mean_lo"], best["mean_hi"]), numeric=True, bold=True)
        assert format_cell(best_cell) in tex, env


def test_states_budget_tier_seeds_and_reps(report_dir: Path) -> None:
    md = (report_dir / "report.md").read_text()
    assert "Budget tier: smoke" in md  # 2,048 steps is the smoke budget of both envs
    assert "CartPole-v1: 2,048 steps" in md
    assert "seeds per algorithm and env" in md
    assert f"{REPS:,} replications for scores" in md and f"{POI_REPS:,} per pair" in md
    budgets = read_csv(report_dir, "budgets").set_index(["algo", "env_label"])
    assert budgets.loc[("ppo", "CartPole-v1"), "tier"] == "smoke"
    assert budgets.loc[("ppo", "CartPole-v1"), "seeds"] == "0-2, 7"  # the failed trial ran too
    assert budgets.loc[(VARIANT, "TextMatch-v0"), "n_seeds"] == 2
    # Steps actually trained next to the budget: every ok trial stops exactly at its budget.
    assert budgets.loc[(VARIANT, "TextMatch-v0"), "steps"] == budgets.loc[(VARIANT, "TextMatch-v0"), "budget"] == "2,048"
    assert set(budgets["train_curve"]) == {"whole episodes"}
    assert "Steps trained" in md and "Training curve" in md


def test_training_curve_label_says_which_episodes_a_curve_holds() -> None:
    assert training_curve_label([{}, None, {"sample_diversity": 1.0}]) == "whole episodes"
    capped = [{"episode_cap": 1000, "capped_episodes": 3}, {"episode_cap": 1000, "capped_episodes": 4}]
    assert training_curve_label(capped) == "capped at 1000 steps (7 partial episodes left out)"


# ------------------------------------------------------------------------------------ escaping, failures


def test_hostile_strings_are_escaped_in_html(report_dir: Path) -> None:
    page = (report_dir / "index.html").read_text()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; 50% $x_1$" in page
    assert "<b>&amp;</b>" not in page
    assert "CartPole-v1 &lt;b&gt;&amp;amp;&lt;/b&gt; 100%" in page


def test_hostile_strings_are_escaped_in_latex(report_dir: Path) -> None:
    tex = (report_dir / "tables" / "failures.tex").read_text()
    assert (
        r"\textless{}script\textgreater{}alert(1)\textless{}/script\textgreater{} \& 50\% \$x\_1\$ "
        r"\#\{a\}\textasciitilde{}\textasciicircum{}\textbackslash{}"
    ) in tex
    assert "& 50%" not in tex and "$x_1$" not in tex
    status = (report_dir / "tables" / "status.tex").read_text()
    assert r"CartPole-v1 \textless{}b\textgreater{}\&amp;\textless{}/b\textgreater{} 100\%" in status


def test_latex_escape_is_exact() -> None:
    assert latex_escape("a_b & 50% $x$ #1 {y} ~ ^ \\") == (
        r"a\_b \& 50\% \$x\$ \#1 \{y\} \textasciitilde{} \textasciicircum{} \textbackslash{}"
    )
    assert latex_escape("line\nbreak") == "line break"


def test_failures_are_listed_and_counted(report_dir: Path) -> None:
    failures = read_csv(report_dir, "failures")
    assert sorted(failures["status"]) == ["diverged", "failed"]
    assert set(failures["key"]) == {"failed-0001", "diverged-0001"}
    assert failures.set_index("key").loc["failed-0001", "error"] == f"RuntimeError: {HOSTILE}"
    status = read_csv(report_dir, "status").set_index(["algo", "env_label"])
    assert status.loc[("ppo", "CartPole-v1"), ["n_total", "n_ok", "n_failed"]].tolist() == [4, 3, 1]
    assert status.loc[("ppo", HOSTILE_LABEL), ["n_total", "n_ok", "n_diverged"]].tolist() == [1, 0, 1]
    page = (report_dir / "index.html").read_text()
    assert "Failures (2)" in page
    assert "ppo / CartPole-v1 / seed 7: failed" in page
    assert "Traceback (most recent call last)" in page
    md_failures = find_table(markdown_tables((report_dir / "report.md").read_text()), "Status", "Error", "Trial key")
    assert sorted(md_failures["Status"]) == ["diverged", "failed"]
    assert f"RuntimeError: {HOSTILE}" in md_failures["Error"].tolist()


def test_other_studies_are_not_included(report_dir: Path) -> None:
    assert "other-study-0001" not in read_csv(report_dir, "sample_efficiency")["algo"].tolist()
    assert read_csv(report_dir, "status")["n_total"].sum() == 12


def test_provenance_is_reported(report_dir: Path) -> None:
    prov = read_csv(report_dir, "provenance").set_index("field")["values"]
    assert prov["Suite version"]
    assert "Python" in prov.index and "torch threads per trial" in prov.index
    assert any(name.startswith("package torch") for name in prov.index)
    assert "ppo" in prov["Algorithm versions"]


# ------------------------------------------------------------------------------------------ user mistakes


def test_unknown_study_is_a_user_error_listing_the_studies(results_db: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"study 'nope' is not in .*; it has: elsewhere, report-test"):
        write_report(study="nope", db=results_db, out_dir=tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_missing_database_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no results database"):
        write_report(study="default", db=tmp_path / "missing.db", out_dir=tmp_path / "x")
    assert not (tmp_path / "missing.db").exists()


def test_cli_report_unknown_study_is_one_line(results_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["report", "nope", "--db", str(results_db), "-o", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("suite: error: study 'nope' is not in")


# ----------------------------------------------------------------------------------------- small pieces


def test_format_number_follows_magnitude() -> None:
    assert [format_number(x) for x in (12345.6, 412.34, 2.434, 0.1254, 0.0, -3.5, 2e-5)] == [
        "12,346", "412.3", "2.43", "0.125", "0", "-3.50", "2.00e-05",
    ]  # fmt: skip
    assert format_number(float("inf")) == "not reached"
    assert format_number(float("nan")) == format_number(None) == format_number(pd.NA) == "n/a"
    assert format_ci(1.333, 0.6, 1.7) == "1.33 [0.60, 1.70]"
    assert format_ci(float("nan"), 1, 2) == "n/a"
    assert format_p(0.0004) == "4.0e-04" and format_p(0.05) == "0.050"


def test_best_cell_is_chosen_within_each_env() -> None:
    frame = pd.DataFrame(
        {"env_label": ["a", "a", "b", "b", "c"], "algo": ["x", "y", "x", "y", "x"],
         "score": [1.0, 2.0, 5.0, 5.0, 9.0], "gap": [0.5, 0.1, np.nan, 0.2, 0.3]}
    )  # fmt: skip
    spec = TableSpec("t", "T", "", (Column("Score", "score", "num", "higher"), Column("Gap", "gap", "num", "lower")))
    table = display_table(frame, spec)
    assert [[c.bold for c in row] for row in table.rows] == [
        [False, False], [True, True],  # env a: y best in both
        [True, False], [True, False],  # env b: a tie is bold twice; one finite gap is not "best"
        [False, False],  # env c: a single row is never bold
    ]  # fmt: skip


def test_tier_inference_and_seed_ranges() -> None:
    tiers = {"smoke": {"CartPole-v1": 2048}, "quick": {"CartPole-v1": {"default": 100000, "sb3-dqn": 50000}}}
    assert tier_of(2048, "CartPole-v1", "ppo", tiers) == ["smoke"]
    assert tier_of(50000, "CartPole-v1", "sb3-dqn", tiers) == ["quick"]
    assert tier_of(50000, "CartPole-v1", "ppo", tiers) == []
    assert compact_ranges([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"


def test_default_poi_reps_spread_a_budget_over_pairs() -> None:
    assert default_poi_reps(2, 2000) == 2000
    assert default_poi_reps(8, 2000) == 71  # 28 pairs
    assert default_poi_reps(30, 2000) == 50  # never below the minimum
    assert default_poi_reps(3, 200) == 200  # never above the requested reps


# ----------------------------------------------------------------------------------------- tensorboard


def test_write_tensorboard_records_curves_evals_and_updates(results_db: Path, trials: pd.DataFrame, tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    key = trials[(trials["algo"] == "ppo") & (trials["env_label"] == "CartPole-v1") & (trials["seed"] == 0)]["key"].iloc[0]
    with ResultsStore(results_db, create=False) as store:
        record = store.get_trial(key)
    assert record is not None
    run = write_tensorboard(record, tmp_path)
    assert run == tmp_path / "ppo" / "CartPole-v1" / "seed0"
    again = write_tensorboard(record, tmp_path)  # the same trial again replaces, never duplicates
    assert again == run and len(list(run.glob("events.out.tfevents.*"))) == 1
    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/episode_return", "eval/return_mean", "eval/final_return_mean"} <= tags
    metric_names = [k for k in record["updates"][0] if k not in ("update", "step")]
    assert {f"update/{m}" for m in metric_names if math.isfinite(record["updates"][0][m])} <= tags
    returns = [e.value for e in acc.Scalars("train/episode_return")]
    np.testing.assert_allclose(returns, record["curve"]["return"], rtol=1e-6)
    evals = [e.value for e in acc.Scalars("eval/return_mean")]
    np.testing.assert_allclose(evals, [np.mean(e["returns"]) for e in record["evals"]], rtol=1e-6)
    other = dict(record, key="f" * 64)  # same algo/env/seed, different trial: its own directory
    assert write_tensorboard(other, tmp_path) == tmp_path / "ppo" / "CartPole-v1" / "seed0-ffffffff"
    odd = dict(record, key="e" * 64, env_label="ALE/Pong-v5[x:1]")
    assert write_tensorboard(odd, tmp_path).relative_to(tmp_path).parts == ("ppo", "ALE_Pong-v5[x_1]", "seed0")
