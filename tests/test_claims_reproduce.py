"""``suite reproduce`` end to end: runs only what is missing, writes every output, judges from the records, re-runs
exactly what a version bump changes, labels a stand-in everywhere, and ends a user's mistake in one line."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import suite.algorithms  # noqa: F401  (registers every algorithm)
import suite.registry as registry
from suite.claims import load_claim_set
from suite.claims.reproduce import SHIPPED_PAGE_SIZE, evaluate_cells
from suite.claims.tables import write_tables
from suite.cli import main
from suite.stats.equivalence import Component, Difference
from suite.store import ResultsStore

CLAIMS = """
name = "tiny"
title = "A tiny text claim"
source = "a test"
location = "table 1"
stand_in = "a test stand-in for a bigger task"
tier = "smoke"
seeds = "0-2"

[arms.ppo]
algo = "ppo"
[arms.pairwise]
algo = "grpo-pairwise"
overrides = { normalize_obs = true }

[[rows]]
label = "hello"
env = "TextMatch-v0"
budget = 400
cells = [
  { column = "PPO", arm = "ppo", claimed = 1.0 },
  { column = "pairwise", arm = "pairwise", claimed = 6.0 },
  { column = "gain", arm = "pairwise", versus = "ppo", kind = "improvement", claimed = 0.5 },
  { column = "diversity", arm = "ppo", metric = "sample_diversity", claimed = 0.5, tolerance = 0.1 },
]
"""

OUTPUTS = ("index.html", "report.md", "table.tex", "cells.tex", "verdicts.csv", "verdicts.json")


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Run the tiny claim set once through the CLI (6 trials of 400 steps)."""
    root = tmp_path_factory.mktemp("claims")
    (root / "tiny.toml").write_text(CLAIMS)
    args = ["reproduce", str(root / "tiny.toml"), "--db", str(root / "db.sqlite"), "-o", str(root / "out"), "--quiet"]
    assert main([*args, "--workers", "2"]) == 0
    return {"root": root, "db": root / "db.sqlite", "out": root / "out", "toml": root / "tiny.toml"}


def test_every_output_is_written_with_a_verdict_per_cell(reproduced: dict[str, Path]) -> None:
    out = reproduced["out"]
    for name in OUTPUTS:
        assert (out / name).stat().st_size > 0
    verdicts = pd.read_csv(out / "verdicts.csv")
    assert verdicts["column"].tolist() == ["PPO", "pairwise", "gain", "diversity"]
    assert set(verdicts["verdict"]) <= {
        "consistent (stand-in)",
        "inconsistent (stand-in)",
        "inconclusive (stand-in)",
        "impossible",
    }  # a stand-in's own words
    assert verdicts.set_index("column").loc["pairwise", "verdict"] == "impossible"  # 6 > len('hello')
    assert (verdicts["run_budget"] == 400).all() and (verdicts["tier"] == "smoke").all()
    meta = json.loads((out / "verdicts.json").read_text())
    assert meta["command"] == f"suite reproduce {reproduced['toml']} --db {reproduced['db']} -o {out}"
    assert "One rule for every cell" in meta["rule"] and meta["rule_doc"] == "docs/claims.md"
    assert [c["verdict"] for c in meta["cells"]] == verdicts["verdict"].tolist()
    page = (out / "index.html").read_text()
    assert "http://" not in page and "https://" not in page and "<script" not in page  # self-contained
    for name in ("index.html", "report.md", "table.tex", "cells.tex", "verdicts.csv", "verdicts.json"):
        assert "a test stand-in for a bigger task" in (out / name).read_text(), name  # a stand-in says so everywhere


