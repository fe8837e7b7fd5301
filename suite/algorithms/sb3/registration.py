"""Training and registration of ``sb3-ppo``, ``sb3-a2c``, ``sb3-dqn``, ``sb3-sac`` and ``sb3-td3``."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from suite.algorithms.core import Diverged
from suite.algorithms.sb3.config import FLAVOURS, sb3_kwargs
from suite.algorithms.sb3.zoo import ZOO_COMMIT, zoo_env_defaults
from suite.registry import register

if TYPE_CHECKING:
    from stable_baselines3.common.vec_env import VecEnv

    from suite.algorithms.sb3.agent import SB3Agent
    from suite.trial import TrialContext


def train_sb3(algo: str, ctx: TrialContext, cfg: Any) -> SB3Agent:
    """Train SB3's ``algo`` class inside a trial and return its policy as an :class:`SB3Agent`."""
    # Stable-Baselines3 is imported here, by the sb3-* trials that use it (see suite.algorithms.sb3.config)
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
    from stable_baselines3.common.vec_env import VecNormalize

    from suite.algorithms.sb3.agent import SB3Agent
    from suite.algorithms.sb3.callback import TrialCallback, check_finite
    from suite.algorithms.sb3.vec_env import SuiteVecEnv

    flavour = FLAVOURS[algo]
    envs = ctx.make_envs(cfg.n_envs, vectorization=cfg.vectorization)
    venv: VecEnv = SuiteVecEnv(envs, ctx)
    if cfg.normalize:
        # The zoo's `normalize: true`: VecNormalize(norm_obs=True, norm_reward=True, gamma=<the algorithm's gamma>).
        venv = VecNormalize(venv, norm_obs=True, norm_reward=True, gamma=cfg.gamma)
    # No seed=: it would re-seed Python/numpy/torch with another value than the runner's seed_everything did.
    model = flavour.sb3_cls(cfg.policy, venv, verbose=0, device="cpu", **sb3_kwargs(flavour, cfg, venv.action_space))
    model.set_logger(Logger(folder=None, output_formats=[]))  # values are read by TrialCallback, nothing printed
    if getattr(ctx.resolved.spec, "kernels", "native") == "portable":
        ctx.record_metric("sb3_fused_adam", fuse_adam(model.policy, getattr(model, "ent_coef_optimizer", None)))
        held = hold_rmsprop(model.policy)
        if held:  # only where there is one (sb3-a2c): the other sb3-* records stay as they were
            ctx.record_metric("sb3_held_rmsprop", held)
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
            check_finite(model.policy)
        except Diverged as div:
            raise div from exc
        raise
    ctx.steps = int(model.num_timesteps)
    return agent


def fuse_adam(policy: Any, *more: Any) -> int:
    """Make every Adam optimizer of ``policy`` (and ``more`` optimizers, e.g. SAC's entropy coefficient's, which is
    the model's, not the policy's) step with torch's fused CPU kernel (same algorithm, betas and eps), before its
    first step; return how many. For portable trials only (:mod:`suite.kernels`): torch's default (foreach) Adam
    takes ``exp_avg_sq.sqrt()`` through torch's float square root, which is not correctly rounded and which no kernel
    variable holds, so its last bits follow the CPU; the fused kernel runs on ATen's held vector code, whose square
    root is IEEE-exact. Native trials keep SB3's optimizer untouched (their bits and keys)."""
    import torch

    fused = 0
    optimizers = [getattr(module, "optimizer", None) for module in policy.modules()] + list(more)
    for optimizer in optimizers:
        if type(optimizer) is torch.optim.Adam and not optimizer.state:
            for group in optimizer.param_groups:
                group["fused"], group["foreach"] = True, False
            optimizer.defaults["fused"], optimizer.defaults["foreach"] = True, False
            fused += 1
    return fused


