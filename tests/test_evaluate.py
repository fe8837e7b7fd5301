"""Saved policies a person can tell apart (``<algo>_<env>_seed<k>_<short key>.pt``, the full key inside), and
``suite evaluate`` taking a model's path, its trial's key or a unique prefix of the key; older ``<key>.pt`` files
still load; a wrong name is one line and exit 2."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

from suite.cli import main
from suite.store import ResultsStore
from suite.store.models import SHORT_KEY_CHARS, filename_safe, model_filename
from suite.trial import TrialSpec, run_trial


def test_model_filename_says_algo_env_seed_and_a_short_key() -> None:
    key = "9c1e0b77d2" + "ab" * 27
    assert model_filename("sb3-dqn", "ALE/Pong-v5", 2, key) == "sb3-dqn_ALE-Pong-v5_seed2_9c1e0b77d2.pt"
    assert model_filename("ppo", "CartPole-v1", 0, key) == "ppo_CartPole-v1_seed0_9c1e0b77d2.pt"
    assert filename_safe("my env/v0 [x:1]") == "my-env-v0-x-1" and filename_safe("../") == "x"
    assert SHORT_KEY_CHARS == 10


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real ppo trial saved the way ``suite run`` saves it: ``results/suite.db`` and ``results/models/``."""
    root = tmp_path_factory.mktemp("evaluate")
    db = root / "results" / "suite.db"
    record = run_trial(TrialSpec("ppo", "CartPole-v1", 3, 256, n_eval_episodes=1).resolve(), models_dir=db.parent / "models")
    assert record["status"] == "ok", record["error"]
    with ResultsStore(db) as store:
        store.save_trial(record)
    return {"db": db, "record": record, "path": Path(record["model_path"])}


def evaluate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["evaluate", *argv, "--episodes", "2"])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_trial_saves_its_policy_under_a_readable_name_with_the_full_key_inside(trained: dict[str, Any]) -> None:
    record, path = trained["record"], trained["path"]
    assert path.parent == trained["db"].parent / "models"
    assert path.name == f"ppo_CartPole-v1_seed3_{record['key'][:10]}.pt"
    payload = torch.load(path, weights_only=True)
    assert payload["key"] == record["key"] and len(record["key"]) > SHORT_KEY_CHARS
    assert (payload["algo"], payload["env_id"], payload["seed"]) == ("ppo", "CartPole-v1", 3)


def test_evaluate_takes_the_path_the_key_or_a_unique_prefix(
    trained: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    key, db = trained["record"]["key"], str(trained["db"])
    by_path = evaluate(capsys, str(trained["path"]))
    assert by_path[0] == 0, by_path[2]
    assert re.fullmatch(
        r"ppo on CartPole-v1: mean return [\d.]+ ± [\d.]+ over 2 episodes \(mean length \d+; evaluation seeds of trial "
        r"seed 3; native kernels\)\n",
        by_path[1],
    )  # the trial's own evaluation seeds by default
    assert evaluate(capsys, key, "--db", db) == by_path
    assert evaluate(capsys, key[:6], "--db", db) == by_path
    seeded = evaluate(capsys, key[:6], "--db", db, "--seed", "0")
    assert seeded[0] == 0 and seeded[1].endswith("evaluation seeds of trial seed 0; native kernels)\n")


def test_an_older_key_named_file_still_loads(
    trained: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A database and models folder from before the readable names: ``models/<key>.pt``, no key inside."""
    record = trained["record"]
    db = tmp_path / "suite.db"
    with ResultsStore(db) as store:
        store.save_trial(record)
    old = tmp_path / "models" / f"{record['key']}.pt"
    old.parent.mkdir()
    payload = torch.load(trained["path"], weights_only=True)
    del payload["key"]
    torch.save(payload, old)
    expected = evaluate(capsys, str(trained["path"]))
    assert evaluate(capsys, str(old)) == expected
    assert evaluate(capsys, record["key"][:8], "--db", str(db)) == expected


def one_error(result: tuple[int, str, str]) -> str:
    code, out, err = result
    assert code == 2 and out == "" and err.count("\n") == 1, result
    assert err.startswith("suite: error: ")
    return err.removeprefix("suite: error: ").rstrip("\n")


def test_an_ambiguous_unknown_or_unsaved_key_is_one_line_and_exit_2(
    trained: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = trained["record"]
    db = tmp_path / "suite.db"
    twin = dict(record, key=record["key"][:6] + "f" * (len(record["key"]) - 6), seed=4)  # shares 6 characters
    if twin["key"] == record["key"]:
        twin["key"] = record["key"][:6] + "e" * (len(record["key"]) - 6)
    with ResultsStore(db) as store:
        store.save_trial(record)
        store.save_trial(twin)
    message = one_error(evaluate(capsys, record["key"][:6], "--db", str(db)))
    assert message.startswith(f"'{record['key'][:6]}' is ambiguous: 2 trial keys in {db} start with it (")
    assert one_error(evaluate(capsys, "0123zz", "--db", str(db))) == f"no trial key starts with '0123zz' in {db}"
    # The twin is recorded but has no policy file beside this database (nor where its record says: moved away).
    (tmp_path / "elsewhere").mkdir()
    with ResultsStore(db) as store:
        store.save_trial(dict(twin, model_path=str(tmp_path / "elsewhere" / "gone.pt")))
    message = one_error(evaluate(capsys, twin["key"], "--db", str(db)))
    assert message.startswith(f"trial {twin['key'][:16]} (ppo on CartPole-v1, seed 4, ok) has no saved policy: no ")
    assert message.endswith(f"ppo_CartPole-v1_seed4_{twin['key'][:10]}.pt")
    missing = tmp_path / "none.db"
    assert "no results database at" in one_error(evaluate(capsys, "abc123", "--db", str(missing)))
    assert one_error(evaluate(capsys, str(tmp_path / "nope.pt"))) == f"no such model file: {tmp_path / 'nope.pt'}"
    assert not missing.exists()
