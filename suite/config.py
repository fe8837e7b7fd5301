"""Typed hyperparameter configs: schedules, override parsing, validation and hashing.

Every algorithm's config is a frozen dataclass whose fields carry SB3's names (``n_steps``, ``batch_size``,
``gae_lambda``...) and a docstring-style comment. A trial resolves its config in layers::

    dataclass defaults < suite/hyperparams/<algo>.toml [env] table < study overrides < --set key=value

and records the resolved values and their hash. Values given as text (``--set``) are parsed as TOML literals,
so ``--set learning_rate=3e-4`` is a float, ``--set 'learning_rate={schedule="linear", start=1e-3}'`` a
schedule and ``--set activation=relu`` (not valid TOML) a plain string.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from suite.errors import UserError


@dataclass(frozen=True)
class Schedule:
    """A value that moves with training progress, like SB3's schedules but typed and serialisable.

    ``kind`` is ``constant``, ``linear`` (from ``start`` to ``end``) or ``cosine`` (half cosine from ``start``
    to ``end``). ``progress`` is the fraction of the step budget already used, in [0, 1].
    """

    kind: str
    """One of ``constant``, ``linear``, ``cosine``."""
    start: float
    """Value at progress 0."""
    end: float = 0.0
    """Value at progress 1 (ignored by ``constant``)."""

    KINDS = ("constant", "linear", "cosine")

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise UserError(f"unknown schedule {self.kind!r}; allowed: {', '.join(self.KINDS)}")

    def __call__(self, progress: float) -> float:
        p = min(max(progress, 0.0), 1.0)
        if self.kind == "constant":
            return self.start
        if self.kind == "linear":
            return self.start + (self.end - self.start) * p
        return self.end + 0.5 * (self.start - self.end) * (1.0 + math.cos(math.pi * p))

    def to_json(self) -> dict[str, Any]:
        return {"schedule": self.kind, "start": self.start, "end": self.end}

    @classmethod
    def parse(cls, value: Any, name: str) -> Schedule:
        """Build from a number (constant) or a table ``{schedule=..., start=..., end=...}``."""
        if isinstance(value, Schedule):
            return value
        if isinstance(value, bool):
            raise UserError(f"{name}: expected a number or a schedule table, got {value!r}")
        if isinstance(value, int | float):
            return cls("constant", float(value), float(value))
        if isinstance(value, Mapping):
            extra = set(value) - {"schedule", "start", "end"}
            if extra or "start" not in value:
                raise UserError(
                    f"{name}: a schedule table takes keys schedule, start, end (start required); got {sorted(value)}"
                )
            kind = str(value.get("schedule", "linear"))
            start = _as_float(value["start"], f"{name}.start")
            end = _as_float(value.get("end", 0.0 if kind != "constant" else start), f"{name}.end")
            return cls(kind, start, end)
        raise UserError(f'{name}: expected a number or a schedule table like {{schedule="linear", start=1e-3}}')


def _as_float(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UserError(f"{name}: expected a number, got {value!r}")
    return float(value)


def parse_value(text: str) -> Any:
    """Parse the right-hand side of ``--set key=value`` as a TOML literal, else keep it as a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_assignments(items: list[str] | None) -> dict[str, Any]:
    """Turn ``["a=1", "b.c=x"]`` into ``{"a": 1, "b.c": "x"}``; a malformed item is a UserError."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = parse_value(value.strip())
    return out


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _coerce(value: Any, tp: Any, name: str) -> Any:
    """Check ``value`` against the annotation ``tp`` and convert where the conversion is lossless."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, name)
            except UserError as exc:
                errors.append(str(exc))
        raise UserError(errors[0] if errors else f"{name}: bad value {value!r}")
    if tp is Schedule:
        return Schedule.parse(value, name)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise UserError(f"{name}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int | float) or float(value) != int(value):
            raise UserError(f"{name}: expected an integer, got {value!r}")
        return int(value)
    if tp is float:
        return _as_float(value, name)
    if tp is str:
        if not isinstance(value, str):
            raise UserError(f"{name}: expected a string, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise UserError(f"{name}: expected a list, got {value!r}")
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        return tuple(_coerce(v, inner, f"{name}[]") for v in value)
    if origin is typing.Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise UserError(f"{name}: {value!r} is not allowed; allowed: {', '.join(map(str, allowed))}")
        return value
    if tp is Any:
        return value
    raise TypeError(f"unsupported config annotation {tp!r} for {name}")


def build_config(cls: type, layers: list[Mapping[str, Any]], *, what: str = "config") -> Any:
    """Merge ``layers`` (later wins) over ``cls``'s defaults, validating every key and value.

    Raises:
        UserError: a key that ``cls`` does not have (the allowed keys are listed) or a value of the wrong type.
    """
    types_ = _field_types(cls)
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if key not in types_:
                raise UserError(f"unknown {what} key {key!r}; allowed: {', '.join(sorted(types_))}")
            merged[key] = _coerce(value, types_[key], key)
    try:
        return cls(**merged)
    except (TypeError, ValueError) as exc:
        raise UserError(f"invalid {what}: {exc}") from None


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """JSON-able view of a config dataclass (schedules become tables, tuples lists)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        out[f.name] = _jsonable(getattr(cfg, f.name))
    return out


IDENTITY_UNLESS_DEFAULT = {"identity": "unless-default"}
"""``dataclasses.field(metadata=...)`` of a config field added after records exist whose default reproduces the
earlier behaviour exactly: left out of the trial's identity (its key) at that default, so adding the option does
not orphan the records made before it; any other value is part of the key as usual. (Changing such a default
changes results, and so needs an algorithm version bump like any other change.)"""


def identity_unless_default(but_when: str) -> dict[str, str]:
    """:data:`IDENTITY_UNLESS_DEFAULT` for a field whose default changed behaviour for some configs only: left out of
    the key at its default unless the config's field ``but_when`` is truthy (those configs' earlier records were made
    by another code path, so they must not be reused; every other config keeps its key, and its records)."""
    return {"identity": "unless-default", "but_when": but_when}


ENGINEERING = "engineering"
"""The config section of a field that says how a trial's computation is carried out (vectorisation, buffer
allocation, GAE chunks, gradient accumulation, an accelerator switched off), not what the algorithm is; its
counterpart is ``hyperparameters``. Marked with :func:`engineering` in the field's metadata; sections change
nothing about a field's name, its ``--set``, or the trial key (which holds every field as before)."""


