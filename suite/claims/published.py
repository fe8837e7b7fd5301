"""Published reference results (rl-baselines3-zoo ``benchmark.md``, CleanRL) as data: ``baselines/published/*.csv``.

The numbers are claims like any other: the ``zoo-benchmark`` and ``cleanrl-benchmark`` claim sets name the rows
the suite's envs and algorithms cover, and :func:`load_published` is how they (and tests) read them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from suite.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

PUBLISHED_DIR = Path(__file__).resolve().parents[2] / "baselines" / "published"
"""``baselines/published/`` at the repository root (the package is installed editable)."""

PUBLISHED_COLUMNS = (
    "source", "source_ref", "algo", "env_id", "suite_env_id", "n_timesteps", "mean", "std", "std_over",
    "std_meaning", "n_runs", "version_note", "n_eval_episodes", "eval_protocol",
)  # fmt: skip
"""Columns of every ``baselines/published/*.csv`` file (see ``baselines/README.md``)."""

EVAL_PROTOCOLS = ("deterministic", "sampled", "training episodes")
"""How a published number was scored: the agent's mode, sampled actions, or the training episodes themselves."""


def load_published(directory: Path | None = None) -> pd.DataFrame:
    """Published reference results (rl-baselines3-zoo ``benchmark.md``, CleanRL), one row per (source, algo, env).

    Columns: ``source`` and ``source_ref`` (document and commit), ``algo`` (the source's name, e.g. ``ppo``),
    ``env_id`` (the source's id and version) and ``suite_env_id`` (the suite env it is compared with; see
    ``version_note``), ``n_timesteps`` (the budget), ``mean``/``std``, ``std_over`` (``episodes``: over the
    evaluation episodes of one agent; ``seeds``: over independent runs) with ``std_meaning`` in words, and
    ``n_runs`` (trained agents behind the row), ``n_eval_episodes`` (episodes behind one agent's mean) and
    ``eval_protocol`` (:data:`EVAL_PROTOCOLS`); ``mean_decimals`` is added: the places the mean was written with.

    Raises:
        UserError: a missing directory, a file with other columns, or an empty required cell.
    """
    import pandas as pd

    directory = directory or PUBLISHED_DIR
    files = sorted(Path(directory).glob("*.csv"))
    if not files:
        raise UserError(f"no published results (*.csv) in {directory}")
    frames = []
    for path in files:
        df = pd.read_csv(path, dtype={"n_timesteps": "int64", "mean": "float64", "std": "float64", "n_runs": "int64",
                                      "n_eval_episodes": "int64"})  # fmt: skip
        if tuple(df.columns) != PUBLISHED_COLUMNS:
            raise UserError(f"{path}: columns {list(df.columns)}; expected {list(PUBLISHED_COLUMNS)}")
        empty = df.columns[df.isna().any()].tolist()
        if empty:
            raise UserError(f"{path}: empty cells in {empty}")
        bad = sorted(set(df["std_over"]) - {"episodes", "seeds"})
        if bad:
            raise UserError(f"{path}: std_over {bad}; allowed: episodes, seeds")
        bad = sorted(set(df["eval_protocol"]) - set(EVAL_PROTOCOLS))
        if bad:
            raise UserError(f"{path}: eval_protocol {bad}; allowed: {', '.join(EVAL_PROTOCOLS)}")
        written = pd.read_csv(path, dtype=str)["mean"]
        df["mean_decimals"] = [len(t.partition(".")[2]) for t in written]
        frames.append(df)
    return pd.concat(frames, ignore_index=True)
