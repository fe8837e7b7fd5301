"""Configs of the ``sb3-*`` entries: one frozen dataclass per SB3 class (SB3's constructor names and defaults),
the five flavours, and the conversion of a config into SB3 constructor arguments and ``policy_kwargs``.

Stable-Baselines3 itself is imported only when an ``sb3-*`` trial builds its model (:attr:`Flavour.sb3_cls`): the
registry lists these entries without it, so a trial of the suite's own algorithms never loads it (~22 MB of RSS
in every trial process)."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from gymnasium import spaces
from torch import nn

from suite.config import Schedule
from suite.errors import UserError

if TYPE_CHECKING:
    from stable_baselines3.common.base_class import BaseAlgorithm

ACTIVATIONS: Mapping[str, type[nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "leaky_relu": nn.LeakyReLU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
}
"""Config value of ``activation_fn`` -> torch module class."""


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
class Flavour:
    """What differs between the five entries."""

    algo: str
    sb3_class: str
    """The class's name in ``stable_baselines3`` (``PPO``, ``A2C``, ...)."""
    config_cls: type
    on_policy: bool

    @property
    def sb3_cls(self) -> type[BaseAlgorithm]:
        """The SB3 class itself (imports Stable-Baselines3 on first use)."""
        cls: type[BaseAlgorithm] = getattr(importlib.import_module("stable_baselines3"), self.sb3_class)
        return cls


FLAVOURS: Mapping[str, Flavour] = {
    "ppo": Flavour("ppo", "PPO", SB3PPOConfig, True),
    "a2c": Flavour("a2c", "A2C", SB3A2CConfig, True),
    "dqn": Flavour("dqn", "DQN", SB3DQNConfig, False),
    "sac": Flavour("sac", "SAC", SB3SACConfig, False),
    "td3": Flavour("td3", "TD3", SB3TD3Config, False),
}
"""Zoo algorithm name -> SB3 class, config dataclass and family."""

_SUITE_ONLY = {f.name for f in dataclasses.fields(SB3Common)} | {
    "net_arch", "net_arch_pi", "net_arch_vf", "net_arch_qf", "ortho_init", "log_std_init", "n_critics",
    "noise_type", "noise_std", "train_freq_unit", "optimizer_class", "learning_rate", "clip_range",
    "handle_timeout_termination",
}  # fmt: skip
"""Config fields that are not passed to the SB3 constructor as they are (policy kwargs, zoo keys, schedules)."""


# ----------------------------------------------------------------------------------------------------------------
# config -> SB3 constructor arguments


def sb3_schedule(sched: Schedule) -> float | Callable[[float], float]:
    """SB3 calls schedules with ``progress_remaining`` (1 -> 0); ours take progress (0 -> 1)."""
    if sched.kind == "constant":
        return sched.start
    return lambda progress_remaining: sched(1.0 - progress_remaining)


def policy_kwargs(flavour: Flavour, cfg: Any) -> dict[str, Any]:
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
        from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike

        kw["optimizer_class"] = RMSpropTFLike
        kw["optimizer_kwargs"] = {"eps": cfg.rms_prop_eps}
    return kw


def sb3_kwargs(flavour: Flavour, cfg: Any, action_space: spaces.Space) -> dict[str, Any]:
    """Keyword arguments of the SB3 constructor (besides policy and env) for a config."""
    kw: dict[str, Any] = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in _SUITE_ONLY}
    kw["learning_rate"] = sb3_schedule(cfg.learning_rate)
    if flavour.algo == "ppo":
        kw["clip_range"] = sb3_schedule(cfg.clip_range)
    if not flavour.on_policy:
        kw["train_freq"] = (cfg.train_freq, cfg.train_freq_unit)
        kw["replay_buffer_kwargs"] = {"handle_timeout_termination": cfg.handle_timeout_termination}
    if flavour.algo in ("sac", "td3") and cfg.noise_type != "none":
        from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise

        n = int(np.prod(action_space.shape or ()))
        noise_cls = NormalActionNoise if cfg.noise_type == "normal" else OrnsteinUhlenbeckActionNoise
        kw["action_noise"] = noise_cls(mean=np.zeros(n), sigma=cfg.noise_std * np.ones(n))
    kw["policy_kwargs"] = policy_kwargs(flavour, cfg)
    return kw
