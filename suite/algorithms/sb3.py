"""``sb3-ppo``, ``sb3-a2c``, ``sb3-dqn``, ``sb3-sac``, ``sb3-td3``: the real Stable-Baselines3 classes as baselines.

A comparison is trusted only when both sides ran the same way, so these entries run SB3's own classes
(``stable_baselines3.PPO`` etc., unmodified) inside the suite's trial runner:

* **Envs**: the trial's own vector env (:meth:`TrialContext.make_envs`, so Pong gets the suite's Atari pipeline
  with the frame skip applied once, never SB3's ``AtariWrapper``) behind :class:`SuiteVecEnv`, an SB3
  ``VecEnv`` adapter that hands SB3 ``terminal_observation`` and ``TimeLimit.truncated`` so SB3's own
  time-limit bootstrapping works (SB3 issue 633), and records finished episodes' raw scores.
* **Seeds**: sub-env ``k`` resets with ``ctx.train_seed + k`` like the suite's PPO; Python/numpy/torch are seeded by
  the runner (SB3 gets no ``seed=``, which would re-seed them); evaluation uses the runner's seeds.
* **Measurements**: :class:`TrialCallback` advances ``ctx.steps``, splits time into rollout and update, captures
  SB3's ``train/*`` logger values as update rows and calls ``ctx.after_iteration`` for periodic evaluation.
* **Hyperparameters**: rl-baselines3-zoo's YAML in ``baselines/hyperparams/<algo>.yml`` (zoo format, read with a
  safe parser for ``policy_kwargs``), converted into one frozen config dataclass per algorithm with SB3's names
  and SB3's defaults.
* **Published numbers**: :func:`load_published` reads ``baselines/published/*.csv``.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3 import A2C, DQN, PPO, SAC, TD3
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike
from stable_baselines3.common.vec_env import VecEnv, VecNormalize
from torch import nn

from suite.algorithms.core import Diverged
from suite.config import Schedule
from suite.envs import final_observations, finished_episodes, get_env_spec
from suite.errors import UserError
from suite.registry import register

if TYPE_CHECKING:
    import pandas as pd

    from suite.trial import TrialContext

BASELINES_DIR = Path(__file__).resolve().parents[2] / "baselines"
"""``baselines/`` at the repository root (the package is installed editable)."""
ZOO_COMMIT = "61a0d13"
"""rl-baselines3-zoo commit of the hyperparameters and of ``benchmark.md`` (published.md)."""

ACTIVATIONS: Mapping[str, type[nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "leaky_relu": nn.LeakyReLU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
}
"""Config value of ``activation_fn`` -> torch module class."""

_ZOO_NAMES: Mapping[str, str] = {
    "nn.Tanh": "tanh",
    "nn.ReLU": "relu",
    "nn.ELU": "elu",
    "nn.LeakyReLU": "leaky_relu",
    "nn.GELU": "gelu",
    "nn.SiLU": "silu",
    "RMSpropTFLike": "RMSpropTFLike",
}
"""Names the zoo writes inside ``policy_kwargs`` strings that the safe parser accepts (``th.nn.X`` = ``nn.X``)."""


# ----------------------------------------------------------------------------------------------------------------
# configs: one frozen dataclass per algorithm, SB3 constructor names and SB3 defaults


@dataclass(frozen=True)
class SB3Common:
    """Fields every ``sb3-*`` config has (the suite's side of the run; not SB3 constructor arguments)."""

    policy: Literal["MlpPolicy", "CnnPolicy"] = "MlpPolicy"
    """SB3 policy alias (``CnnPolicy`` for Atari frames)."""
    n_envs: int = 1
    """Parallel training envs (the zoo's ``n_envs``)."""
    normalize: bool = False
    """The zoo's ``normalize: true``: ``VecNormalize`` of observations and rewards (gamma = the config's gamma);
    evaluation normalises observations with the training statistics, frozen."""
    activation_fn: str | None = None
    """Hidden activation (``tanh``, ``relu``, ``elu``, ``leaky_relu``, ``gelu``, ``silu``); None = SB3's default."""
    vectorization: str = "auto"
    """How the suite vectorises the envs (``auto``, ``sync``, ``async``), as for the suite's own algorithms."""

    def __post_init__(self) -> None:
        if self.n_envs < 1:
            raise ValueError(f"n_envs must be >= 1, got {self.n_envs}")
        if self.activation_fn is not None and self.activation_fn not in ACTIVATIONS:
            raise ValueError(f"activation_fn {self.activation_fn!r} is not one of {', '.join(ACTIVATIONS)}")


@dataclass(frozen=True)
class SB3PPOConfig(SB3Common):
    """``stable_baselines3.PPO`` arguments (defaults: SB3's) plus the policy kwargs the zoo uses."""

    learning_rate: Schedule = Schedule("constant", 3e-4, 3e-4)
    """Adam step size; the zoo's ``lin_X`` is ``{schedule="linear", start=X, end=0}``."""
    n_steps: int = 2048
    """Steps per env per rollout."""
    batch_size: int = 64
    """Minibatch size."""
    n_epochs: int = 10
    """Passes over each rollout."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_range: Schedule = Schedule("constant", 0.2, 0.2)
    """PPO clip epsilon (a schedule)."""
    clip_range_vf: float | None = None
    """Value clip range; None = no value clipping."""
    normalize_advantage: bool = True
    """Normalise advantages per minibatch."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    use_sde: bool = False
    """Generalised state-dependent exploration (continuous actions only)."""
    sde_sample_freq: int = -1
    """Steps between gSDE noise resamples (-1: once per rollout)."""
    target_kl: float | None = None
    """Early-stop threshold on approx KL; None = never."""
    net_arch_pi: tuple[int, ...] | None = None
    """Policy MLP hidden sizes (``policy_kwargs net_arch pi``); None = SB3's default for the policy class."""
    net_arch_vf: tuple[int, ...] | None = None
    """Value MLP hidden sizes (``net_arch vf``); set together with ``net_arch_pi``."""
    ortho_init: bool = True
    """Orthogonal initialisation (SB3 default True)."""
    log_std_init: float = 0.0
    """Initial log std of the Gaussian policy (continuous actions)."""


@dataclass(frozen=True)
class SB3A2CConfig(SB3Common):
    """``stable_baselines3.A2C`` arguments (defaults: SB3's) plus the policy kwargs the zoo uses."""

    learning_rate: Schedule = Schedule("constant", 7e-4, 7e-4)
    """Optimiser step size (a schedule)."""
    n_steps: int = 5
    """Steps per env per update."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 1.0
    """GAE lambda (1.0 = plain n-step returns)."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    rms_prop_eps: float = 1e-5
    """RMSprop epsilon (also the eps of ``optimizer_class=RMSpropTFLike``, the zoo's ``optimizer_kwargs eps``)."""
    use_rms_prop: bool = True
    """RMSprop (True) or Adam."""
    use_sde: bool = False
    """Generalised state-dependent exploration (continuous actions only)."""
    sde_sample_freq: int = -1
    """Steps between gSDE noise resamples."""
    normalize_advantage: bool = False
    """Normalise advantages."""
    optimizer_class: Literal["RMSprop", "RMSpropTFLike"] = "RMSprop"
    """With ``use_rms_prop``: torch's RMSprop (SB3 default) or SB3's TF-style one (the zoo's Atari entry)."""
    net_arch_pi: tuple[int, ...] | None = None
    """Policy MLP hidden sizes; None = SB3's default for the policy class."""
    net_arch_vf: tuple[int, ...] | None = None
    """Value MLP hidden sizes; set together with ``net_arch_pi``."""
    ortho_init: bool = True
    """Orthogonal initialisation."""
    log_std_init: float = 0.0
    """Initial log std of the Gaussian policy (continuous actions)."""


def _check_replay_buffer(cfg: Any) -> None:
    # SB3's ReplayBuffer raises on this pair deep inside learn(); say it before anything runs, with the fix.
    if cfg.optimize_memory_usage and cfg.handle_timeout_termination:
        raise ValueError(
            "optimize_memory_usage = true needs handle_timeout_termination = false (SB3's replay buffer refuses "
            "both, SB3 issue 934)"
        )


@dataclass(frozen=True)
class SB3DQNConfig(SB3Common):
    """``stable_baselines3.DQN`` arguments (defaults: SB3's)."""

    learning_rate: Schedule = Schedule("constant", 1e-4, 1e-4)
    """Adam step size (a schedule)."""
    buffer_size: int = 1_000_000
    """Replay buffer capacity (transitions)."""
    learning_starts: int = 100
    """Env steps of random actions before learning starts."""
    batch_size: int = 32
    """Minibatch size."""
    tau: float = 1.0
    """Target network soft-update coefficient (1 = hard copy)."""
    gamma: float = 0.99
    """Discount factor."""
    train_freq: int = 4
    """Train every ``train_freq`` units of ``train_freq_unit``."""
    train_freq_unit: Literal["step", "episode"] = "step"
    """Unit of ``train_freq`` (the zoo writes ``[1, "episode"]``)."""
    gradient_steps: int = 1
    """Gradient steps per training call (-1: as many as env steps collected)."""
    optimize_memory_usage: bool = False
    """SB3's memory-efficient buffer (incompatible with timeout handling, SB3 issue 934)."""
    handle_timeout_termination: bool = True
    """The replay buffer's time-limit handling (``replay_buffer_kwargs``); must be false with
    ``optimize_memory_usage``, which SB3 refuses it with (SB3 issue 934)."""
    n_steps: int = 1
    """n-step returns."""
    target_update_interval: int = 10_000
    """Env steps between target network updates."""
    exploration_fraction: float = 0.1
    """Fraction of training over which epsilon decays."""
    exploration_initial_eps: float = 1.0
    """Initial epsilon."""
    exploration_final_eps: float = 0.05
    """Final epsilon."""
    max_grad_norm: float = 10.0
    """Global gradient-norm clip."""
    net_arch: tuple[int, ...] | None = None
    """Q-network hidden sizes; None = SB3's default for the policy class."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_replay_buffer(self)


@dataclass(frozen=True)
class _OffPolicyContinuous(SB3Common):
    """Fields shared by SAC and TD3 (SB3's names; defaults where the two agree)."""

    buffer_size: int = 1_000_000
    """Replay buffer capacity (transitions)."""
    learning_starts: int = 100
    """Env steps of random actions before learning starts."""
    batch_size: int = 256
    """Minibatch size."""
    tau: float = 0.005
    """Target networks' soft-update coefficient."""
    gamma: float = 0.99
    """Discount factor."""
    train_freq: int = 1
    """Train every ``train_freq`` units of ``train_freq_unit``."""
    train_freq_unit: Literal["step", "episode"] = "step"
    """Unit of ``train_freq``."""
    gradient_steps: int = 1
    """Gradient steps per training call (-1: as many as env steps collected)."""
    optimize_memory_usage: bool = False
    """SB3's memory-efficient buffer (incompatible with timeout handling, SB3 issue 934)."""
    handle_timeout_termination: bool = True
    """The replay buffer's time-limit handling (``replay_buffer_kwargs``); must be false with
    ``optimize_memory_usage``, which SB3 refuses it with (SB3 issue 934)."""
    n_steps: int = 1
    """n-step returns."""
    noise_type: Literal["none", "normal", "ornstein-uhlenbeck"] = "none"
    """The zoo's exploration-noise key: ``normal`` = ``NormalActionNoise(0, noise_std)``."""
    noise_std: float = 0.1
    """Std of the exploration noise on the [-1, 1]-scaled action (the zoo's ``noise_std``)."""
    net_arch_pi: tuple[int, ...] | None = None
    """Actor hidden sizes; None = SB3's default (SAC [256, 256], TD3 [400, 300])."""
    net_arch_qf: tuple[int, ...] | None = None
    """Critic hidden sizes; set together with ``net_arch_pi``."""
    n_critics: int = 2
    """Number of critics (SB3 default 2)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_replay_buffer(self)


@dataclass(frozen=True)
class SB3SACConfig(_OffPolicyContinuous):
    """``stable_baselines3.SAC`` arguments (defaults: SB3's)."""

    learning_rate: Schedule = Schedule("constant", 3e-4, 3e-4)
    """Adam step size for actor, critics and entropy coefficient."""
    ent_coef: float | str = "auto"
    """Entropy coefficient: a number, ``auto`` (learned, init 1.0) or ``auto_X`` (learned, init X)."""
    target_update_interval: int = 1
    """Gradient steps between target updates."""
    target_entropy: float | str = "auto"
    """Target entropy for the learned coefficient (``auto`` = -dim(action))."""
    use_sde: bool = False
    """Generalised state-dependent exploration."""
    sde_sample_freq: int = -1
    """Steps between gSDE noise resamples."""
    use_sde_at_warmup: bool = False
    """Use gSDE instead of uniform sampling during warm-up."""
    log_std_init: float = -3.0
    """Initial log std (only used with gSDE; SB3 default -3)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("ent_coef", "target_entropy"):
            value = getattr(self, name)
            if isinstance(value, str) and value != "auto" and not (name == "ent_coef" and value.startswith("auto_")):
                raise ValueError(f"{name} must be a number or 'auto'{' or auto_X' if name == 'ent_coef' else ''}")


@dataclass(frozen=True)
class SB3TD3Config(_OffPolicyContinuous):
    """``stable_baselines3.TD3`` arguments (defaults: SB3's)."""

    learning_rate: Schedule = Schedule("constant", 1e-3, 1e-3)
    """Adam step size for actor and critics."""
    policy_delay: int = 2
    """Critic updates per actor (and target) update."""
    target_policy_noise: float = 0.2
    """Std of the target policy smoothing noise."""
    target_noise_clip: float = 0.5
    """Clip of the target policy smoothing noise."""


@dataclass(frozen=True)
class _Flavour:
    """What differs between the five entries."""

    algo: str
    sb3_cls: type[BaseAlgorithm]
    config_cls: type
    on_policy: bool


FLAVOURS: Mapping[str, _Flavour] = {
    "ppo": _Flavour("ppo", PPO, SB3PPOConfig, True),
    "a2c": _Flavour("a2c", A2C, SB3A2CConfig, True),
    "dqn": _Flavour("dqn", DQN, SB3DQNConfig, False),
    "sac": _Flavour("sac", SAC, SB3SACConfig, False),
    "td3": _Flavour("td3", TD3, SB3TD3Config, False),
}
"""Zoo algorithm name -> SB3 class, config dataclass and family."""

_SUITE_ONLY = {f.name for f in dataclasses.fields(SB3Common)} | {
    "net_arch", "net_arch_pi", "net_arch_vf", "net_arch_qf", "ortho_init", "log_std_init", "n_critics",
    "noise_type", "noise_std", "train_freq_unit", "optimizer_class", "learning_rate", "clip_range",
    "handle_timeout_termination",
}  # fmt: skip
"""Config fields that are not passed to the SB3 constructor as they are (policy kwargs, zoo keys, schedules)."""


# ----------------------------------------------------------------------------------------------------------------
# the zoo's YAML


def parse_policy_kwargs(text: str) -> dict[str, Any]:
    """Parse a zoo ``policy_kwargs`` string such as ``"dict(net_arch=[256, 256], activation_fn=nn.ReLU)"``.

    The string is parsed with :func:`ast.parse` and walked by a whitelist: ``dict(...)`` with keyword arguments,
    ``{...}`` literals, lists, tuples, numbers, strings, booleans, None and the names in ``_ZOO_NAMES``
    (returned as canonical strings, e.g. ``nn.ReLU`` -> ``"relu"``). Nothing is ever evaluated.

    Raises:
        UserError: anything outside the whitelist (names the construct), or not a dict at the top.
    """
    try:
        tree = ast.parse(" ".join(text.split()), mode="eval")
    except SyntaxError as exc:
        raise UserError(f"policy_kwargs {text!r} is not valid: {exc.msg}") from None
    value = _literal(tree.body, text)
    if not isinstance(value, dict):
        raise UserError(f"policy_kwargs must be dict(...), got {text!r}")
    return value


def _literal(node: ast.AST, text: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float | str | bool | type(None)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _literal(node.operand, text)
        if isinstance(inner, int | float) and not isinstance(inner, bool):
            return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(e, text) for e in node.elts]
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise UserError(f"policy_kwargs {text!r}: ** unpacking is not allowed")
        return {_literal(k, text): _literal(v, text) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        if any(kw.arg is None for kw in node.keywords):
            raise UserError(f"policy_kwargs {text!r}: ** unpacking is not allowed")
        return {kw.arg: _literal(kw.value, text) for kw in node.keywords}
    if isinstance(node, ast.Name | ast.Attribute):
        dotted = ast.unparse(node).removeprefix("th.").removeprefix("torch.")
        if dotted in _ZOO_NAMES:
            return _ZOO_NAMES[dotted]
    raise UserError(
        f"policy_kwargs {text!r}: {ast.unparse(node)!r} is not allowed (only dict(...), lists, numbers, strings and "
        f"the names {', '.join(_ZOO_NAMES)})"
    )


def _schedule_value(value: Any, key: str) -> Any:
    """The zoo's ``lin_X`` (linear from X to 0 over training, rl_zoo3 ``linear_schedule``) as a suite schedule."""
    if isinstance(value, str) and value.startswith("lin_"):
        try:
            start = float(value[4:])
        except ValueError:
            raise UserError(f"{key}: bad schedule {value!r}; expected lin_<number>, e.g. lin_0.001") from None
        return {"schedule": "linear", "start": start, "end": 0.0}
    if isinstance(value, str):
        raise UserError(f"{key}: {value!r} is not a number or lin_<number> (write floats as !!float 1e-3 in YAML)")
    return value


def _arch(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise UserError(f"policy_kwargs {what}: expected a list of layer sizes, got {value!r}")
    return value


def _policy_kwargs_to_fields(flavour: _Flavour, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Map parsed ``policy_kwargs`` onto config fields (``net_arch`` -> ``net_arch_pi``/``_vf``/``_qf``...)."""
    second = {"ppo": "vf", "a2c": "vf", "sac": "qf", "td3": "qf"}.get(flavour.algo)
    allowed = {
        "ppo": {"net_arch", "activation_fn", "ortho_init", "log_std_init"},
        "a2c": {"net_arch", "activation_fn", "ortho_init", "log_std_init", "optimizer_class", "optimizer_kwargs"},
        "dqn": {"net_arch", "activation_fn"},
        "sac": {"net_arch", "activation_fn", "log_std_init", "n_critics"},
        "td3": {"net_arch", "activation_fn", "n_critics"},
    }[flavour.algo]
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise UserError(f"sb3-{flavour.algo}: unsupported policy_kwargs {unknown}; supported: {', '.join(sorted(allowed))}")
    out: dict[str, Any] = {
        k: v for k, v in kwargs.items() if k in {"activation_fn", "ortho_init", "log_std_init", "n_critics"}
    }
    if "net_arch" in kwargs:
        arch = kwargs["net_arch"]
        # SB3 < 1.8 wrote [dict(pi=..., vf=...)] (no shared layers); SB3 >= 1.8 a dict or one list for both heads.
        if isinstance(arch, list) and len(arch) == 1 and isinstance(arch[0], dict):
            arch = arch[0]
        if second is None:
            out["net_arch"] = _arch(arch, "net_arch")
        elif isinstance(arch, dict):
            if set(arch) != {"pi", second}:
                raise UserError(f"policy_kwargs net_arch: expected dict(pi=[...], {second}=[...]), got {arch!r}")
            out["net_arch_pi"], out[f"net_arch_{second}"] = _arch(arch["pi"], "pi"), _arch(arch[second], second)
        else:
            out["net_arch_pi"] = out[f"net_arch_{second}"] = _arch(arch, "net_arch")
    if "optimizer_class" in kwargs:
        out["optimizer_class"] = kwargs["optimizer_class"]
    if "optimizer_kwargs" in kwargs:
        opt = kwargs["optimizer_kwargs"]
        if not isinstance(opt, dict) or set(opt) - {"eps"}:
            raise UserError(f"policy_kwargs optimizer_kwargs: only dict(eps=...) is supported, got {opt!r}")
        if "eps" in opt:
            out["rms_prop_eps"] = opt["eps"]
    return out


_ARCH_FIELDS = frozenset({"net_arch", "net_arch_pi", "net_arch_vf", "net_arch_qf"})  # set via policy_kwargs only
_ATARI_WRAPPER = "stable_baselines3.common.atari_wrappers.AtariWrapper"
_ATARI_FRAME_STACK = 4  # suite/envs.py wrap_atari_agent_side: FrameStackObservation(env, 4)


def zoo_entry_to_overrides(algo: str, env_id: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """Translate one zoo YAML entry into config overrides (SB3 names, suite schedules).

    ``n_timesteps`` is dropped (budgets live in the study tiers); ``env_wrapper``/``frame_stack`` must describe
    what the suite's env layer already does (the Atari pipeline, 4 frames) and are dropped.

    Raises:
        UserError: an unknown key (the allowed ones are listed), an env wrapper the suite does not apply, a
            malformed schedule or ``policy_kwargs``.
    """
    flavour = FLAVOURS[algo]
    fields = {f.name for f in dataclasses.fields(flavour.config_cls)}
    atari = get_env_spec(env_id).family == "atari"
    out: dict[str, Any] = {}
    for key, value in entry.items():
        if key == "n_timesteps":
            continue
        if key == "env_wrapper":
            wrappers = value if isinstance(value, list) else [value]
            if not atari or wrappers != [_ATARI_WRAPPER]:
                raise UserError(
                    f"{algo}.yml {env_id}: env_wrapper {value!r} is not supported; the suite builds its envs itself "
                    f"(only {_ATARI_WRAPPER} on Atari ids, which maps to the suite's Atari pipeline)"
                )
        elif key == "frame_stack":
            if not atari or value != _ATARI_FRAME_STACK:
                raise UserError(f"{algo}.yml {env_id}: frame_stack {value!r}; the suite stacks 4 frames on Atari only")
        elif key == "normalize":
            if not isinstance(value, bool):
                raise UserError(f"{algo}.yml {env_id}: normalize must be true or false, got {value!r}")
            out["normalize"] = value
        elif key == "policy_kwargs":
            if not isinstance(value, str):
                raise UserError(f'{algo}.yml {env_id}: policy_kwargs must be a string like "dict(net_arch=[64, 64])"')
            out.update(_policy_kwargs_to_fields(flavour, parse_policy_kwargs(value)))
        elif key == "train_freq" and isinstance(value, list):
            if len(value) != 2 or value[1] not in ("step", "episode"):
                raise UserError(f'{algo}.yml {env_id}: train_freq {value!r}; expected N or [N, "step"|"episode"]')
            out["train_freq"], out["train_freq_unit"] = value
        elif key in ("learning_rate", "clip_range"):
            out[key] = _schedule_value(value, key)
        elif key in fields and key not in _ARCH_FIELDS:
            out[key] = value
        else:
            allowed = sorted(fields - _ARCH_FIELDS | {"n_timesteps", "env_wrapper", "frame_stack", "policy_kwargs"})
            raise UserError(f"unknown key {key!r} in {algo}.yml [{env_id}]; allowed: {', '.join(allowed)}")
    return out


@functools.cache
def load_zoo_file(algo: str) -> dict[str, dict[str, Any]]:
    """``baselines/hyperparams/<algo>.yml`` as ``{zoo key: entry}`` (``yaml.safe_load``; anchors allowed).

    Raises:
        UserError: missing or malformed file.
    """
    import yaml

    path = BASELINES_DIR / "hyperparams" / f"{algo}.yml"
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise UserError(f"hyperparameter file not found: {path}") from None
    except yaml.YAMLError as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise UserError(f"{path}: expected a mapping of env id -> hyperparameters")
    return data


def zoo_entry(algo: str, env_id: str) -> tuple[str, dict[str, Any]] | None:
    """The zoo entry used for ``env_id``: its own key, else ``atari`` for Atari ids (as the zoo does); None if none."""
    table = load_zoo_file(algo)
    if env_id in table:
        return env_id, table[env_id]
    if get_env_spec(env_id).family == "atari" and "atari" in table:
        return "atari", table["atari"]
    return None


def zoo_env_defaults(algo: str, env_id: str) -> dict[str, Any]:
    """Config overrides for ``env_id`` from the zoo YAML ({} when the file has no entry: SB3's defaults)."""
    found = zoo_entry(algo, env_id)
    return {} if found is None else zoo_entry_to_overrides(algo, env_id, found[1])


def zoo_budget(algo: str, env_id: str) -> int | None:
    """The zoo's ``n_timesteps`` for ``env_id`` (its reference budget), or None."""
    found = zoo_entry(algo, env_id)
    return None if found is None or "n_timesteps" not in found[1] else int(found[1]["n_timesteps"])


# ----------------------------------------------------------------------------------------------------------------
# config -> SB3 constructor arguments


def _sb3_schedule(sched: Schedule) -> float | Callable[[float], float]:
    """SB3 calls schedules with ``progress_remaining`` (1 -> 0); ours take progress (0 -> 1)."""
    if sched.kind == "constant":
        return sched.start
    return lambda progress_remaining: sched(1.0 - progress_remaining)


def policy_kwargs(flavour: _Flavour, cfg: Any) -> dict[str, Any]:
    """SB3 ``policy_kwargs`` for a config (only what differs from SB3's policy defaults is set)."""
    kw: dict[str, Any] = {}
    if cfg.activation_fn is not None:
        kw["activation_fn"] = ACTIVATIONS[cfg.activation_fn]
    if flavour.algo == "dqn":
        if cfg.net_arch is not None:
            kw["net_arch"] = list(cfg.net_arch)
    else:
        second = "vf" if flavour.on_policy else "qf"
        pi, other = cfg.net_arch_pi, getattr(cfg, f"net_arch_{second}")
        if (pi is None) != (other is None):
            raise UserError(f"sb3-{flavour.algo}: set net_arch_pi and net_arch_{second} together (or neither)")
        if pi is not None:
            kw["net_arch"] = {"pi": list(pi), second: list(other)}
    if flavour.on_policy:
        if cfg.ortho_init is not True:
            kw["ortho_init"] = cfg.ortho_init
        if cfg.log_std_init != 0.0:
            kw["log_std_init"] = cfg.log_std_init
    if flavour.algo == "sac" and cfg.log_std_init != -3.0:
        kw["log_std_init"] = cfg.log_std_init
    if flavour.algo in ("sac", "td3") and cfg.n_critics != 2:
        kw["n_critics"] = cfg.n_critics
    if flavour.algo == "a2c" and cfg.use_rms_prop and cfg.optimizer_class == "RMSpropTFLike":
        # As the zoo's atari entry: dict(optimizer_class=RMSpropTFLike, optimizer_kwargs=dict(eps=1e-5)).
        kw["optimizer_class"] = RMSpropTFLike
        kw["optimizer_kwargs"] = {"eps": cfg.rms_prop_eps}
    return kw


def sb3_kwargs(flavour: _Flavour, cfg: Any, action_space: spaces.Space) -> dict[str, Any]:
    """Keyword arguments of the SB3 constructor (besides policy and env) for a config."""
    kw: dict[str, Any] = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in _SUITE_ONLY}
    kw["learning_rate"] = _sb3_schedule(cfg.learning_rate)
    if flavour.algo == "ppo":
        kw["clip_range"] = _sb3_schedule(cfg.clip_range)
    if not flavour.on_policy:
        kw["train_freq"] = (cfg.train_freq, cfg.train_freq_unit)
        kw["replay_buffer_kwargs"] = {"handle_timeout_termination": cfg.handle_timeout_termination}
    if flavour.algo in ("sac", "td3") and cfg.noise_type != "none":
        n = int(np.prod(action_space.shape or ()))
        noise_cls = NormalActionNoise if cfg.noise_type == "normal" else OrnsteinUhlenbeckActionNoise
        kw["action_noise"] = noise_cls(mean=np.zeros(n), sigma=cfg.noise_std * np.ones(n))
    kw["policy_kwargs"] = policy_kwargs(flavour, cfg)
    return kw


# ----------------------------------------------------------------------------------------------------------------
# the env adapter


class SuiteVecEnv(VecEnv):
    """A suite vector env (:func:`suite.envs.make_vec_env`, SAME_STEP autoreset) seen as an SB3 ``VecEnv``.

    ``step_wait`` returns what SB3's ``DummyVecEnv`` returns: observations whose finished rows already hold the
    next episode's first observation, float32 rewards, ``dones = terminated | truncated`` and one info dict per
    env with ``terminal_observation`` (the last real observation) and ``TimeLimit.truncated`` (truncated and
    not terminated) for every finished row, which SB3 uses to bootstrap time-limit truncations (SB3 issue 633)
    and to store the right next observation in replay buffers. Finished episodes' raw scores are recorded on
    the trial context at the global env step where they ended.

    Seeding: sub-env ``k`` is reset with ``ctx.train_seed + k`` on SB3's first ``reset`` (through SB3's own
    ``seed()``/``_seeds`` mechanism, so a later ``seed(s)`` is honoured too).
    """

    def __init__(self, envs: Any, ctx: Any) -> None:
        self.envs, self.ctx = envs, ctx
        super().__init__(envs.num_envs, envs.single_observation_space, envs.single_action_space)
        self.seed(ctx.train_seed)
        self.total_steps = 0
        """Env steps taken by all sub-envs together."""
        self._actions: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        seeds = self._seeds
        seed: int | list[int | None] | None
        if all(s is None for s in seeds):
            seed = None
        elif seeds[0] is not None and list(seeds) == [seeds[0] + k for k in range(self.num_envs)]:
            seed = int(seeds[0])  # an int seeds sub-env k with seed + k (the CartPole fast path takes ints only)
        else:
            seed = [None if s is None else int(s) for s in seeds]
        options = self._options[0] if self._options else {}
        if any(o != options for o in self._options):
            raise NotImplementedError("per-env reset options differ; the suite's vector envs take one options dict")
        obs, _ = self.envs.reset(seed=seed, options=options or None)
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, reward, terminated, truncated, info = self.envs.step(self._actions)
        n = self.num_envs
        self.total_steps += n
        terminated, truncated = np.asarray(terminated, dtype=bool), np.asarray(truncated, dtype=bool)
        dones = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(n)]
        if dones.any():
            _, final_obs = final_observations(info, n)
            for i in np.flatnonzero(dones):
                infos[i]["terminal_observation"] = final_obs[i] if final_obs is not None else obs[i]
                infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
            mask, returns, lengths = finished_episodes(info, n)
            if mask.any():
                self.ctx.record_episodes(self.total_steps, returns[mask], lengths[mask])
        return obs, np.asarray(reward, dtype=np.float32), dones, infos

    def close(self) -> None:
        """Nothing to do: the trial runner closes the envs it built."""

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        # SB3 asks for render_mode at construction; the vector env's own attribute serves every sub-env.
        return [getattr(self.envs, attr_name)] * len(list(self._get_indices(indices)))

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        raise NotImplementedError("SuiteVecEnv does not forward set_attr")

    def env_method(self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any) -> list[Any]:
        raise NotImplementedError("SuiteVecEnv does not forward env_method")

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False] * len(list(self._get_indices(indices)))


# ----------------------------------------------------------------------------------------------------------------
# the agent a trial returns


class SB3Agent(nn.Module):
    """An SB3 policy as the suite's ``Agent``: ``predict`` for evaluation, ``state_dict`` for saving.

    With ``normalize`` the observation statistics of the training ``VecNormalize`` are kept as buffers
    (``obs_mean``, ``obs_var``); evaluation normalises with them and never updates them (the zoo evaluates
    the same way: ``VecNormalize`` loaded with ``training=False``).
    """

    obs_mean: torch.Tensor
    obs_var: torch.Tensor

    def __init__(self, policy: nn.Module, obs_shape: tuple[int, ...], normalize: bool, clip_obs: float = 10.0,
                 epsilon: float = 1e-8) -> None:  # fmt: skip
        super().__init__()
        self.policy = policy
        self.normalize = normalize
        self.clip_obs, self.epsilon = clip_obs, epsilon
        self._live: VecNormalize | None = None
        if normalize:
            self.register_buffer("obs_mean", torch.zeros(obs_shape, dtype=torch.float64))
            self.register_buffer("obs_var", torch.ones(obs_shape, dtype=torch.float64))

    def attach(self, vec_normalize: VecNormalize) -> None:
        """Follow a training ``VecNormalize``'s statistics (synced into the buffers before use)."""
        self._live = vec_normalize
        self.clip_obs, self.epsilon = vec_normalize.clip_obs, vec_normalize.epsilon

    def _sync(self) -> None:
        if self._live is not None:
            rms: Any = self._live.obs_rms  # a RunningMeanStd for Box observations
            self.obs_mean.copy_(torch.from_numpy(np.asarray(rms.mean, dtype=np.float64)))
            self.obs_var.copy_(torch.from_numpy(np.asarray(rms.var, dtype=np.float64)))

    def normalize_obs(self, obs: np.ndarray) -> np.ndarray:
        """SB3 ``VecNormalize.normalize_obs`` with the frozen statistics: clip((obs - mean) / sqrt(var + eps))."""
        self._sync()
        mean, var = self.obs_mean.numpy(), self.obs_var.numpy()
        return np.clip((obs - mean) / np.sqrt(var + self.epsilon), -self.clip_obs, self.clip_obs).astype(np.float32)

    def predict(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """Env-ready actions ``(B, *action_shape)`` for raw observations ``(B, *obs_shape)`` (SB3's own predict,
        which clips Box actions to the bounds or unsquashes them)."""
        if self.normalize:
            obs = self.normalize_obs(obs)
        actions, _ = self.policy.predict(obs, deterministic=deterministic)  # type: ignore[operator]
        return actions

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        if self.normalize:
            self._sync()
        return super().state_dict(*args, **kwargs)


def _policy_factory(algo: str) -> Callable[[Any, Any, Any], SB3Agent]:
    flavour = FLAVOURS[algo]

    def build(observation_space: Any, action_space: Any, cfg: Any) -> SB3Agent:
        """Rebuild a saved ``sb3-*`` policy (SB3's policy class for ``cfg.policy`` with the config's kwargs)."""
        policy_cls = flavour.sb3_cls.policy_aliases[cfg.policy]
        kw = policy_kwargs(flavour, cfg)
        if flavour.algo in ("ppo", "a2c", "sac"):
            kw["use_sde"] = cfg.use_sde
        policy = policy_cls(observation_space, action_space, lambda _: 0.0, **kw)
        return SB3Agent(policy, observation_space.shape, cfg.normalize)

    return build


# ----------------------------------------------------------------------------------------------------------------
# the callback: steps, times, update rows, periodic evaluation


class TrialCallback(BaseCallback):
    """Connects an SB3 ``learn()`` to the trial context.

    Time between ``on_rollout_start`` and ``on_rollout_end`` is the "rollout" phase (for on-policy SB3 it includes
    the advantages, which SB3 computes at the end of its collection); the rest of ``learn()`` (SB3's ``train()``
    and its bookkeeping) is "update"; evaluation is timed by the context itself. The budget is exact, as for
    the suite's algorithms: ``on_step`` stops ``learn()`` once ``ctx.total_timesteps`` env steps are taken (an
    on-policy rollout that the budget ends in the middle of is not trained on; one that the budget ends exactly
    at is). At each rollout
    start (i.e. after the previous update, the point where the suite's own algorithms call it) the callback sets
    ``ctx.steps``, records SB3's ``train/*`` logger values as an update row (on-policy: every update; off-policy,
    which updates every few steps: at most once per ``record_every`` env steps) and calls
    ``ctx.after_iteration`` (on-policy: every iteration; off-policy: every ``record_every`` steps and whenever an
    evaluation step is crossed, so evaluations happen at the same steps as for the suite's algorithms).
    """

    def __init__(self, ctx: TrialContext, agent: SB3Agent, on_policy: bool, record_every: int = 1000) -> None:
        super().__init__(verbose=0)
        self.ctx, self.agent = ctx, agent
        self.on_policy = on_policy
        self.record_every = 0 if on_policy else record_every
        self.eval_freq = ctx.resolved.eval_freq
        self._recorded_updates = 0
        self._last_record = 0
        self._last_check = 0

    def _switch(self, phase: str | None) -> None:
        if phase is None:
            self.ctx.end_phase()
        else:
            self.ctx.begin_phase(phase)

    def _on_training_start(self) -> None:
        self._switch("rollout")  # SB3's first env reset, as for the suite's own algorithms

    def _on_rollout_start(self) -> None:
        self._switch(None)
        self._sync(final=False)
        self._switch("rollout")

    def _on_step(self) -> bool:
        if self.model.num_timesteps < self.ctx.total_timesteps:
            return True
        if self.on_policy and self.locals.get("n_steps", 0) + 1 >= self.model.n_steps:  # type: ignore[attr-defined]
            return True  # this step completes the rollout: let SB3 train on it, then learn() ends by itself
        return False

    def _on_rollout_end(self) -> None:
        self._switch("update")

    def _on_training_end(self) -> None:
        self._switch(None)
        self._sync(final=True)

    def _sync(self, final: bool) -> None:
        ctx, steps = self.ctx, int(self.model.num_timesteps)
        ctx.steps = steps
        n_updates = int(getattr(self.model, "_n_updates", 0))
        if n_updates != self._recorded_updates and (final or steps - self._last_record >= self.record_every):
            self._record(n_updates)
            self._last_record = steps
        crossed = steps // self.eval_freq > self._last_check // self.eval_freq
        if final or self.record_every == 0 or crossed or steps - self._last_check >= self.record_every:
            self._last_check = steps
            ctx.after_iteration(self.agent)

    def _record(self, n_updates: int) -> None:
        metrics = {
            k.removeprefix("train/"): float(v)
            for k, v in self.model.logger.name_to_value.items()
            if k.startswith("train/") and isinstance(v, int | float | np.number)
        }
        self._recorded_updates = n_updates
        bad = sorted(k for k, v in metrics.items() if not math.isfinite(v))
        if bad:
            raise Diverged(f"non-finite SB3 training values {bad}")
        _check_finite(self.model.policy)
        self.ctx.record_update(metrics)


def _check_finite(module: nn.Module) -> None:
    for name, p in module.named_parameters():
        if not torch.isfinite(p).all():
            raise Diverged(f"parameter {name} became non-finite")


# ----------------------------------------------------------------------------------------------------------------
# training


def train_sb3(algo: str, ctx: TrialContext, cfg: Any) -> SB3Agent:
    """Train SB3's ``algo`` class inside a trial and return its policy as an :class:`SB3Agent`."""
    flavour = FLAVOURS[algo]
    envs = ctx.make_envs(cfg.n_envs, vectorization=cfg.vectorization)
    venv: VecEnv = SuiteVecEnv(envs, ctx)
    if cfg.normalize:
        # The zoo's `normalize: true`: VecNormalize(norm_obs=True, norm_reward=True, gamma=<the algorithm's gamma>).
        venv = VecNormalize(venv, norm_obs=True, norm_reward=True, gamma=cfg.gamma)
    # No seed=: it would re-seed Python/numpy/torch with another value than the runner's seed_everything did.
    model = flavour.sb3_cls(cfg.policy, venv, verbose=0, device="cpu", **sb3_kwargs(flavour, cfg, venv.action_space))
    model.set_logger(Logger(folder=None, output_formats=[]))  # values are read by TrialCallback, nothing printed
    agent = SB3Agent(model.policy, venv.observation_space.shape or (), cfg.normalize)
    if isinstance(venv, VecNormalize):
        agent.attach(venv)
    callback = TrialCallback(ctx, agent, on_policy=isinstance(model, OnPolicyAlgorithm))
    try:
        model.learn(total_timesteps=ctx.total_timesteps, callback=callback)
    except ValueError as exc:
        # NaN parameters surface as torch.distributions argument errors: report them as divergence, like the
        # suite's own algorithms do.
        try:
            _check_finite(model.policy)
        except Diverged as div:
            raise div from exc
        raise
    ctx.steps = int(model.num_timesteps)
    return agent


def _register(algo: str, *, summary: str, action_spaces: tuple[str, ...], observations: tuple[str, ...],
              notes: str = "") -> None:  # fmt: skip
    flavour = FLAVOURS[algo]

    def train(ctx: Any, cfg: Any) -> SB3Agent:
        return train_sb3(algo, ctx, cfg)

    train.__name__ = train.__qualname__ = f"train_sb3_{algo}"
    train.__doc__ = f"Train ``stable_baselines3.{flavour.sb3_cls.__name__}`` inside a trial."
    register(
        f"sb3-{algo}",
        version="1.1.0",
        summary=summary,
        reference=(
            f"stable-baselines3 {flavour.sb3_cls.__name__} (Raffin et al. 2021, JMLR 22(268)); hyperparameters: "
            f"rl-baselines3-zoo hyperparams/{algo}.yml @ {ZOO_COMMIT} (baselines/hyperparams/{algo}.yml)"
        ),
        action_spaces=action_spaces,
        observations=observations,
        config=flavour.config_cls,
        hyperparams=functools.partial(zoo_env_defaults, algo),
        notes=(
            "The real SB3 class, run through the suite's trial runner: the suite's envs (Atari: the suite's "
            "pipeline, not SB3's AtariWrapper; no FireReset), seeds, evaluation and records. " + notes
        ),
        extra={"peer": "stable-baselines3", "sb3_class": flavour.sb3_cls.__name__, "zoo_commit": ZOO_COMMIT},
        policy_factory=_policy_factory(algo),
    )(train)


_register(
    "ppo",
    summary="Stable-Baselines3 PPO with the zoo's hyperparameters (peer baseline for ppo)",
    action_spaces=("discrete", "box"),
    observations=("vector", "image"),
)
_register(
    "a2c",
    summary="Stable-Baselines3 A2C with the zoo's hyperparameters",
    action_spaces=("discrete", "box"),
    observations=("vector", "image"),
)
_register(
    "dqn",
    summary="Stable-Baselines3 DQN with the zoo's hyperparameters",
    action_spaces=("discrete",),
    observations=("vector", "image"),
    notes="Atari: optimize_memory_usage off (SB3 refuses it with timeout handling, SB3 issue 934).",
)
_register(
    "sac",
    summary="Stable-Baselines3 SAC with the zoo's hyperparameters",
    action_spaces=("box",),
    observations=("vector",),
)
_register(
    "td3",
    summary="Stable-Baselines3 TD3 with the zoo's hyperparameters",
    action_spaces=("box",),
    observations=("vector",),
)


# ----------------------------------------------------------------------------------------------------------------
# published reference results

PUBLISHED_COLUMNS = (
    "source", "source_ref", "algo", "env_id", "suite_env_id", "n_timesteps", "mean", "std", "std_over",
    "std_meaning", "n_runs", "version_note",
)  # fmt: skip
"""Columns of every ``baselines/published/*.csv`` file (see ``baselines/README.md``)."""


def load_published(directory: Path | None = None) -> pd.DataFrame:
    """Published reference results (rl-baselines3-zoo ``benchmark.md``, CleanRL), one row per (source, algo, env).

    Columns: ``source`` and ``source_ref`` (document and commit), ``algo`` (the source's name, e.g. ``ppo``),
    ``env_id`` (the source's id and version) and ``suite_env_id`` (the suite env it is compared with; see
    ``version_note``), ``n_timesteps`` (the budget), ``mean``/``std``, ``std_over`` (``episodes``: over the
    evaluation episodes of one agent; ``seeds``: over independent runs) with ``std_meaning`` in words, and
    ``n_runs`` (trained agents behind the row).

    Raises:
        UserError: a missing directory, a file with other columns, or an empty required cell.
    """
    import pandas as pd

    directory = directory or BASELINES_DIR / "published"
    files = sorted(Path(directory).glob("*.csv"))
    if not files:
        raise UserError(f"no published results (*.csv) in {directory}")
    frames = []
    for path in files:
        df = pd.read_csv(path, dtype={"n_timesteps": "int64", "mean": "float64", "std": "float64", "n_runs": "int64"})
        if tuple(df.columns) != PUBLISHED_COLUMNS:
            raise UserError(f"{path}: columns {list(df.columns)}; expected {list(PUBLISHED_COLUMNS)}")
        empty = df.columns[df.isna().any()].tolist()
        if empty:
            raise UserError(f"{path}: empty cells in {empty}")
        bad = sorted(set(df["std_over"]) - {"episodes", "seeds"})
        if bad:
            raise UserError(f"{path}: std_over {bad}; allowed: episodes, seeds")
        frames.append(df)
    return pd.concat(frames, ignore_index=True)
