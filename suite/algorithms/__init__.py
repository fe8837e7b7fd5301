"""Algorithm implementations; importing this package registers every one of them, then their accelerators."""

import importlib

from suite.algorithms import (
    grpo,  # noqa: F401
    grpo_pairwise,  # noqa: F401
    ppo,  # noqa: F401
    ppo_adaptive_clip,  # noqa: F401
    ppo_rlvr_prm,  # noqa: F401
    sb3,  # noqa: F401
)

for _accelerated in ("grpo", "grpo_pairwise", "ppo", "ppo_rlvr_prm"):  # after the algorithms: they import them
    importlib.import_module(f"suite.accel.{_accelerated}")