def test_measurements_equal_the_records(reproduced: dict[str, Path]) -> None:
    claims = load_claim_set(str(reproduced["toml"]))
    verdicts = pd.read_csv(reproduced["out"] / "verdicts.csv").set_index("column")
    with ResultsStore(reproduced["db"], create=False) as store:
        trials = store.trials(study="claims/tiny")
    assert len(trials) == 6 and (trials["status"] == "ok").all() and (trials["steps"] == 400).all()
    ppo = trials[trials["algo"] == "ppo"].sort_values("seed")
    pairwise = trials[trials["algo"] == "grpo-pairwise"].sort_values("seed")
    a, b = pairwise["final_eval_mean"].to_numpy(float), ppo["final_eval_mean"].to_numpy(float)
    assert verdicts.loc["PPO", "measured"] == pytest.approx(b.mean())
    welch = Difference(a.mean() - b.mean(), (Component(a.var(ddof=1) / 3, 2), Component(b.var(ddof=1) / 3, 2)))
    want = (welch.point, *welch.interval(0.95))
    assert (verdicts.loc["gain", "measured"], verdicts.loc["gain", "ci_lo"], verdicts.loc["gain", "ci_hi"]) == pytest.approx(
        want
    )
    diversity = np.array([m["sample_diversity"] for m in ppo["metrics"]])
    assert verdicts.loc["diversity", "measured"] == pytest.approx(diversity.mean())
    assert ((diversity > 0) & (diversity <= 1)).all()
    assert claims.cells[0].seeds == (0, 1, 2)


