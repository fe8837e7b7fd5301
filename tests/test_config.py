"""Typed configs: schedules, `--set` parsing, validation errors, hashing."""

from dataclasses import dataclass

import pytest

from suite.config import Schedule, build_config, config_to_dict, parse_assignments, parse_value, stable_hash
from suite.errors import UserError


def test_linear_schedule_matches_sb3_progress_remaining():
    # SB3's linear_schedule(1e-3)(progress_remaining) = 1e-3 * progress_remaining; our progress = 1 - remaining.
    s = Schedule("linear", 1e-3, 0.0)
    assert s(0.0) == pytest.approx(1e-3)
    assert s(0.25) == pytest.approx(0.75e-3)
    assert s(1.0) == pytest.approx(0.0)
    assert s(2.0) == pytest.approx(0.0)  # clamped


def test_cosine_schedule_endpoints_and_midpoint():
    s = Schedule("cosine", 5e-4, 2e-5)
    assert s(0.0) == pytest.approx(5e-4)
    assert s(0.5) == pytest.approx((5e-4 + 2e-5) / 2)
    assert s(1.0) == pytest.approx(2e-5)


def test_schedule_parse_number_and_table():
    assert Schedule.parse(0.1, "x") == Schedule("constant", 0.1, 0.1)
    assert Schedule.parse({"schedule": "linear", "start": 1.0}, "x") == Schedule("linear", 1.0, 0.0)
    with pytest.raises(UserError, match="schedule table"):
        Schedule.parse({"begin": 1.0}, "x")
    with pytest.raises(UserError, match="unknown schedule"):
        Schedule.parse({"schedule": "exp", "start": 1.0}, "x")


def test_parse_value_is_toml_else_string():
    assert parse_value("3e-4") == 3e-4
    assert parse_value("10") == 10
    assert parse_value("true") is True
    assert parse_value("[64, 64]") == [64, 64]
    assert parse_value('{schedule="linear", start=1e-3}') == {"schedule": "linear", "start": 1e-3}
    assert parse_value("relu") == "relu"


def test_parse_assignments_rejects_missing_equals():
    assert parse_assignments(["a=1", "b = x"]) == {"a": 1, "b": "x"}
    with pytest.raises(UserError, match="key=value"):
        parse_assignments(["lonely"])


@dataclass(frozen=True)
class _Cfg:
    n: int = 1
    lr: Schedule = Schedule("constant", 1.0, 1.0)
    arch: tuple[int, ...] = (64,)
    name: str = "a"
    flag: bool = False
    limit: float | None = None


def test_build_config_layers_and_coercion():
    cfg = build_config(_Cfg, [{"n": 2, "arch": [8, 8]}, {"n": 3.0, "lr": 0.5, "limit": 1}])
    assert cfg == _Cfg(n=3, lr=Schedule("constant", 0.5, 0.5), arch=(8, 8), limit=1.0)
    assert config_to_dict(cfg)["lr"] == {"schedule": "constant", "start": 0.5, "end": 0.5}


@pytest.mark.parametrize(
    ("layer", "message"),
    [
        ({"nn": 1}, "unknown config key 'nn'; allowed: arch, flag, limit, lr, n, name"),
        ({"n": 1.5}, "n: expected an integer"),
        ({"n": "x"}, "n: expected an integer"),
        ({"flag": 1}, "flag: expected true or false"),
        ({"name": 3}, "name: expected a string"),
        ({"arch": 3}, "arch: expected a list"),
    ],
)
def test_build_config_errors_name_the_key_and_what_is_allowed(layer, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        build_config(_Cfg, [layer])


def test_stable_hash_ignores_key_order_and_sees_values():
    assert stable_hash({"a": 1, "b": 2}) == stable_hash({"b": 2, "a": 1})
    assert stable_hash({"a": 1}) != stable_hash({"a": 2})
    assert len(stable_hash({}, 64)) == 64
