"""TensorBoard event files for one trial record, for people who watch runs live (``suite run --tensorboard DIR``).

One run directory per trial, ``<root>/<algo>/<env_label>/seed<N>``; if that directory already holds a
different trial (same algorithm, env and seed, another config or budget) the trial key's first 8 characters
are appended: ``seed<N>-<key8>``. Each directory records its trial key in ``trial_key.txt``; writing the same
trial again replaces its event files instead of duplicating its points.

Scalars (x axis: env steps):
    ``train/episode_return``, ``train/episode_length``: every finished training episode;
    ``eval/return_mean``, ``eval/return_std``, ``eval/length_mean``: every evaluation (``eval/final_return_mean``
    once, for the end-of-training evaluation);
    ``update/<metric>``: every per-update metric the algorithm logged (loss, KL, entropy, ...).
Text: ``trial`` (identity, status, error) and ``config`` (the resolved hyperparameters as JSON).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

KEY_FILE = "trial_key.txt"
"""Marker file holding the key of the trial a run directory belongs to."""


def _component(text: str) -> str:
    """A safe single path component (``ALE/Pong-v5`` -> ``ALE_Pong-v5``; brackets and ``=`` kept)."""
    return re.sub(r"[^A-Za-z0-9._=,+\[\]-]+", "_", text).strip(".") or "_"


def run_dir(record: Mapping[str, Any], root: Path) -> Path:
    """The run directory of ``record`` under ``root`` (see the module docstring)."""
    label = str(record.get("env_label") or record.get("env_id"))
    base = Path(root) / _component(str(record["algo"])) / _component(label)
    key = str(record["key"])
    plain = base / f"seed{int(record['seed'])}"
    marker = plain / KEY_FILE
    if not plain.exists() or (marker.exists() and marker.read_text(encoding="utf-8").strip() == key):
        return plain
    return base / f"seed{int(record['seed'])}-{key[:8]}"


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def write_tensorboard(record: Mapping[str, Any], root: Path) -> Path:
    """Write one trial's curves, evaluations and update metrics as TensorBoard scalars.

    Args:
        record: A trial record as :func:`suite.trial.run_trial` returns it (or :meth:`ResultsStore.get_trial`):
            ``curve`` ``{"step", "return", "length"}``, ``evals`` ``[{"step", "final", "returns", "lengths"}]``,
            ``updates`` ``[{"update", "step", <metric>: float}]``.
        root: Parent folder of all run directories (``suite run --tensorboard DIR``).

    Returns:
        The run directory written.
    """
    from torch.utils.tensorboard import SummaryWriter

    directory = run_dir(record, Path(root))
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("events.out.tfevents.*"):
        old.unlink()  # the same trial written again: replace, do not append duplicate points
    (directory / KEY_FILE).write_text(str(record["key"]) + "\n", encoding="utf-8")

    writer = SummaryWriter(log_dir=str(directory))
    try:
        curve = record.get("curve") or {}
        steps = curve.get("step") or []
        for step, ret, length in zip(steps, curve.get("return") or [], curve.get("length") or [], strict=False):
            if _finite(ret):
                writer.add_scalar("train/episode_return", float(ret), int(step))
            writer.add_scalar("train/episode_length", float(length), int(step))
        for ev in record.get("evals") or []:
            returns = np.asarray(ev.get("returns") or [], dtype=float)
            returns = returns[np.isfinite(returns)]
            if returns.size == 0:
                continue
            step = int(ev["step"])
            writer.add_scalar("eval/return_mean", float(returns.mean()), step)
            writer.add_scalar("eval/return_std", float(returns.std()), step)
            lengths = [x for x in ev.get("lengths") or [] if _finite(x)]
            if lengths:
                writer.add_scalar("eval/length_mean", float(np.mean(lengths)), step)
            if ev.get("final"):
                writer.add_scalar("eval/final_return_mean", float(returns.mean()), step)
        for update in record.get("updates") or []:
            step = int(update.get("step", update.get("update", 0)))
            for name, value in update.items():
                if name not in ("update", "step") and _finite(value):
                    writer.add_scalar(f"update/{name}", float(value), step)
        identity = {
            k: record.get(k) for k in ("key", "algo", "algo_version", "env_label", "seed", "budget", "status", "error")
        }
        writer.add_text("trial", "```\n" + json.dumps(identity, indent=2, default=str) + "\n```")
        writer.add_text(
            "config", "```\n" + json.dumps(record.get("config") or {}, indent=2, sort_keys=True, default=str) + "\n```"
        )
    finally:
        writer.close()
    return directory