def test_a_second_run_runs_nothing_and_writes_identical_verdicts(
    reproduced: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    before = (reproduced["out"] / "verdicts.csv").read_bytes()
    capsys.readouterr()
    assert (
        main(["reproduce", str(reproduced["toml"]), "--db", str(reproduced["db"]), "-o", str(reproduced["out"]), "--quiet"])
        == 0
    )
    captured = capsys.readouterr()
    assert "0 trials to run, 6 already done" in captured.err
    assert (reproduced["out"] / "verdicts.csv").read_bytes() == before
    assert "4 stand-in cells" in captured.out and "STAND-IN: a test stand-in" in captured.out
    assert "changes against" not in captured.out  # the same table again: nothing to report


def test_a_run_reports_what_changed_against_the_table_its_folder_held(
    reproduced: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The verdicts are data, so regenerating a table says which cells changed verdict (with the measurement before
    and after), how many moved under the same verdict, and which cells came or went (matched by row and column)."""
    out = tmp_path / "out"
    out.mkdir()
    meta = json.loads((reproduced["out"] / "verdicts.json").read_text())
    cells = {c["column"]: c for c in meta["cells"]}
    was = cells["PPO"]["verdict"]
    cells["PPO"]["verdict"] = "impossible" if was != "impossible" else "reproduced"
    cells["diversity"]["measured"] = (cells["diversity"]["measured"] or 0.0) + 0.25
    gone = dict(cells["gain"], column="an old column")
    meta["cells"] = [cells["PPO"], cells["pairwise"], cells["diversity"], gone]
    meta["tier"] = "quick"
    (out / "verdicts.json").write_text(json.dumps(meta))
    capsys.readouterr()
    argv = ["reproduce", str(reproduced["toml"]), "--db", str(reproduced["db"]), "-o", str(out), "--no-run", "--quiet"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("changes against the table this folder held (tier quick, now smoke):")
    changes = lines[start + 1 : start + 5]
    assert changes[0].startswith(f"  {cells['PPO']['verdict']} -> {was}  hello / PPO (measured ")
    assert changes[1] == f"  new cell  hello / gain: {pd.read_csv(out / 'verdicts.csv')['verdict'].iloc[2]}"
    assert changes[2] == f"  cell gone hello / an old column (was {gone['verdict']})"
    assert changes[3] == "  1 cell(s) measured differently with the same verdict"
    assert main(argv) == 0  # the folder now holds this table: nothing changed
    assert "changes against" not in capsys.readouterr().out


def test_the_folder_carries_its_records_and_re_judges_without_the_original_database(
    reproduced: dict[str, Path], tmp_path: Path
) -> None:
    records = reproduced["out"] / "records.db"
    with ResultsStore(records, create=False) as store, ResultsStore(reproduced["db"], create=False) as original:
        assert store.finished_keys() == original.finished_keys() and len(store.trials()) == 6
        assert store.curves().equals(original.curves()) and store.updates().equals(original.updates())
    conn = sqlite3.connect(records)  # shipped with small pages (ResultsStore.compact), still in WAL mode
    try:
        assert conn.execute("PRAGMA page_size").fetchone()[0] == SHIPPED_PAGE_SIZE == 1024
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()
    again = tmp_path / "again"
    argv = ["reproduce", str(reproduced["toml"]), "--db", str(records), "-o", str(again), "--no-run", "--quiet"]
    assert main(argv) == 0
    assert (again / "verdicts.csv").read_bytes() == (reproduced["out"] / "verdicts.csv").read_bytes()
    assert (again / "records.db").exists()  # a copy of what was read
    assert main([*argv[:4], "-o", str(reproduced["out"]), "--no-run", "--quiet"]) == 0  # reading it in place
    assert sorted(p.name for p in reproduced["out"].iterdir()) == sorted([*OUTPUTS, "records.db"])


def test_a_version_bump_leaves_exactly_that_algorithms_cells_to_run(
    reproduced: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    claims = load_claim_set(str(reproduced["toml"]))
    old = claims.expand()
    spec = registry.get_algorithm("grpo-pairwise")
    monkeypatch.setitem(registry._REGISTRY, spec.id, dataclasses.replace(spec, version=spec.version + "-bumped"))
    new = claims.expand()
    changed = set(new.trials) - set(old.trials)
    assert {new.trials[k].algo.id for k in changed} == {"grpo-pairwise"} and len(changed) == 3
    assert {k for k in new.trials if new.trials[k].algo.id == "ppo"} <= set(old.trials)
    with ResultsStore(reproduced["db"], create=False) as store:
        results = evaluate_cells(new, store)
    reasons = {r.cell.column: (r.verdict, r.reason) for r in results}
    assert reasons["gain"] == ("inconclusive (stand-in)", "3 trial(s) not run yet")
    assert reasons["pairwise"][0] == "impossible"  # impossible whatever is (or is not) measured
    assert reasons["PPO"][1] != "3 trial(s) not run yet" and reasons["diversity"][1] != "3 trial(s) not run yet"


def test_no_run_judges_an_empty_database_and_labels_the_stand_in(tmp_path: Path) -> None:
    claims = load_claim_set("seed000-text")
    db = tmp_path / "db.sqlite"
    ResultsStore(db).close()
    with ResultsStore(db, create=False) as store:
        results = evaluate_cells(claims.expand("quick"), store)
    assert [r.verdict for r in results] == ["inconclusive (stand-in)"] * 10
    sweeps = ["40 trial(s) not run yet", "30 trial(s) not run yet"]  # every point of a sweep per seed
    assert [r.reason for r in results] == ["10 trial(s) not run yet"] * 8 + sweeps
    write_tables(claims, results, tmp_path / "out", tier="quick", db_path=db, command="suite reproduce seed000-text")
    for name in OUTPUTS:
        assert "STAND-IN" in (tmp_path / "out" / name).read_text() or "CNN/DailyMail" in (tmp_path / "out" / name).read_text()


def test_seed004_pong_cell_is_impossible_before_anything_runs(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    ResultsStore(db).close()
    with ResultsStore(db, create=False) as store:
        results = evaluate_cells(load_claim_set("seed004-table").expand("standard"), store)
    verdicts = {(r.cell.row, r.cell.column): r.verdict for r in results}
    # the GRPO 21.5 and the gain that implies it; canonical GRPO is a reference column, never judged
    assert verdicts[("Atari Pong", "GRPO")] == verdicts[("Atari Pong", "gain")] == "impossible"
    assert {v for k, v in verdicts.items() if k[1] == "canonical GRPO"} == {"reference (not judged)"}
    assert {v for k, v in verdicts.items() if k[0] != "Atari Pong" and k[1] != "canonical GRPO"} == {"inconclusive"}


def test_a_row_selection_judges_that_row_alone_and_never_overwrites_the_whole_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "db.sqlite"
    ResultsStore(db).close()
    monkeypatch.chdir(tmp_path)
    rows = ["--row", "hopper-v5", "--row", "MuJoCo Hopper"]
    assert main(["reproduce", "seed004-table", *rows, "--db", str(db), "--no-run"]) == 0
    out = tmp_path / "reports" / "claims" / "seed004-table" / "rows-mujoco-hopper"  # beside the whole table's files
    assert not (out.parent / "verdicts.json").exists()
    verdicts = json.loads((out / "verdicts.json").read_text())
    columns = ("PPO", "GRPO", "canonical GRPO", "gain")
    assert [(c["row"], c["column"]) for c in verdicts["cells"]] == [("MuJoCo Hopper", col) for col in columns]
    assert "--row hopper-v5 --row 'MuJoCo Hopper'" in verdicts["command"]
    assert "Rows run and judged: MuJoCo Hopper (1 of the set's 4, selected with --row)." in (out / "report.md").read_text()
    # the trials are the whole set's own (same keys), so a later run of the whole set reuses them
    full = load_claim_set("seed004-table").expand("standard").trials
    part = load_claim_set("seed004-table").select_rows(["Hopper-v5"]).expand("standard").trials
    assert set(part) < set(full) and len(part) == 15


def test_a_column_selection_judges_that_arms_cells_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "db.sqlite"
    ResultsStore(db).close()
    monkeypatch.chdir(tmp_path)
    argv = ["reproduce", "zoo-benchmark", "--row", "Hopper-v5", "--column", "ppo", "--db", str(db), "--no-run"]
    assert main(argv) == 0
    out = tmp_path / "reports" / "claims" / "zoo-benchmark" / "rows-ppo-hopper-v3-columns-ppo"
    verdicts = json.loads((out / "verdicts.json").read_text())
    assert [(c["row"], c["column"]) for c in verdicts["cells"]] == [("ppo Hopper-v3", "suite ppo")]
    assert "--row Hopper-v5 --column ppo" in verdicts["command"]
    assert (
        "Columns run and judged: suite ppo (1 of the set's 5 cells, selected with --column)."
        in (out / "report.md").read_text()
    )
    # a column label, an arm's label and its algorithm id select the same cells, whose trials are the set's own
    full = load_claim_set("zoo-benchmark")
    by_algo = full.select_columns(["PPO"]).cells
    assert by_algo == full.select_columns(["suite ppo"]).cells
    assert {c.arm.algo for c in by_algo} == {"ppo"} and len(by_algo) == 4
    assert set(full.select_columns(["sb3-ppo"]).expand("smoke").trials) < set(full.expand("smoke").trials)
    # a comparison cell stays when either of its arms is named
    gains = load_claim_set("seed004-table").select_columns(["ppo-rlvr-prm"]).cells
    assert {c.column for c in gains} == {"GRPO", "gain"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["reproduce", "seed999"], "suite: error: unknown claim set 'seed999'; shipped: cleanrl-benchmark"),
        (["reproduce", "seed004-table", "--tier", "huge"], "suite: error: unknown tier 'huge'"),
        (["reproduce", "seed004-table", "--seeds", "4-1"], "suite: error: bad seed range"),
        (["reproduce", "seed004-table", "--no-run"], "suite: error: no results database at"),
        (["reproduce", "seed004-table", "--row", "Walker"], "suite: error: claim set 'seed004-table' has no row 'Walker'"),
        (
            ["reproduce", "zoo-benchmark", "--column", "impala"],
            "suite: error: claim set 'zoo-benchmark' has no column or arm 'impala'; its columns: Stable-Baselines3 class",
        ),
    ],
)
def test_a_users_mistake_is_one_line_and_exit_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "absent.sqlite"
    assert main([*argv, "--db", str(db), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and len(err.splitlines()) == 1
    assert not db.exists() and not (tmp_path / "out").exists()


def test_suite_list_shows_the_claim_sets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--json"]) == 0
    listed = {c["name"]: c for c in json.loads(capsys.readouterr().out)["claim_sets"]}
    assert listed["seed004-table"]["cells"] == 16 and listed["seed000-text"]["stand_in"] is True


def test_tier_best_takes_each_cells_best_settled_measurement_from_the_folders_records(
    reproduced: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder whose own records hold nothing and whose detailed run holds the trials: --tier best judges every cell
    from the detailed run and says so per cell (its records folder, tier and date); it runs nothing."""
    out = tmp_path / "out"
    (out / "detail").mkdir(parents=True)
    shutil.copy(reproduced["db"], out / "detail" / "records.db")
    ResultsStore(out / "records.db").close()
    argv = ["reproduce", str(reproduced["toml"]), "--tier", "best", "--db", str(out / "records.db"), "-o", str(out)]
    assert main(argv) == 2 and "--tier best judges what the records already hold: add --no-run" in capsys.readouterr().err
    assert main([*argv, "--no-run", "--quiet"]) == 0
    cells = json.loads((out / "verdicts.json").read_text())["cells"]
    assert {c["records"] for c in cells} == {"detail/records.db"} and {c["tier"] for c in cells} == {"paper"}
    assert all(c["date"] for c in cells) and all(c["code"] != "not_run" for c in cells)
    single = pd.read_csv(reproduced["out"] / "verdicts.csv")
    assert [c["verdict"] for c in cells] == single["verdict"].tolist()  # the same trials: the same verdicts
