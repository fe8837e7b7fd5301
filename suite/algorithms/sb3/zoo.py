"""rl-baselines3-zoo's hyperparameter YAML (``baselines/hyperparams/<algo>.yml``) read into config overrides.

``policy_kwargs`` strings are parsed by a whitelist walker over :func:`ast.parse` (nothing is evaluated), the zoo's
``lin_X`` schedules become suite schedules, and keys that describe env wrappers must match what the suite's env
layer already does.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from suite.algorithms.sb3.config import FLAVOURS, Flavour
from suite.envs import get_env_spec
from suite.errors import UserError

BASELINES_DIR = Path(__file__).resolve().parents[3] / "baselines"
"""``baselines/`` at the repository root (the package is installed editable)."""
ZOO_COMMIT = "61a0d13"
"""rl-baselines3-zoo commit of the hyperparameters and of ``benchmark.md`` (published.md)."""


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


def _policy_kwargs_to_fields(flavour: Flavour, kwargs: Mapping[str, Any]) -> dict[str, Any]:
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
