"""Algorithm implementations; importing this package registers every one of them."""

from suite.algorithms import grpo  # noqa: F401
from suite.algorithms import grpo_pairwise  # noqa: F401
from suite.algorithms import ppo  # noqa: F401
from suite.algorithms import ppo_adaptive_clip  # noqa: F401
from suite.algorithms import ppo_rlvr_prm  # noqa: F401
from suite.algorithms import sb3  # noqa: F401
