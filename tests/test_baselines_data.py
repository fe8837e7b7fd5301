"""``baselines/published``: the published reference results load, are complete, and equal published.md."""

from __future__ import annotations

import pandas as pd
import pytest

from suite.claims.published import PUBLISHED_COLUMNS, load_published
from suite.envs import get_env_spec
from suite.errors import UserError

# Transcribed from shared/reference/published.md: (source, algo, env id, n_timesteps) -> (mean, std).
ZOO = {
    ("ppo", "CartPole-v1", 100_000): (500.0, 0.0),
    ("ppo", "LunarLander-v2", 1_000_000): (242.1, 31.8),
    ("ppo", "PongNoFrameskip-v4", 10_000_000): (20.989, 0.105),
    ("ppo", "Hopper-v3", 1_000_000): (2410.4, 10.0),
    ("a2c", "CartPole-v1", 500_000): (500.0, 0.0),
    ("a2c", "LunarLander-v2", 200_000): (155.8, 80.4),
    ("a2c", "PongNoFrameskip-v4", 10_000_000): (17.3, 3.2),
    ("a2c", "Hopper-v3", 1_000_000): (733.5, 376.6),
    ("dqn", "CartPole-v1", 50_000): (500.0, 0.0),
    ("dqn", "LunarLander-v2", 100_000): (154.4, 79.2),
    ("dqn", "PongNoFrameskip-v4", 10_000_000): (20.6, 0.6),
    ("sac", "Hopper-v3", 1_000_000): (2325.5, 1129.7),
    ("td3", "Hopper-v3", 1_000_000): (3606.4, 4.0),
}
CLEANRL = {
    ("ppo", "CartPole-v1", 500_000): (490.04, 6.12),
    ("ppo", "PongNoFrameskip-v4", 10_000_000): (20.36, 0.20),
    ("ppo", "Hopper-v4", 1_000_000): (2382.86, 271.74),
}
SUITE_ENV = {
    "CartPole-v1": "CartPole-v1",
    "LunarLander-v2": "LunarLander-v3",
    "PongNoFrameskip-v4": "ALE/Pong-v5",
    "Hopper-v3": "Hopper-v5",
    "Hopper-v4": "Hopper-v5",
}


@pytest.fixture(scope="module")
def published() -> pd.DataFrame:
    return load_published()


def test_every_row_is_complete(published):
    assert tuple(published.columns) == (*PUBLISHED_COLUMNS, "mean_decimals")
    assert not published.isna().any().any()
    assert (published["source"].str.len() > 0).all() and (published["std_meaning"].str.len() > 0).all()
    assert (published["n_timesteps"] > 0).all() and (published["std"] >= 0).all()
    for env_id in published["suite_env_id"]:
        get_env_spec(env_id)  # every row maps to a suite env


@pytest.mark.parametrize("source, table, std_over, n_runs", [
    ("rl-baselines3-zoo", ZOO, "episodes", 1),
    ("CleanRL", CLEANRL, "seeds", 3),
])  # fmt: skip
def test_numbers_equal_published_md(published, source, table, std_over, n_runs):
    rows = published[published["source"] == source]
    got = {(r.algo, r.env_id, r.n_timesteps): (r["mean"], r["std"]) for _, r in rows.iterrows()}
    assert got == table
    assert set(rows["std_over"]) == {std_over} and set(rows["n_runs"]) == {n_runs}
    for _, r in rows.iterrows():
        assert r.suite_env_id == SUITE_ENV[r.env_id]
        assert ("same env version" in r.version_note) == (r.env_id == r.suite_env_id)
    if source == "rl-baselines3-zoo":
        assert set(rows["source_ref"]) == {"benchmark.md@61a0d13"}
        assert set(rows["std_meaning"]) == {"std over the evaluation episodes of one trained agent"}
    else:
        assert set(rows["std_meaning"]) == {"std over 3 seeds of the mean return of the last 100 training episodes"}


def test_a_malformed_file_is_a_clear_error(tmp_path):
    (tmp_path / "bad.csv").write_text("source,algo\nx,ppo\n")
    with pytest.raises(UserError, match="bad.csv: columns"):
        load_published(tmp_path)
    with pytest.raises(UserError, match="no published results"):
        load_published(tmp_path / "missing")