def engineering(**metadata: Any) -> dict[str, Any]:
    """``dataclasses.field(metadata=...)`` of an engineering knob (:data:`ENGINEERING`), with any other metadata (e.g.
    :func:`identity_unless_default`'s)."""
    return {**metadata, "section": ENGINEERING}


def config_sections(cfg: Any) -> dict[str, list[str]]:
    """``{"hyperparameters": [...], "engineering": [...]}``: a config class's (or instance's) field names by section,
    in declaration order."""
    out: dict[str, list[str]] = {"hyperparameters": [], ENGINEERING: []}
    for f in dataclasses.fields(cfg):
        out[ENGINEERING if f.metadata.get("section") == ENGINEERING else "hyperparameters"].append(f.name)
    return out


def config_identity(cfg: Any) -> dict[str, Any]:
    """:func:`config_to_dict` without the :data:`IDENTITY_UNLESS_DEFAULT` fields that are at their default (and whose
    :func:`identity_unless_default` condition is false): what a trial key hashes."""
    out = config_to_dict(cfg)
    for f in dataclasses.fields(cfg):
        if f.metadata.get("identity") == "unless-default" and getattr(cfg, f.name) == f.default:
            but_when = f.metadata.get("but_when")
            if but_when is None or not getattr(cfg, but_when):
                del out[f.name]
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, Schedule):
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return config_to_dict(value)
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def stable_hash(obj: Any, length: int = 16) -> str:
    """SHA-256 of the canonical JSON of ``obj`` (sorted keys), truncated to ``length`` hex digits."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def load_toml(path: Path) -> dict[str, Any]:
    """Read a TOML file; an unreadable or malformed file is a UserError naming it."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise UserError(f"file not found: {path}") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
