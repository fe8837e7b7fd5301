"""The docs' measurement tables are generated from committed result files (benchmarks/make_docs.py)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "make_docs.py"
HEADER = "target,value,unit,machine,commit,command,date"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


make_docs = _load("make_docs", SCRIPT)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def _repo(tmp_path: Path, csv_text: str, doc_body: str = "") -> Path:
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "x.csv").write_text(csv_text)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "x.md").write_text(
        f"# x\n\nBefore.\n\n<!-- generated: results/x.csv -->\n{doc_body}<!-- end generated -->\n\nAfter.\n"
    )
    return tmp_path


def test_the_committed_docs_are_in_step_with_their_files():
    result = _run("--check")
    assert result.returncode == 0, result.stderr
    assert "docs in step" in result.stdout
    blocks = sum(len(make_docs.find_blocks(doc)) for doc in make_docs.docs_of(REPO))
    assert blocks >= 3


def test_the_speed_summary_is_what_its_source_files_give():
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "speed_summary.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_every_file_a_generated_table_cites_is_committed():
    for doc in make_docs.docs_of(REPO):
        for block in make_docs.find_blocks(doc):
            rows, with_file = make_docs.latest_rows(REPO / block.path, block.path)
            if with_file:
                for row in rows:
                    assert (REPO / row["file"]).exists(), f"{doc.name} cites {row['file']}, which is not in the repository"


def test_a_stale_block_is_named_and_exits_1(tmp_path):
    root = _repo(tmp_path, f"{HEADER}\nspeedup,3.1,x,epyc,abc1234,bench,2026-01-01\n")
    assert _run("--root", str(root)).returncode == 0
    assert _run("--check", "--root", str(root)).returncode == 0
    generated = (root / "docs" / "x.md").read_text()
    assert "| speedup | 3.1 | x | epyc | abc1234 | 2026-01-01 | `bench` |" in generated
    assert generated.startswith("# x\n\nBefore.\n") and generated.endswith("<!-- end generated -->\n\nAfter.\n")

    (root / "results" / "x.csv").write_text(
        f"{HEADER}\nspeedup,3.1,x,epyc,abc1234,bench,2026-01-01\nspeedup,3.4,x,epyc,def5678,bench,2026-01-02\n"
    )
    result = _run("--check", "--root", str(root))
    assert result.returncode == 1
    assert "docs/x.md: block generated from results/x.csv is out of step" in result.stderr
    assert (root / "docs" / "x.md").read_text() == generated  # --check writes nothing


def test_a_marker_naming_a_missing_file_is_one_error_line(tmp_path):
    root = _repo(tmp_path, f"{HEADER}\nspeedup,3.1,x,epyc,abc1234,bench,2026-01-01\n")
    (root / "docs" / "y.md").write_text("<!-- generated: results/missing.csv -->\n<!-- end generated -->\n")
    for args in ([], ["--check"]):
        result = _run(*args, "--root", str(root))
        assert result.returncode == 2
        assert result.stderr.strip().splitlines() == ["make_docs: error: docs/y.md: results/missing.csv does not exist"]


def test_a_csv_without_the_evidence_columns_is_one_error_line(tmp_path):
    root = _repo(tmp_path, "target,value\nspeedup,3\n")
    result = _run("--root", str(root))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "make_docs: error: docs/x.md: results/x.csv lacks the column(s) unit, machine, commit, command, date "
        "(needed: target, value, unit, machine, commit, command, date)"
    )


def test_two_rows_for_one_target_show_the_latest_only(tmp_path):
    csv_text = (
        f"{HEADER},file\n"
        "speedup,3.10,x,epyc,abc1234,bench --a,2026-01-01,results/a.json\n"
        "memory,0.58,x,epyc,abc1234,bench --b,2026-01-01,results/b.json\n"
        "speedup,3.40,x,xeon,def5678901234567890123456789012345678901,bench --a,2026-01-03,results/c.json\n"
        "memory,0.61,x,epyc,0000000,bench --b,2025-12-31,results/d.json\n"
    )
    root = _repo(tmp_path, csv_text)
    assert _run("--root", str(root)).returncode == 0
    text = (root / "docs" / "x.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| target")]
    assert rows == [
        "| speedup | 3.40 | x | xeon | def5678 | 2026-01-03 | `bench --a` | `results/c.json` |",
        "| memory | 0.58 | x | epyc | abc1234 | 2026-01-01 | `bench --b` | `results/b.json` |",
    ]
    assert "| target | value | unit | machine | commit | date | command | file |" in text
    assert "3.10" not in text and "0.61" not in text


def test_targets_glob_keeps_only_the_matching_rows(tmp_path):
    root = _repo(tmp_path, f"{HEADER}\nPong speed,1.3,x,m,c,cmd,2026-01-01\nCartPole speed,5.2,x,m,c,cmd,2026-01-01\n")
    doc = root / "docs" / "x.md"
    doc.write_text(doc.read_text().replace("results/x.csv -->", "results/x.csv targets=Pong* -->"))
    assert _run("--root", str(root)).returncode == 0
    text = doc.read_text()
    assert "| Pong speed | 1.3 |" in text and "CartPole" not in text


@pytest.mark.parametrize("cell", ["a|b", "a | b"])
def test_a_pipe_in_a_cell_does_not_split_the_row(tmp_path, cell):
    root = _repo(tmp_path, f'{HEADER}\nspeed,1,x,m,c,"python b.py {cell}",2026-01-01\n')
    assert _run("--root", str(root)).returncode == 0
    row = next(line for line in (root / "docs" / "x.md").read_text().splitlines() if line.startswith("| speed"))
    assert row.count(" | ") == 6 and "\\|" in row


def test_the_readme_stays_a_front_door():
    """At most 250 lines and 25 KB, no dates or commit ids (measurements live in docs/), and the second set-up
    command is the one CI runs."""
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert len(text.encode()) <= 25_000
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text)
    assert not re.search(r"(?<![\w/.])[0-9a-f]{7,40}(?![\w/.])", text)
    tests_command = (
        "python3.11 -m venv .venv && .venv/bin/pip install -c constraints.txt -e '.[test]' && "
        '.venv/bin/python -m pytest -m "not slow" -n auto --dist loadfile'
    )
    assert f"```bash\n{tests_command}\n```" in text
    ci = (REPO / ".ci" / "run").read_text()
    ci_line = next(line for line in ci.splitlines() if line.startswith("python3.11 -m venv"))
    assert ci_line.replace("-q ", "").startswith(tests_command)
