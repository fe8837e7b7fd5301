"""Algorithm implementations; importing this package registers every one of them, then their accelerators."""

from suite.algorithms import (
    grpo,  # noqa: F401
    grpo_pairwise,  # noqa: F401
    ppo,  # noqa: F401
    ppo_adaptive_clip,  # noqa: F401
    ppo_rlvr_prm,  # noqa: F401
    sb3,  # noqa: F401
)

# isort: off
# the accelerators after the algorithms they accelerate (they import them)
import suite.accel.grpo  # noqa: E402, F401
import suite.accel.grpo_pairwise  # noqa: E402, F401
import suite.accel.ppo  # noqa: E402, F401
import suite.accel.ppo_rlvr_prm  # noqa: E402, F401

# isort: on
