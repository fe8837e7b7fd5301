"""Benchmark: the suite's `ppo` against stable-baselines3's PPO on CartPole-v1, same hyperparameters, one run.

Both sides use rl-baselines3-zoo's CartPole-v1 hyperparameters (8 envs x 32 steps, batch 256, 20 epochs,
lr and clip linear from 1e-3 and 0.2), one torch thread, the same seeds, and the same evaluation protocol
(10 deterministic episodes from the suite's evaluation seeds every ``--eval-freq`` steps; evaluation time is
excluded from both sides' training time). SB3 is run the way its users run it: `make_vec_env` + DummyVecEnv.

Prints, per seed and as medians: training steps/s, the training time to the first evaluation >= 475, and the
suite/SB3 ratios of both. Writes the figures as JSON (with machine info) to ``--output``.

    python benchmarks/bench_ppo_vs_sb3.py --seeds 0-2 --steps 100000
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from suite.provenance import collect_provenance, utc_now_iso
from suite.study import parse_seeds
from suite.trial import TrialSpec, eval_seeds, evaluate_policy, run_trial

THRESHOLD = 475.0


def run_suite(seed: int, steps: int, eval_freq: int) -> dict:
    rec = run_trial(TrialSpec("ppo", "CartPole-v1", seed, steps, eval_freq=eval_freq).resolve())
    assert rec["status"] == "ok", rec["error"]
    hit = next((e for e in rec["evals"] if np.mean(e["returns"]) >= THRESHOLD), None)
    train = rec["rollout_time_s"] + rec["update_time_s"]
    return {
        "steps_per_second": rec["steps"] / train,
        "time_to_475_s": hit["wall_time_s"] if hit else None,
        "steps_to_475": hit["step"] if hit else None,
        "final_eval_mean": rec["final_eval_mean"],
    }


def run_sb3(seed: int, steps: int, eval_freq: int) -> dict:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    seeds = eval_seeds(seed, 10)

    class EvalTimer(BaseCallback):
        """Evaluates with the suite's protocol every eval_freq steps; keeps eval time out of the clock."""

        def __init__(self) -> None:
            super().__init__()
            self.eval_time = 0.0
            self.next_eval = eval_freq
            self.hit: tuple[int, float] | None = None
            self.t0 = time.perf_counter()

        def _on_step(self) -> bool:
            return True

        def _on_rollout_start(self) -> None:
            # Called after the previous update, like the suite's evaluation point (after rollout + update).
            n = self.model.num_timesteps
            if n < self.next_eval or self.hit is not None:
                return
            self.next_eval = (n // eval_freq + 1) * eval_freq
            t = time.perf_counter()
            trained = t - self.t0 - self.eval_time
            returns, _ = evaluate_policy(lambda o: self.model.predict(o, deterministic=True)[0], "CartPole-v1", {}, seeds)
            self.eval_time += time.perf_counter() - t
            if returns.mean() >= THRESHOLD:
                self.hit = (n, trained)

    def lin(v: float):
        return lambda progress_remaining: v * progress_remaining

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed * 10_000)
    model = PPO(
        "MlpPolicy", env, n_steps=32, batch_size=256, n_epochs=20, gae_lambda=0.8, gamma=0.98, ent_coef=0.0,
        learning_rate=lin(1e-3), clip_range=lin(0.2), seed=seed, device="cpu", verbose=0,
    )  # fmt: skip
    cb = EvalTimer()
    t0 = time.perf_counter()
    cb.t0 = t0
    model.learn(total_timesteps=steps, callback=cb)
    train = time.perf_counter() - t0 - cb.eval_time
    final, _ = evaluate_policy(lambda o: model.predict(o, deterministic=True)[0], "CartPole-v1", {}, seeds)
    return {
        "steps_per_second": model.num_timesteps / train,
        "time_to_475_s": cb.hit[1] if cb.hit else None,
        "steps_to_475": cb.hit[0] if cb.hit else None,
        "final_eval_mean": float(final.mean()),
    }


def _median(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0-2")
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--eval-freq", type=int, default=5_120)
    ap.add_argument("--output", default="results/benchmarks/ppo_vs_sb3.json")
    args = ap.parse_args()
    rows = []
    for seed in parse_seeds(args.seeds):
        ours = run_suite(seed, args.steps, args.eval_freq)
        theirs = run_sb3(seed, args.steps, args.eval_freq)
        rows.append({"seed": seed, "suite": ours, "sb3": theirs})
        print(
            f"seed {seed}: suite {ours['steps_per_second']:.0f} steps/s, to-475 {ours['time_to_475_s']} s "
            f"(final {ours['final_eval_mean']:.1f}) | sb3 {theirs['steps_per_second']:.0f} steps/s, "
            f"to-475 {theirs['time_to_475_s']} s (final {theirs['final_eval_mean']:.1f})",
            flush=True,
        )
    med = {
        side: {k: _median([r[side][k] for r in rows]) for k in ("steps_per_second", "time_to_475_s", "steps_to_475")}
        for side in ("suite", "sb3")
    }
    sps_ratio = med["suite"]["steps_per_second"] / med["sb3"]["steps_per_second"]
    t_s, t_b = med["suite"]["time_to_475_s"], med["sb3"]["time_to_475_s"]
    time_ratio = t_b / t_s if t_s and t_b else None
    print(f"median steps/s: suite {med['suite']['steps_per_second']:.0f}, sb3 {med['sb3']['steps_per_second']:.0f}")
    print(f"steps/s ratio (suite / sb3): {sps_ratio:.2f}x")
    print(f"median training time to 475: suite {t_s} s, sb3 {t_b} s; speed-up (sb3 / suite): {time_ratio}")
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "benchmark": "ppo_vs_sb3_cartpole",
                "format_version": 1,
                "timestamp": utc_now_iso(),
                "args": vars(args),
                "rows": rows,
                "median": med,
                "steps_per_second_ratio": sps_ratio,
                "time_to_475_ratio": time_ratio,
                "machine": collect_provenance(1),
            },
            indent=2,
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
