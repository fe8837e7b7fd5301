"""The registry: every id constructs, duplicates raise, bad requests are clear errors."""

import pytest

from suite.envs import list_envs
from suite.errors import UserError
from suite.registry import check_compatible, get_algorithm, list_algorithms, register


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
    with pytest.raises(ValueError, match="already registered"):
        register("ppo", version="0", summary="", reference="", action_spaces=("discrete",), config=object)(
            lambda ctx, cfg: None
        )


def test_unknown_algorithm_lists_the_registered_ids():
    with pytest.raises(UserError, match="unknown algorithm 'nope'; registered: .*ppo"):
        get_algorithm("nope")


def test_unknown_hyperparameter_is_a_user_error():
    with pytest.raises(UserError, match="unknown ppo hyperparameter key 'n_step'"):
        get_algorithm("ppo").make_config("CartPole-v1", {"n_step": 3})


def test_incompatible_env_is_refused_before_anything_runs():
    fake = get_algorithm("ppo")
    limited = type(fake)(**{**fake.__dict__, "action_spaces": frozenset({"discrete"})})
    with pytest.raises(UserError, match="cannot run on Hopper-v5 \\(box actions"):
        check_compatible(limited, "Hopper-v5")
