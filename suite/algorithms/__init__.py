"""Algorithm implementations; importing this package registers every one of them."""

from suite.algorithms import (
    grpo,  # noqa: F401
    grpo_pairwise,  # noqa: F401
    ppo,  # noqa: F401
    ppo_adaptive_clip,  # noqa: F401
    ppo_rlvr_prm,  # noqa: F401
    sb3,  # noqa: F401
)