def hold_rmsprop(policy: Any) -> int:
    """Make every RMSprop optimizer of ``policy`` (torch's, SB3's default for A2C, and SB3's ``RMSpropTFLike``, the
    zoo's for Atari) take its square root with numpy, before its first step; return how many. For portable trials
    only: torch's float ``sqrt`` (also ``_foreach_sqrt`` and ``pow(x, 0.5)``) is not correctly rounded (12,861 of
    65,536 floats off numpy's on one host) and gives other bits on another CPU even with the portable variables, and
    torch has no fused RMSprop; numpy's ``sqrt`` is the IEEE one of every x86-64 CPU. Everything else is torch's own
    step, operation for operation (:class:`HeldRMSprop`, :class:`HeldRMSpropTFLike`)."""
    import torch
    from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike

    held = 0
    for module in policy.modules():
        optimizer = getattr(module, "optimizer", None)
        if optimizer is None or optimizer.state:
            continue
        if type(optimizer) is torch.optim.RMSprop:
            optimizer.__class__ = _held_classes()[0]
        elif type(optimizer) is RMSpropTFLike:
            optimizer.__class__ = _held_classes()[1]
        else:
            continue
        held += 1
    return held


def exact_sqrt(t: Any) -> Any:
    """The square root of float tensor ``t`` correctly rounded on every CPU (numpy's IEEE ``sqrt``), as a new tensor."""
    import numpy as np
    import torch

    return torch.from_numpy(np.sqrt(t.detach().numpy()))


