"""``suite evaluate``: re-evaluate a saved policy without retraining."""

from __future__ import annotations

import argparse
from typing import Any

from suite.cli.options import add_db, add_device, add_kernels, add_plugin, enter_kernels


def add_parser(sub: Any) -> None:
    """``suite evaluate``."""
    p = sub.add_parser("evaluate", help="re-evaluate a saved policy without retraining")
    p.add_argument(
        "model",
        help="a saved policy: its file (results/models/<algo>_<env>_seed<k>_<short key>.pt, or an older <key>.pt), "
        "or its trial's key or a unique prefix of the key (looked up in --db)",
    )
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument(
        "--seed", type=int, default=None, help="trial seed whose evaluation seeds are used (default: the trial's own)"
    )
    add_db(p)
    add_device(p)
    add_kernels(p)
    add_plugin(p)


def cmd_evaluate(args: argparse.Namespace) -> int:
    enter_kernels(args.kernels)  # before torch and numpy compute anything
    import numpy as np
    import torch

    from suite.kernels import process_mode
    from suite.seeding import eval_seeds
    from suite.store.models import resolve_model
    from suite.trial import check_device, evaluate_policy, load_policy

    device = torch.device(check_device(args.device))
    policy, payload = load_policy(resolve_model(args.model, args.db))
    if device.type != "cpu":
        policy.to_device(device)
    seed = args.seed if args.seed is not None else int(payload.get("seed", 0))
    returns, lengths = evaluate_policy(
        lambda o: policy.predict(o, deterministic=True), payload["env_id"], payload["env_kwargs"],
        eval_seeds(seed, args.episodes),
    )  # fmt: skip
    print(
        f"{payload['algo']} on {payload['env_id']}: mean return {np.mean(returns):.2f} ± {np.std(returns):.2f} "
        f"over {len(returns)} episodes (mean length {np.mean(lengths):.0f}; evaluation seeds of trial seed {seed}; "
        f"{process_mode()} kernels)"
    )
    return 0
