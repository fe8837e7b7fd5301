"""The registry: every id constructs, duplicates raise, bad requests are clear errors."""

from dataclasses import dataclass
from pathlib import Path

import pytest

from suite import plugins, registry
from suite.envs import get_env_spec, list_envs
from suite.errors import UserError
from suite.registry import DuplicateIdError, check_compatible, get_algorithm, list_algorithms, register


def test_every_registered_algorithm_builds_a_config_for_every_env_it_supports():
    algos = list_algorithms()
    assert "ppo" in {a.id for a in algos}
    for algo in algos:
        assert algo.version and algo.summary and algo.reference
        for env in list_envs():
            if algo.supports(env.action_space, env.observation):
                cfg = algo.make_config(env.id)
                assert type(cfg) is algo.config_cls


def test_ppo_cartpole_defaults_are_the_zoo_values():
    cfg = get_algorithm("ppo").make_config("CartPole-v1")
    assert (cfg.n_envs, cfg.n_steps, cfg.batch_size, cfg.n_epochs) == (8, 32, 256, 20)
    assert (cfg.gamma, cfg.gae_lambda, cfg.ent_coef) == (0.98, 0.8, 0.0)
    assert cfg.learning_rate(0.0) == pytest.approx(1e-3) and cfg.learning_rate(1.0) == 0.0
    assert cfg.clip_range(0.5) == pytest.approx(0.1)


def test_duplicate_registration_raises():
    with pytest.raises(DuplicateIdError, match="algorithm id 'ppo' is already registered \\(algorithm id, built-in\\)"):
        register("ppo", version="0", summary="", reference="", action_spaces=("discrete",), config=object)(
            lambda ctx, cfg: None
        )
    with pytest.raises(DuplicateIdError, match="'grpo-rlvr-prm' is already registered \\(alias of 'ppo-rlvr-prm', built-in"):
        register("new-id", version="0", summary="", reference="", action_spaces=("discrete",), config=object,
                 aliases=("grpo-rlvr-prm",))(lambda ctx, cfg: None)  # fmt: skip
    assert "new-id" not in {a.id for a in list_algorithms()}


def test_unknown_algorithm_lists_the_registered_ids_and_how_plugins_load():
    with pytest.raises(UserError, match="unknown algorithm 'nope'; registered: .*ppo.*--plugin FILE"):
        get_algorithm("nope")


def test_builtins_have_no_plugin_and_snapshot_restore_undoes_registrations():
    assert all(a.plugin is None and a.plugin_version is None for a in list_algorithms())
    before = registry.snapshot()
    register("tmp-algo", version="0", summary="", reference="", action_spaces=("discrete",), config=object)(
        lambda ctx, cfg: None
    )
    assert get_algorithm("tmp-algo").plugin is None
    registry.restore(before)
    with pytest.raises(UserError):
        get_algorithm("tmp-algo")


@dataclass(frozen=True)
class _Cfg:
    n_steps: int = 1
    """Steps."""
    gamma: float = 0.5
    """Discount."""


def test_hyperparams_from_a_plugins_own_toml_file(tmp_path: Path):
    table = tmp_path / "hp.toml"
    table.write_text('[default]\nn_steps = 4\n["Acrobot-v1"]\ngamma = 0.9\n')
    with plugins.isolated():
        register("hp-algo", version="0", summary="", reference="", action_spaces=("discrete",), config=_Cfg,
                 hyperparams=table)(lambda ctx, cfg: None)  # fmt: skip
        algo = get_algorithm("hp-algo")
        assert algo.make_config("Acrobot-v1") == _Cfg(n_steps=4, gamma=0.9)
        assert algo.make_config("CartPole-v1", {"gamma": 0.1}) == _Cfg(n_steps=4, gamma=0.1)
        check_compatible(algo, "Acrobot-v1")  # an inferred env: discrete actions, vector observations
        assert get_env_spec("Acrobot-v1").action_space == "discrete"


def test_unknown_hyperparameter_is_a_user_error():
    with pytest.raises(UserError, match="unknown ppo hyperparameter key 'n_step'"):
        get_algorithm("ppo").make_config("CartPole-v1", {"n_step": 3})


def test_incompatible_env_is_refused_before_anything_runs():
    fake = get_algorithm("ppo")
    limited = type(fake)(**{**fake.__dict__, "action_spaces": frozenset({"discrete"})})
    with pytest.raises(UserError, match="cannot run on Hopper-v5 \\(box actions"):
        check_compatible(limited, "Hopper-v5")


def test_the_plugin_layer_installs_the_registry_loader_so_a_cli_process_sees_every_algorithm():
    """The registry never imports the algorithms or the plugins: the plugin layer, which the CLI imports, installs the
    loader the look-ups run first (built-ins, then installed plugins); before it, only what was imported is known."""
    import subprocess
    import sys

    code = (
        "from suite import registry\n"
        "before = len(registry.snapshot()[0])\n"
        "import suite.cli  # noqa: F401\n"
        "print(before, registry.get_algorithm('ppo').id, 'grpo' in {a.id for a in registry.list_algorithms()})\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split() == ["0", "ppo", "True"]
