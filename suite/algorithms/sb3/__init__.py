"""``sb3-ppo``, ``sb3-a2c``, ``sb3-dqn``, ``sb3-sac``, ``sb3-td3``: the real Stable-Baselines3 classes as baselines.

A comparison is trusted only when both sides ran the same way, so these entries run SB3's own classes
(``stable_baselines3.PPO`` etc., unmodified) inside the suite's trial runner. One module per concept:

* :mod:`~suite.algorithms.sb3.config`: one frozen config dataclass per algorithm with SB3's names and SB3's
  defaults, the five flavours, and the conversion of a config into SB3 constructor arguments.
* :mod:`~suite.algorithms.sb3.zoo`: rl-baselines3-zoo's YAML in ``baselines/hyperparams/<algo>.yml`` (zoo format,
  ``policy_kwargs`` read by a safe parser) as config overrides.
* :mod:`~suite.algorithms.sb3.vec_env`: :class:`SuiteVecEnv`, the trial's own vector env (Pong gets the suite's
  Atari pipeline with the frame skip applied once, never SB3's ``AtariWrapper``) as an SB3 ``VecEnv`` that hands
  SB3 ``terminal_observation`` and ``TimeLimit.truncated`` (SB3 issue 633) and records finished episodes' raw
  scores. Sub-env ``k`` resets with ``ctx.train_seed + k`` like the suite's PPO; Python/numpy/torch are seeded
  by the runner (SB3 gets no ``seed=``, which would re-seed them); evaluation uses the runner's seeds.
* :mod:`~suite.algorithms.sb3.agent`: :class:`SB3Agent`, an SB3 policy as the suite's ``Agent``.
* :mod:`~suite.algorithms.sb3.callback`: :class:`TrialCallback` advances ``ctx.steps``, splits time into phases,
  captures SB3's ``train/*`` logger values as update rows, stops ``learn()`` at the exact budget and calls
  ``ctx.after_iteration`` for periodic evaluation.
* :mod:`~suite.algorithms.sb3.registration`: :func:`train_sb3` and the five registrations (on import).

Stable-Baselines3 itself is imported only by the ``sb3-*`` trials (``train_sb3``, :attr:`Flavour.sb3_cls`) and
by the names above that need it (loaded on first use): a trial of the suite's own algorithms never loads it.

Published reference results (``baselines/published/*.csv``) live with the claims: :mod:`suite.claims.published`.
"""

from typing import TYPE_CHECKING, Any

from suite.algorithms.sb3.config import (
    ACTIVATIONS,
    FLAVOURS,
    Flavour,
    SB3A2CConfig,
    SB3Common,
    SB3DQNConfig,
    SB3PPOConfig,
    SB3SACConfig,
    SB3TD3Config,
    policy_kwargs,
    sb3_kwargs,
    sb3_schedule,
)
from suite.algorithms.sb3.registration import train_sb3
from suite.algorithms.sb3.zoo import (
    BASELINES_DIR,
    ZOO_COMMIT,
    load_zoo_file,
    parse_policy_kwargs,
    zoo_budget,
    zoo_entry,
    zoo_entry_to_overrides,
    zoo_env_defaults,
)

if TYPE_CHECKING:
    from suite.algorithms.sb3.agent import SB3Agent, policy_factory
    from suite.algorithms.sb3.callback import TrialCallback, check_finite
    from suite.algorithms.sb3.vec_env import SuiteVecEnv

_LAZY = {
    "SB3Agent": "agent", "policy_factory": "agent", "TrialCallback": "callback", "check_finite": "callback",
    "SuiteVecEnv": "vec_env",
}  # fmt: skip
"""Names from the modules that import Stable-Baselines3: loaded on first use, so that importing the registry (every
trial does) does not load SB3 for the suite's own algorithms."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"suite.algorithms.sb3.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ACTIVATIONS",
    "BASELINES_DIR",
    "FLAVOURS",
    "ZOO_COMMIT",
    "Flavour",
    "SB3A2CConfig",
    "SB3Agent",
    "SB3Common",
    "SB3DQNConfig",
    "SB3PPOConfig",
    "SB3SACConfig",
    "SB3TD3Config",
    "SuiteVecEnv",
    "TrialCallback",
    "check_finite",
    "load_zoo_file",
    "parse_policy_kwargs",
    "policy_factory",
    "policy_kwargs",
    "sb3_kwargs",
    "sb3_schedule",
    "train_sb3",
    "zoo_budget",
    "zoo_entry",
    "zoo_entry_to_overrides",
    "zoo_env_defaults",
]
