"""The seed layout of a trial: which reset seeds training and evaluation use, and how a process is seeded.

Training and evaluation seeds are disjoint by construction:

    training env resets:  seed * 10_000 + k for sub-env k (PPO family), or draws in [0, 2**30) from the trial's
                          generator (algorithms that reset per group, like GRPO);
    evaluation episodes:  2**30 + seed * 1_000 + i for episode i, identical for every algorithm, so two
                          algorithms with the same trial seed are evaluated from the same start states.
"""

from __future__ import annotations

import random

import numpy as np
import torch

TRAIN_SEED_STRIDE = 10_000
"""Sub-env ``k`` of trial seed ``s`` resets with ``s * TRAIN_SEED_STRIDE + k``."""
EVAL_SEED_BASE = 2**30
"""Evaluation seeds start here; training draws stay below it."""
EVAL_SEED_STRIDE = 1_000
"""Evaluation episode ``i`` of trial seed ``s`` resets with ``EVAL_SEED_BASE + s * EVAL_SEED_STRIDE + i``."""


def eval_seeds(seed: int, n_episodes: int) -> list[int]:
    """The reset seeds of a trial's evaluation episodes (the same for every algorithm)."""
    return [EVAL_SEED_BASE + seed * EVAL_SEED_STRIDE + i for i in range(n_episodes)]


def seed_everything(seed: int, threads: int) -> None:
    """Seed Python, numpy and torch and fix torch's thread count (bitwise reproducibility needs both)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