@functools.cache
def _held_classes() -> tuple[type, type]:
    """:class:`HeldRMSprop` and :class:`HeldRMSpropTFLike`, built when first needed (torch and SB3 load with the
    sb3-* trials, not with the registry)."""
    import torch
    from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike

    class HeldStep:
        """The RMSprop step both optimizers share (torch's single-tensor step: ``square_avg.mul_(alpha).addcmul_(grad,
        grad, value=1 - alpha)``, then ``param.addcdiv_(grad, avg, value=-lr)`` or through the momentum buffer, bit
        for bit the foreach path on one CPU), with the square root of :func:`exact_sqrt`. What differs between torch's
        and SB3's is in the hooks: the first step's state, the centred running mean, and where epsilon goes."""

        state: Any
        param_groups: list[dict[str, Any]]

        def first_state(self, p: Any) -> dict[str, Any]:
            raise NotImplementedError  # each optimizer below says how its state starts

        def update_grad_avg(self, grad_avg: Any, grad: Any, alpha: float) -> None:
            raise NotImplementedError

        def denominator(self, square_avg: Any, grad_avg: Any | None, eps: float) -> Any:
            raise NotImplementedError

        @torch.no_grad()
        def step(self, closure: Any = None) -> Any:
            loss = None
            if closure is not None:
                with torch.enable_grad():
                    loss = closure()
            for group in self.param_groups:
                if group.get("maximize") or group.get("differentiable"):
                    raise ValueError(f"{type(self).__name__}: maximize/differentiable are not supported")
                alpha, eps, lr, momentum = group["alpha"], group["eps"], group["lr"], group["momentum"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    grad = p.grad
                    state = self.state[p]
                    if not state:
                        state.update(self.first_state(p))
                        if momentum > 0:
                            state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                        if group["centered"]:
                            state["grad_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["step"] += 1
                    if group["weight_decay"] != 0:
                        grad = grad.add(p, alpha=group["weight_decay"])
                    square_avg = state["square_avg"]
                    square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
                    grad_avg = None
                    if group["centered"]:
                        grad_avg = state["grad_avg"]
                        self.update_grad_avg(grad_avg, grad, alpha)
                    avg = self.denominator(square_avg, grad_avg, eps)
                    if momentum > 0:
                        buf = state["momentum_buffer"]
                        buf.mul_(momentum).addcdiv_(grad, avg)
                        p.add_(buf, alpha=-lr)
                    else:
                        p.addcdiv_(grad, avg, value=-lr)
            return loss

    class HeldRMSprop(HeldStep, torch.optim.RMSprop):
        """torch's RMSprop: state from zeros, ``grad_avg.lerp_``, ``sqrt(v) + eps``."""

        def first_state(self, p: Any) -> dict[str, Any]:
            return {"step": torch.tensor(0.0), "square_avg": torch.zeros_like(p, memory_format=torch.preserve_format)}

        def update_grad_avg(self, grad_avg: Any, grad: Any, alpha: float) -> None:
            grad_avg.lerp_(grad, 1 - alpha)

        def denominator(self, square_avg: Any, grad_avg: Any | None, eps: float) -> Any:
            v = square_avg if grad_avg is None else square_avg.addcmul(grad_avg, grad_avg, value=-1)
            return exact_sqrt(v).add_(eps)

    class HeldRMSpropTFLike(HeldStep, RMSpropTFLike):
        """SB3's ``RMSpropTFLike``: square average from ones, ``grad_avg.mul_(alpha).add_``, ``sqrt(v + eps)``."""

        def first_state(self, p: Any) -> dict[str, Any]:
            return {"step": 0, "square_avg": torch.ones_like(p, memory_format=torch.preserve_format)}

        def update_grad_avg(self, grad_avg: Any, grad: Any, alpha: float) -> None:
            grad_avg.mul_(alpha).add_(grad, alpha=1 - alpha)

        def denominator(self, square_avg: Any, grad_avg: Any | None, eps: float) -> Any:
            if grad_avg is None:
                return exact_sqrt(square_avg.add(eps))
            return exact_sqrt(square_avg.addcmul(grad_avg, grad_avg, value=-1).add_(eps))

    return HeldRMSprop, HeldRMSpropTFLike


SB3_IMPORTS = (
    "torch._dynamo", "stable_baselines3", "stable_baselines3.common.logger", "stable_baselines3.common.on_policy_algorithm",
    "stable_baselines3.common.vec_env", "suite.algorithms.sb3.agent", "suite.algorithms.sb3.callback",
    "suite.algorithms.sb3.vec_env",
)  # fmt: skip
"""What an ``sb3-*`` trial imports before its measurement starts (the registry does not load SB3: see
:mod:`suite.algorithms.sb3.config`), so SB3's import lands in no phase of the trial; ``torch._dynamo`` too, which torch
imports when SB3 builds its ``torch.optim`` optimiser (69 MB resident, 2.6 s: the main forkserver does not preload it,
:data:`suite.executors.local.FORKSERVER_PRELOAD`). The local executor forks these trials from a second forkserver
that has imported them (:func:`suite.executors.local._server`), so they are paid once per study, not per trial."""


def _policy_factory(algo: str) -> Any:
    """:func:`suite.algorithms.sb3.agent.policy_factory`, imported when a saved policy is rebuilt."""

    def build(observation_space: Any, action_space: Any, cfg: Any) -> SB3Agent:
        from suite.algorithms.sb3.agent import policy_factory

        return policy_factory(algo)(observation_space, action_space, cfg)

    build.__doc__ = f"Rebuild a saved ``sb3-{algo}`` policy (SB3's policy class for ``cfg.policy``)."
    return build


def _register(algo: str, *, summary: str, action_spaces: tuple[str, ...], observations: tuple[str, ...],
              notes: str = "", portable_revision: int = 1) -> None:  # fmt: skip
    flavour = FLAVOURS[algo]

    def train(ctx: Any, cfg: Any) -> SB3Agent:
        return train_sb3(algo, ctx, cfg)

    train.__name__ = train.__qualname__ = f"train_sb3_{algo}"
    train.__doc__ = f"Train ``stable_baselines3.{flavour.sb3_class}`` inside a trial."
    register(
        f"sb3-{algo}",
        version="1.1.0",
        summary=summary,
        reference=(
            f"stable-baselines3 {flavour.sb3_class} (Raffin et al. 2021, JMLR 22(268)); hyperparameters: "
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
        extra={"peer": "stable-baselines3", "sb3_class": flavour.sb3_class, "zoo_commit": ZOO_COMMIT},
        policy_factory=_policy_factory(algo),
        imports=SB3_IMPORTS,
        portable_revision=portable_revision,
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
    portable_revision=2,  # 2: portable RMSprop takes numpy's square root (hold_rmsprop)
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
    portable_revision=2,  # 2: portable SAC's entropy-coefficient Adam is fused too (fuse_adam)
)
_register(
    "td3",
    summary="Stable-Baselines3 TD3 with the zoo's hyperparameters",
    action_spaces=("box",),
    observations=("vector",),
)
