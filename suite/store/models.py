"""Saved policies: their file names, and finding a trial's file from its path, its key or a prefix of the key.

A trial saves its trained policy next to the results database, in ``models/`` (``results/models/`` by default), as
``<algo>_<env>_seed<k>_<short key>.pt`` (:func:`model_filename`): a person can tell the files of a study apart by
name, and the short key keeps two trials of the same algorithm, env and seed (other config, other budget) apart.
The full trial key is stored inside the file (``payload["key"]``, :func:`suite.trial.save_model`). Files of older
runs are named ``<key>.pt``; :func:`find_model_file` and ``suite evaluate`` still find and load them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from suite.errors import UserError

MODELS_DIR = "models"
"""Folder of saved policies, next to the results database."""

SHORT_KEY_CHARS = 10
"""Characters of the trial key in a model file's name (16**10 values: apart for any study's trials)."""

_UNSAFE = re.compile(r"[^A-Za-z0-9.-]+")


def filename_safe(text: str) -> str:
    """``text`` with every run of characters other than letters, digits, ``.`` and ``-`` made one ``-``
    (``ALE/Pong-v5`` -> ``ALE-Pong-v5``); never empty, never a leading dot."""
    return _UNSAFE.sub("-", str(text)).strip("-.") or "x"


def model_filename(algo: str, env_id: str, seed: int, key: str) -> str:
    """A saved policy's file name: ``<algo>_<env>_seed<k>_<short key>.pt`` (e.g.
    ``ppo_CartPole-v1_seed0_3fa85f6457.pt``, ``sb3-dqn_ALE-Pong-v5_seed2_9c1e0b77d2.pt``)."""
    return f"{filename_safe(algo)}_{filename_safe(env_id)}_seed{int(seed)}_{filename_safe(key[:SHORT_KEY_CHARS])}.pt"


def models_dir(db_path: str | os.PathLike[str]) -> Path:
    """Where the trials recorded in ``db_path`` save their policies."""
    return Path(db_path).parent / MODELS_DIR


def find_model_file(directory: Path, record: Mapping[str, Any]) -> Path | None:
    """The saved policy of a trial record (``key, algo, env_id, seed``) in ``directory``: its named file, else an
    older ``<key>.pt``; None when neither exists."""
    named = directory / model_filename(record["algo"], record["env_id"], int(record["seed"]), str(record["key"]))
    return next((p for p in (named, directory / f"{record['key']}.pt") if p.is_file()), None)


def resolve_model(model: str, db: str | os.PathLike[str] | None) -> Path:
    """What ``suite evaluate MODEL`` names: a model file's path, or a trial key or a unique prefix of one.

    A path that exists is used as it is. Otherwise ``model`` is looked up among the trial keys of the results
    database (``db``; None: ``$SUITE_DB`` or ``results/suite.db``), and the policy file of the one trial it
    names is found in the ``models/`` folder beside it (:func:`find_model_file`), else where its record says.

    Raises:
        UserError: one line: no such file and no database, no trial key starting with ``model``, more than one
            (with the first few), or the trial has no saved policy.
    """
    from suite.store import ResultsStore, default_db_path

    path = Path(model).expanduser()
    if path.is_file():
        return path
    if path.suffix == ".pt" or os.sep in model:
        raise UserError(f"no such model file: {model}")
    db_path = default_db_path(db)
    if not db_path.is_file():
        raise UserError(
            f"{model!r} is neither a model file nor a trial key: no results database at {db_path} to look the key up "
            "in (give --db, or the model file's path)"
        )
    with ResultsStore(db_path, create=False) as store:
        keys = sorted(k for k in store.finished_keys() if k.startswith(model))
        if not keys:
            raise UserError(f"no trial key starts with {model!r} in {db_path}")
        if len(keys) > 1 and model not in keys:
            shown = ", ".join(k[:16] for k in keys[:3]) + (", ..." if len(keys) > 3 else "")
            raise UserError(
                f"{model!r} is ambiguous: {len(keys)} trial keys in {db_path} start with it ({shown}); give more of it"
            )
        key = model if model in keys else keys[0]
        record = store.trials(keys=[key]).iloc[0].to_dict()
    found = find_model_file(models_dir(db_path), record)
    if found is None and isinstance(record.get("model_path"), str) and Path(record["model_path"]).is_file():
        found = Path(record["model_path"])  # saved elsewhere (a database moved away from its models)
    if found is None:
        name = model_filename(record["algo"], record["env_id"], int(record["seed"]), key)
        raise UserError(
            f"trial {key[:16]} ({record['algo']} on {record['env_label']}, seed {record['seed']}, {record['status']}) "
            f"has no saved policy: no {models_dir(db_path) / name}"
        )
    return found
