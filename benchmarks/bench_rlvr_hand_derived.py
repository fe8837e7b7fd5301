"""Benchmark: an algorithm's update by autograd (``hand_derived = false``) against the hand-derived one, side by side
in one run: ``ppo-rlvr-prm`` (the default; autograd's double backward for the input-gradient penalty against the JS
term and the penalty's second derivatives by hand in the shared core), ``grpo-pairwise`` (``--algo``: three autograd
passes per update against one forward and a backward pass per group by hand) or ``grpo`` (one autograd pass per
(micro-)batch against the kernel's forward and backward with the clipped surrogate's and the k3 penalty's derivatives
by hand).

Each run is a fresh spawned process (one torch thread) training one trial; the two paths alternate seed by seed so
that a change of load on a shared machine hits both. Per run: the trial process's CPU seconds (training and its
periodic evaluations), the update phase's wall seconds, the final evaluation. Per env: medians and the ratio.

    python benchmarks/bench_rlvr_hand_derived.py --env CartPole-v1 --env LunarLander-v3 --seeds 0-1 --steps 50000
    python benchmarks/bench_rlvr_hand_derived.py --algo grpo-pairwise --env TextMatch-v0 --seeds 0-2 --steps 30000
    python benchmarks/bench_rlvr_hand_derived.py --algo grpo --env TextMatch-v0 --env LunarLander-v3 --seeds 0-2
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import time
from typing import Any


def _run(algo: str, env_id: str, seed: int, steps: int, hand_derived: bool, conn: Any) -> None:
    import torch

    from suite.trial import TrialSpec, run_trial

    torch.set_num_threads(1)
    spec = TrialSpec(algo, env_id, seed, steps, overrides={"hand_derived": hand_derived}, n_eval_episodes=10)
    c0 = time.process_time()
    rec = run_trial(spec.resolve())
    conn.send({
        "algo": algo, "env": env_id, "seed": seed, "hand_derived": hand_derived, "status": rec["status"],
        "steps": rec["steps"], "cpu_s": time.process_time() - c0, "update_wall_s": rec["update_time_s"],
        "final_eval_mean": rec["final_eval_mean"],
    })  # fmt: skip
    conn.close()


def run_isolated(algo: str, env_id: str, seed: int, steps: int, hand_derived: bool) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_run, args=(algo, env_id, seed, steps, hand_derived, child))
    proc.start()
    child.close()
    out = parent.recv()
    proc.join()
    return out


def main() -> None:
    from suite.study import parse_seeds

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", default="ppo-rlvr-prm", choices=("ppo-rlvr-prm", "grpo-pairwise", "grpo"))
    p.add_argument("--env", action="append", help="env id (repeatable; default CartPole-v1 and LunarLander-v3)")
    p.add_argument("--seeds", default="0-1")
    p.add_argument("--steps", type=int, default=50_000)
    p.add_argument("--json", help="also write every run to this file")
    args = p.parse_args()
    runs = []
    for env_id in args.env or ["CartPole-v1", "LunarLander-v3"]:
        for i, seed in enumerate(parse_seeds(args.seeds)):
            for hand in (False, True) if i % 2 == 0 else (True, False):
                r = run_isolated(args.algo, env_id, seed, args.steps, hand)
                runs.append(r)
                print(json.dumps(r), flush=True)
        by = {h: [r for r in runs if r["env"] == env_id and r["hand_derived"] is h] for h in (False, True)}
        cpu = {h: statistics.median(r["cpu_s"] for r in by[h]) for h in by}
        upd = {h: statistics.median(r["update_wall_s"] for r in by[h]) for h in by}
        finals = {h: [round(r["final_eval_mean"], 1) for r in by[h]] for h in by}
        print(f"{args.algo} on {env_id}, {args.steps:,} steps, seeds {args.seeds}: trial CPU {cpu[False]:.1f} s autograd vs "
              f"{cpu[True]:.1f} s hand-derived ({cpu[False] / cpu[True]:.2f}x); "
              f"update wall {upd[False]:.1f} vs {upd[True]:.1f} s "
              f"({upd[False] / upd[True]:.2f}x); final evaluations {finals[False]} vs {finals[True]}", flush=True)  # fmt: skip
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(runs, fh, indent=1)


if __name__ == "__main__":
    main()
