"""pytest-benchmark for the suite's hot paths, so a change that slows one of them is caught by a comparison.

What each benchmark times (one torch thread, seeded; the objects are built outside the timing):

* ``test_env_step``: one step of the vector env a trial trains on, through the suite's wrappers, per env
  (``auto`` vectorisation with the zoo's ``n_envs``), and of the ``sync`` envs evaluation and GRPO's groups use;
* ``test_rollout``: one rollout of ``ppo``'s collector (policy inference, env steps, storage);
* ``test_gae``: GAE over a 1024 x 16 rollout (LunarLander's zoo shape), whole and in chunks;
* ``test_update``: one update of each suite algorithm on a fixed CartPole batch (``ppo``'s 20 epochs of 256, the
  variants' own losses, ``grpo``'s and ``grpo-pairwise``'s group updates), and ``ppo``'s update on Pong;
* ``test_report_render``: ``write_report`` for a 40-trial study (the 500-trial one is ``bench_report.py``).

Run and save a baseline, then compare a later tree against it (fails on a median slowdown beyond 25%)::

    python -m pytest benchmarks --benchmark-only --benchmark-autosave
    python -m pytest benchmarks --benchmark-only --benchmark-compare --benchmark-compare-fail=median:25%

On a shared machine compare runs made under similar load (the saved JSON records the machine, commit and time).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from suite.algorithms.core import compute_gae
from suite.envs import make_vec_env
from suite.trial import TrialContext, TrialSpec, seed_everything

ENV_N = {"CartPole-v1": 8, "LunarLander-v3": 16, "ALE/Pong-v5": 8, "Hopper-v5": 1, "TextMatch-v0": 8}
"""The zoo's (or the suite's) ``n_envs`` for ``ppo`` on each env."""


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    seed_everything(0, 1)


@pytest.mark.parametrize(
    ("env_id", "vectorization"),
    [(env_id, "auto") for env_id in ENV_N] + [("CartPole-v1", "sync"), ("TextMatch-v0", "sync")],
)
def test_env_step(benchmark: Any, env_id: str, vectorization: str) -> None:
    n = ENV_N[env_id] if vectorization == "auto" else 10  # evaluation's 10 episodes
    envs = make_vec_env(env_id, n, vectorization=vectorization)
    envs.reset(seed=0 if vectorization == "auto" else list(range(n)))
    envs.action_space.seed(0)
    pool = [envs.action_space.sample() for _ in range(64)]
    i = iter(range(10**9))
    try:
        benchmark(lambda: envs.step(pool[next(i) % 64]))
    finally:
        envs.close()


def _trainer(algo: str, env_id: str, overrides: dict[str, Any] | None = None) -> tuple[Any, TrialContext]:
    from suite.registry import get_algorithm

    resolved = TrialSpec(algo, env_id, 0, 10**7, overrides=overrides or {}).resolve()
    seed_everything(0, 1)
    ctx = TrialContext(resolved)
    module = __import__(get_algorithm(algo).train.__module__, fromlist=["*"])
    trainer_cls = next(
        getattr(module, name)
        for name in dir(module)
        if name.endswith("Trainer") and getattr(module, name).__module__ == module.__name__
    )
    return trainer_cls(ctx, resolved.config), ctx


@pytest.mark.parametrize(("env_id", "overrides"), [("CartPole-v1", {}), ("LunarLander-v3", {"n_steps": 64})])
def test_rollout(benchmark: Any, env_id: str, overrides: dict[str, Any]) -> None:
    trainer, ctx = _trainer("ppo", env_id, overrides)
    try:
        benchmark(trainer.collector.collect)
    finally:
        ctx.close()


@pytest.mark.parametrize("chunk", [0, 64])
def test_gae(benchmark: Any, chunk: int) -> None:
    rng = np.random.default_rng(0)
    T, N = 1024, 16
    rewards, values = rng.normal(size=(2, T, N)).astype(np.float32)
    dones = (rng.random((T, N)) < 0.01).astype(np.float32)
    last = rng.normal(size=N).astype(np.float32)
    benchmark(compute_gae, rewards, values, dones, last, 0.999, 0.98, chunk=chunk)


@pytest.mark.parametrize(
    ("algo", "env_id", "overrides"),
    [
        ("ppo", "CartPole-v1", {}),
        ("ppo-adaptive-clip", "CartPole-v1", {}),
        ("ppo-rlvr-prm", "CartPole-v1", {"n_envs": 8, "n_steps": 32, "batch_size": 256, "n_epochs": 20}),
        ("ppo", "ALE/Pong-v5", {"n_envs": 8, "n_steps": 32, "n_epochs": 1}),  # 1 epoch of one 256-frame minibatch
    ],
)
def test_update(benchmark: Any, algo: str, env_id: str, overrides: dict[str, Any]) -> None:
    """One update of an actor-critic algorithm on one collected rollout (the same rollout every round)."""
    trainer, ctx = _trainer(algo, env_id, overrides)
    try:
        rollout = trainer.collector.collect()
        adv, ret = trainer.advantages(rollout)
        benchmark(trainer.update, rollout, adv, ret, 0.5)
    finally:
        ctx.close()


@pytest.mark.parametrize("algo", ["grpo", "grpo-pairwise"])
def test_update_group_algorithms(benchmark: Any, algo: str) -> None:
    """One update of an episode-group algorithm on one collected CartPole batch."""
    from suite.algorithms.grpo import batch_advantages
    from suite.algorithms.grpo_pairwise import flatten_episodes

    trainer, ctx = _trainer(algo, "CartPole-v1")
    try:
        groups = trainer.collector.collect()
        if algo == "grpo":
            advantages = batch_advantages(groups, trainer.cfg.supervision, trainer.cfg.reward_scaling)
            benchmark(trainer.update, groups, advantages, 0.5)
        else:
            benchmark(trainer.update, flatten_episodes(groups), 0.5)
    finally:
        ctx.close()


def test_report_render(benchmark: Any, tmp_path: Path) -> None:
    """``write_report`` for a 40-trial study (2 algorithms x 4 envs x 5 seeds, full series)."""
    import bench_report

    from suite.provenance import collect_provenance
    from suite.report import write_report
    from suite.store import ResultsStore

    db = tmp_path / "suite.db"
    provenance = collect_provenance(1)
    with ResultsStore(db) as store:
        for algo in bench_report.ALGOS[:2]:
            for env_id in bench_report.ENVS:
                for seed in range(5):
                    store.save_trial(bench_report.synthetic_record(algo, env_id, seed, provenance))
    out = tmp_path / "report"
    index = benchmark.pedantic(write_report, kwargs={"study": bench_report.STUDY, "db": db, "out_dir": out}, rounds=3)
    assert Path(index).is_file()


def test_torch_threads_are_one() -> None:
    """Every benchmark runs with one torch thread (the suite's trial setting)."""
    assert torch.get_num_threads() == 1
