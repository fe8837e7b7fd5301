"""The public API for plugins: what an algorithm or env outside the suite is written against.

A plugin imports from here only (``from suite import api``), never from the modules behind it, so the suite can
move and optimise its internals without breaking plugins. Every name but :data:`API_VERSION`, :data:`STABLE`,
:data:`UNSTABLE` and :func:`require_api` is a re-export; its documentation is on the original
(``help(api.RolloutCollector)``). ``docs/plugins.md`` is the guide. A plugin written against this module gets the
suite's guarantees without extra code: seeding and the evaluation protocol (:class:`TrialContext`), records,
reports, claims and regression gates (every trial of a registered algorithm is an ordinary trial).

Versioning (:data:`API_VERSION`, ``MAJOR.MINOR``):

* **Stable** (:data:`STABLE`): kept compatible within a major version. A name is not removed, a parameter is
  not removed or re-ordered, a documented behaviour or array shape does not change; new optional parameters
  and new names bump the minor version. Breaking one of them bumps the major version.
* **Unstable** (:data:`UNSTABLE`): exported because they are useful (the actor-critic family's trainer and
  loss, to subclass PPO), but their signatures may change in any minor version: the shared core is being
  optimised. Pin the suite's version if you use them.

A plugin that needs a major version says so at import with :func:`require_api`; a mismatch is reported as
that plugin failing to import, naming it, before anything runs.

Determinism contract for plugin algorithms: draw every random number from the seeded generators (torch's and
numpy's global ones, seeded by the trial, or ``ctx.seed_rng`` / ``ctx.draw_seeds``), build envs only with
``ctx.make_envs`` and reset them with ``ctx.train_seed`` or drawn seeds, and bump ``version`` in
:func:`register` whenever a change can move results (the version is part of every trial's key).
"""

from __future__ import annotations

from suite.accel import Accelerator, Evaluated, ParityCase, fingerprint, register_accelerator
from suite.accel.derivatives import LossDerivatives, kernel_evaluated, ppo_loss_derivatives
from suite.algorithms.actor_critic import ActorCriticTrainer, actor_critic_policy
from suite.algorithms.core import (
    GradientStepper,
    Minibatch,
    RewardNormalizer,
    Rollout,
    RolloutCollector,
    check_finite_params,
    compute_gae,
    explained_variance,
    net_config,
)
from suite.algorithms.networks import ActorCritic, NetConfig
from suite.algorithms.ppo import ActorCriticConfig, ppo_policy_value_loss
from suite.config import Schedule, build_config, config_to_dict, load_toml
from suite.context import PHASES, Agent, TrialContext
from suite.envs.factory import make_vec_env
from suite.envs.infos import final_observations, finished_episodes
from suite.envs.specs import EnvSpec, get_env_spec, register_env_spec
from suite.errors import Diverged, UserError
from suite.parity import check_fingerprint, check_parity
from suite.plugins import load_entry_points  # noqa: F401  (importing it installs the look-ups' plugin loader)
from suite.registry import AlgorithmSpec, get_algorithm, register
from suite.seeding import eval_seeds

API_VERSION = "1.1"
"""``MAJOR.MINOR`` of this module (see the module doc for what each part promises)."""

STABLE = (
    # registering
    "register", "AlgorithmSpec", "get_algorithm", "EnvSpec", "register_env_spec", "get_env_spec",
    # the trial an algorithm runs in
    "TrialContext", "Agent", "PHASES", "eval_seeds",
    # configs
    "Schedule", "build_config", "config_to_dict", "load_toml",
    # the on-policy core: rollout, advantages, update
    "RolloutCollector", "Rollout", "compute_gae", "GradientStepper", "check_finite_params", "explained_variance",
    "ActorCritic", "NetConfig", "net_config",
    # envs (read step infos of ctx.make_envs envs)
    "make_vec_env", "finished_episodes", "final_observations",
    # accelerators: a faster path of a loss, checked against its specification (docs/plugins.md)
    "Accelerator", "ParityCase", "Evaluated", "register_accelerator", "fingerprint", "check_parity",
    "check_fingerprint",
    # errors
    "UserError", "Diverged",
    # this module
    "API_VERSION", "require_api",
)  # fmt: skip
"""Names kept compatible within a major :data:`API_VERSION`."""

UNSTABLE = (
    "ActorCriticConfig", "ActorCriticTrainer", "ppo_policy_value_loss", "actor_critic_policy", "Minibatch",
    "RewardNormalizer", "ppo_loss_derivatives", "kernel_evaluated", "LossDerivatives",
)  # fmt: skip
"""Names that may change in any minor version (the actor-critic family's internals)."""

__all__ = [  # STABLE + UNSTABLE (a test checks they agree)
    "API_VERSION", "PHASES", "Accelerator", "ActorCritic", "ActorCriticConfig", "ActorCriticTrainer", "Agent",
    "AlgorithmSpec", "Diverged", "EnvSpec", "Evaluated", "GradientStepper", "LossDerivatives", "Minibatch", "NetConfig",
    "ParityCase", "RewardNormalizer", "Rollout", "RolloutCollector", "Schedule", "TrialContext", "UserError",
    "actor_critic_policy", "build_config", "check_finite_params", "check_fingerprint", "check_parity", "compute_gae",
    "config_to_dict", "eval_seeds", "explained_variance", "final_observations", "finished_episodes", "fingerprint",
    "get_algorithm", "get_env_spec", "kernel_evaluated", "load_toml", "make_vec_env", "net_config",
    "ppo_loss_derivatives", "ppo_policy_value_loss", "register", "register_accelerator", "register_env_spec",
    "require_api",
]  # fmt: skip


def require_api(major: int) -> None:
    """Fail (at the plugin's import) unless this module's major version is ``major``.

    Args:
        major: The major :data:`API_VERSION` the plugin was written against.

    Raises:
        ImportError: another major version; the plugin loader reports it as that plugin failing to import.
    """
    have = int(API_VERSION.split(".")[0])
    if have != major:
        raise ImportError(f"written for suite.api {major}.x, but this suite provides suite.api {API_VERSION}")
