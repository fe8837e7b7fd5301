"""Per-env trial-level metrics: hooks the trial runner calls after the final evaluation, defined next to their env.

They read the trained agent and change no training result. ``TextMatch-v0``'s is the sample diversity of
document 000 (:func:`record_sample_diversity`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from suite.context import Agent, TrialContext
from suite.envs.factory import make_vec_env
from suite.seeding import eval_seeds
from suite.textmatch import SAMPLE_DIVERSITY_EPISODES, sample_diversity


def record_sample_diversity(ctx: TrialContext, agent: Agent, n_episodes: int = SAMPLE_DIVERSITY_EPISODES) -> None:
    """Trial-end hook of ``TextMatch-v0``: record ``metrics["sample_diversity"]``, the fraction of distinct strings
    among ``n_episodes`` generations of the final policy with sampled (not greedy) actions (document 000's "sample
    diversity").

    The episodes start from the trial's evaluation seeds (the same for every algorithm) and the sampling draws from
    a torch generator seeded with the trial seed inside :func:`torch.random.fork_rng`, so the number is a pure
    function of the trial and no other random stream (training, saving) is touched.

    Args:
        ctx: The :class:`~suite.context.TrialContext` (its env, kwargs, seed and ``record_metric``).
        agent: The trained agent (``predict(obs, deterministic=False)`` samples).
        n_episodes: Generations to sample.
    """
    import torch

    envs = make_vec_env(ctx.env_id, n_episodes, training=False, env_kwargs=dict(ctx.env_kwargs), vectorization="sync")
    texts: list[str] = []
    try:
        with torch.random.fork_rng():
            torch.manual_seed(ctx.seed)
            obs, _ = envs.reset(seed=eval_seeds(ctx.seed, n_episodes))
            done = np.zeros(n_episodes, dtype=bool)
            final = np.empty(n_episodes, dtype=object)
            while not done.all():
                obs, _, terminated, truncated, info = envs.step(agent.predict(obs, deterministic=False))
                ended = (np.asarray(terminated) | np.asarray(truncated)) & ~done
                if ended.any():  # same-step autoreset: the finished string is in final_info
                    final[ended] = np.asarray(info["final_info"]["text"], dtype=object)[ended]
                done |= ended
        texts = [str(t) for t in final]
    finally:
        envs.close()
    ctx.record_metric("sample_diversity", sample_diversity(texts))


TRIAL_END_HOOKS: Mapping[str, Callable[[TrialContext, Agent], None]] = {"TextMatch-v0": record_sample_diversity}
"""Env id -> its trial-end hook, recorded after the final evaluation (in the ``eval`` phase)."""
