"""Studies: seed specs, tiers, expansion into trials, file errors."""

import subprocess
import sys

import pytest

from suite.errors import UserError
from suite.study import list_studies, load_study, parse_seeds, parse_study


@pytest.mark.parametrize(
    ("spec", "seeds"), [("0-4", [0, 1, 2, 3, 4]), ("0,3", [0, 3]), ("0-2,7", [0, 1, 2, 7]), ("5", [5]), ([2, 1], [2, 1])]
)
def test_parse_seeds(spec, seeds):
    assert parse_seeds(spec) == seeds


@pytest.mark.parametrize("bad", ["", "a", "3-1", "-1", "0-", "1;2"])
def test_bad_seed_spec_is_a_user_error(bad):
    with pytest.raises(UserError, match="seed"):
        parse_seeds(bad)


def test_default_study_expands_every_fitting_algorithm_with_tier_budgets():
    study = load_study("default")
    assert study.tier == "quick" and study.seeds == (0, 1, 2)
    trials = study.trials()
    ppo = [t for t in trials if t.algo == "ppo"]
    assert len(ppo) == 9  # 3 envs x 3 seeds
    assert {t.total_timesteps for t in ppo if t.env_id == "CartPole-v1"} == {100_000}
    assert {t.total_timesteps for t in study.trials(tier="smoke") if t.env_id == "CartPole-v1"} == {2048}
    code = [t for t in ppo if t.env_kwargs]
    assert code and all(t.env_kwargs == {"language": "code", "target": "12345"} for t in code)


def test_filters_and_replacements():
    study = load_study("default")
    trials = study.trials(algos=["ppo"], envs=["CartPole-v1"], seeds=[7], steps=999)
    assert [(t.algo, t.env_id, t.seed, t.total_timesteps) for t in trials] == [("ppo", "CartPole-v1", 7, 999)]


def test_per_algorithm_budget_tables():
    study = parse_study(
        {"envs": ["CartPole-v1"], "algos": ["ppo"], "budgets": {"paper": {"CartPole-v1": {"default": 5, "ppo": 9}}}}
    )
    assert study.budget("paper", "CartPole-v1", "ppo") == 9
    assert study.budget("paper", "CartPole-v1", "other") == 5


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"envs": ["CartPole-v1"], "tier": "huge"}, "unknown tier 'huge'"),
        ({"envs": ["Nope-v0"]}, "unknown env"),
        ({"envs": []}, "at least one env"),
        ({"envs": ["CartPole-v1"], "algos": ["nope"]}, "unknown algorithm 'nope'"),
        ({"envs": ["CartPole-v1"], "colour": 1}, "unknown study keys"),
    ],
)
def test_bad_study_is_a_user_error(data, message):
    with pytest.raises(UserError, match=message):
        parse_study(data)


def test_unreadable_and_unknown_study_files(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("envs = [")
    with pytest.raises(UserError, match="cannot read"):
        load_study(str(bad))
    with pytest.raises(UserError, match="unknown study 'nope'"):
        load_study("nope")
    assert "default" in list_studies()


def test_budgets_for_envs_the_tiers_do_not_list():
    adhoc = parse_study({"envs": ["Acrobot-v1"], "algos": ["ppo"]})
    with pytest.raises(
        UserError,
        match="no 'quick' budget for Acrobot-v1: neither study 'adhoc', suite/data/tiers.toml nor its env spec gives one; "
        'pass --steps N, or add \\[budgets.quick\\] "Acrobot-v1" = N to the study file',
    ):
        adhoc.trials()
    assert [t.total_timesteps for t in adhoc.trials(steps=3000, seeds=[0])] == [3000]
    given = parse_study({"envs": ["Acrobot-v1"], "algos": ["ppo"], "budgets": {"quick": {"Acrobot-v1": 5000}}})
    assert {t.total_timesteps for t in given.trials()} == {5000}


def test_a_shipped_studys_budgets_read_alone_equal_the_loaded_studys() -> None:
    """What a report reads (no plugins, no algorithm imported) is what ``suite run`` plans with."""
    from suite.study import shipped_study_budgets

    for name in list_studies():
        assert shipped_study_budgets(name) == dict(load_study(name).budgets), name


def test_reading_a_study_for_its_budgets_imports_no_torch() -> None:
    code = (
        "import sys; from suite.study import shipped_study_budgets; shipped_study_budgets('default'); "
        "from suite.report.build import _study_tiers; assert _study_tiers('default'); "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
