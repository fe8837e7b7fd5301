"""Engineering knobs in their own config section, without moving any trial key: every committed record's config
rebuilds to the same dict and hash, the reference run's config hashes are what the configs resolve to, and the knobs
stay ordinary ``--set`` / ``--toggle`` fields."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

import suite.algorithms  # noqa: F401  (registers the algorithms)
from suite.config import ENGINEERING, build_config, config_identity, config_sections, config_to_dict, stable_hash
from suite.registry import get_algorithm
from suite.trial import TrialSpec

REPO = Path(__file__).resolve().parents[1]
RECORDS = sorted(REPO.glob("reports/claims/*/records.db"))
SUITE_ALGOS = ("ppo", "ppo-adaptive-clip", "ppo-rlvr-prm", "grpo", "grpo-pairwise")


def _records(db: Path, tmp_path: Path) -> list[dict]:
    from suite.store import ResultsStore

    copy = tmp_path / db.parent.name / "records.db"
    copy.parent.mkdir(parents=True)
    shutil.copy(db, copy)
    with ResultsStore(copy, create=False) as store:
        return store.trials().to_dict("records")


@pytest.mark.parametrize("db", RECORDS, ids=[p.parent.name for p in RECORDS])
def test_every_committed_records_config_rebuilds_to_the_same_dict_and_hash(db, tmp_path):
    rows = _records(db, tmp_path)
    assert rows
    for row in rows:
        stored = row["config"] if isinstance(row["config"], dict) else json.loads(row["config"])
        cfg = build_config(get_algorithm(row["algo"]).config_cls, [stored])
        assert config_to_dict(cfg) == stored, (row["algo"], row["key"])
        assert stable_hash(config_identity(cfg)) == row["config_hash"], (row["algo"], row["key"])


def test_the_reference_runs_config_hashes_are_what_the_configs_resolve_to():
    with open(REPO / "results" / "reference" / "runs.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    checked = 0
    for row in rows:
        algo = get_algorithm(row["algo"])
        if row["algo_version"] != algo.version:
            continue
        cfg = algo.make_config(row["env_id"])
        assert stable_hash(config_identity(cfg)) == row["config_hash"], (row["algo"], row["env_id"])
        checked += 1
    assert checked >= len(SUITE_ALGOS)


KNOBS = {
    "ppo": {"vectorization", "rollout_storage", "gae_chunk", "grad_accumulation", "obs_storage_dtype"},
    "ppo-adaptive-clip": {"vectorization", "rollout_storage", "gae_chunk", "grad_accumulation", "obs_storage_dtype"},
    "ppo-rlvr-prm": {
        "vectorization",
        "rollout_storage",
        "gae_chunk",
        "grad_accumulation",
        "obs_storage_dtype",
        "hand_derived",
    },  # fmt: skip
    "grpo": {"vectorization", "rollout_storage", "grad_accumulation", "hand_derived"},
    "grpo-pairwise": {"vectorization", "hand_derived"},
}


@pytest.mark.parametrize("algo", SUITE_ALGOS)
def test_the_engineering_knobs_are_a_section_of_their_own(algo):
    sections = config_sections(get_algorithm(algo).config_cls)
    assert set(sections[ENGINEERING]) == KNOBS[algo]
    assert not set(sections["hyperparameters"]) & KNOBS[algo]
    assert "learning_rate" in sections["hyperparameters"]


def test_a_knob_is_still_an_ordinary_field_of_the_key():
    base = TrialSpec("ppo", "CartPole-v1", 0, 1000).resolve()
    torch_storage = TrialSpec("ppo", "CartPole-v1", 0, 1000, overrides={"rollout_storage": "torch"}).resolve()
    assert torch_storage.config.rollout_storage == "torch" and torch_storage.key != base.key
    assert config_to_dict(torch_storage.config)["rollout_storage"] == "torch"


def test_the_reference_runs_trial_keys_are_what_its_studies_resolve_to():
    """Every trial of the committed reference (``results/reference/``) resolves to the key it was recorded under, in
    the kernel mode it ran in: neither the knobs' section nor the ``device`` field (``cpu`` by default) moves a key."""
    import json

    from suite.study import load_study
    from suite.trial import trial_kernels

    with open(REPO / "results" / "reference" / "runs.csv", newline="") as fh:
        recorded = {row["key"] for row in csv.DictReader(fh)}
    mode = json.loads((REPO / "results" / "reference" / "provenance.json").read_text()).get("kernels", "native")
    with trial_kernels(mode):
        keys = [
            spec.resolve().key
            for path in sorted((REPO / "results" / "reference" / "studies").glob("*.toml"))
            for spec in load_study(str(path)).trials()
        ]
    assert len(keys) >= 8 and set(keys) <= recorded
