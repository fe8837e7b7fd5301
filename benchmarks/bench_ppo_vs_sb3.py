"""Benchmark: the suite's ``ppo`` against Stable-Baselines3's PPO, zoo hyperparameters, side by side in one run.

The peer (``--peer``) is SB3's ``PPO`` with rl-baselines3-zoo's hyperparameters, either

* ``standalone`` (default on CartPole and LunarLander): SB3 the way its users run it, ``make_vec_env`` +
  ``DummyVecEnv`` over gymnasium's envs (the issue's original measurement), or
* ``suite`` (default on Pong): the ``sb3-ppo`` trial, SB3's class on the suite's own vector envs (the same fast
  env implementation as ``ppo``: the ratio then measures the learning code alone; the lean-Pong memory target is
  defined on it).

Both sides use the same seeds and evaluation protocol (10 deterministic episodes from the suite's evaluation seeds
every ``eval_freq`` steps, evaluation time excluded from training time) and one torch thread. Every run is a fresh
process (spawned: its imports, allocator state and peak RSS are its own), and the two sides alternate seed by
seed so that a change of load on a shared machine hits both.

Per run it records: training steps/s by wall clock and by this process's CPU time (CPU time is robust when
other jobs share the cores: it does not count time the process waited for a core), training time to the first
evaluation >= a threshold (CartPole: 475), the final evaluation, peak RSS. Per env it prints medians, the
ppo/SB3 ratios, the IQM of final evaluations with 95% bootstrap CIs (rliable's method, ``suite.stats``), and
``ppo``'s limit (``suite profile speed``: env alone + network alone for the same work) with training steps/s as
a fraction of it.

    python benchmarks/bench_ppo_vs_sb3.py --env CartPole-v1 --seeds 0-2             # 100k steps, 3 seeds
    python benchmarks/bench_ppo_vs_sb3.py --env LunarLander-v3 --seeds 0-2 --steps 100000
    python benchmarks/bench_ppo_vs_sb3.py --env ALE/Pong-v5 --seeds 0 --steps 3072  # speed and peak RSS
    python benchmarks/bench_ppo_vs_sb3.py --env ALE/Pong-v5 --ppo-set grad_accumulation=4   # a toggle of ppo's
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from suite.profile.speed import LapClock
from suite.provenance import collect_provenance, utc_now_iso
from suite.study import parse_seeds

THRESHOLDS = {"CartPole-v1": 475.0, "LunarLander-v3": 200.0, "ALE/Pong-v5": 0.0}
ZOO = {
    # rl-baselines3-zoo hyperparams/ppo.yml (as baselines/hyperparams/ppo.yml), for the standalone peer
    "CartPole-v1": {"n_envs": 8, "n_steps": 32, "batch_size": 256, "n_epochs": 20, "gae_lambda": 0.8, "gamma": 0.98,
                    "ent_coef": 0.0, "learning_rate": ("lin", 1e-3), "clip_range": ("lin", 0.2)},
    "LunarLander-v3": {"n_envs": 16, "n_steps": 1024, "batch_size": 64, "n_epochs": 4, "gae_lambda": 0.98,
                       "gamma": 0.999, "ent_coef": 0.01},
}  # fmt: skip
DEFAULT_STEPS = {"CartPole-v1": 100_000, "LunarLander-v3": 100_000, "ALE/Pong-v5": 3_072}
DEFAULT_EVAL_FREQ = {"CartPole-v1": 5_120, "LunarLander-v3": 16_384, "ALE/Pong-v5": 0}


def _status_mb(field: str) -> float:
    """``VmHWM`` (peak) or ``VmRSS`` of this process from /proc (the peak of this process image: ``ru_maxrss``
    would carry the parent's size across the spawn's exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024.0


def _run(algo: str, env_id: str, seed: int, steps: int, eval_freq: int, n_eval: int, conn: Any,
         overrides: dict[str, Any] | None = None) -> None:  # fmt: skip
    """Child process: one seeded trial, timed by wall clock and CPU time per phase."""
    from suite.trial import TrialContext, TrialSpec, seed_everything

    resolved = TrialSpec(
        algo, env_id, seed, steps, eval_freq=eval_freq, n_eval_episodes=n_eval, overrides=overrides or {}
    ).resolve()
    seed_everything(seed, 1)
    base_rss = _status_mb("VmRSS")
    ctx = TrialContext(resolved)
    cpu = LapClock("cpu")
    begin_phase, end_phase, evaluate = ctx.begin_phase, ctx.end_phase, ctx.evaluate
    evals_cpu: list[float] = []

    def timed_begin(name: str) -> None:
        begin_phase(name)
        cpu.begin(name)

    def timed_end() -> None:
        cpu.end()
        end_phase()

    def timed_evaluate(agent: Any, final: bool) -> dict[str, Any]:
        evals_cpu.append(sum(t for p, t in cpu.phases.items() if p != "eval"))  # CPU training time so far
        return evaluate(agent, final)

    ctx.begin_phase, ctx.end_phase, ctx.evaluate = timed_begin, timed_end, timed_evaluate  # type: ignore[method-assign]
    try:
        agent = resolved.algo.train(ctx, resolved.config)
        if not ctx.evals or ctx.evals[-1]["step"] != ctx.steps:
            ctx.evaluate(agent, final=True)
    finally:
        ctx.end_phase()
        ctx.close()
    train_wall = ctx.train_time()
    train_cpu = sum(t for p, t in cpu.phases.items() if p != "eval")
    threshold = THRESHOLDS.get(env_id, float("inf"))
    hit = next((i for i, e in enumerate(ctx.evals) if np.mean(e["returns"]) >= threshold), None)
    conn.send(
        {
            "algo": resolved.algo.id, "algo_version": resolved.algo.version, "seed": seed, "steps": ctx.steps,
            "steps_per_second": ctx.steps / train_wall, "steps_per_cpu_second": ctx.steps / train_cpu,
            "train_wall_s": train_wall, "train_cpu_s": train_cpu,
            "time_to_threshold_s": ctx.evals[hit]["wall_time_s"] if hit is not None else None,
            "cpu_time_to_threshold_s": evals_cpu[hit] if hit is not None else None,
            "steps_to_threshold": ctx.evals[hit]["step"] if hit is not None else None,
            "final_eval_mean": float(np.mean(ctx.evals[-1]["returns"])),
            "peak_rss_mb": _status_mb("VmHWM"), "start_rss_mb": base_rss,
        }
    )  # fmt: skip
    conn.close()


def _run_standalone(algo: str, env_id: str, seed: int, steps: int, eval_freq: int, n_eval: int, conn: Any) -> None:
    """Child process: SB3's PPO as its users run it (make_vec_env + DummyVecEnv), the suite's evaluation protocol."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    from suite.trial import eval_seeds, evaluate_policy

    torch.set_num_threads(1)
    hp = dict(ZOO[env_id])
    n_envs = hp.pop("n_envs")
    for key, value in list(hp.items()):
        if isinstance(value, tuple):
            hp[key] = (lambda v: lambda progress_remaining: v * progress_remaining)(value[1])
    seeds = eval_seeds(seed, n_eval)
    threshold = THRESHOLDS.get(env_id, float("inf"))

    class EvalTimer(BaseCallback):
        """Evaluates with the suite's protocol every eval_freq steps, after an update (where the suite evaluates);
        keeps evaluation time out of both clocks."""

        def __init__(self) -> None:
            super().__init__()
            self.eval_wall = self.eval_cpu = 0.0
            self.next_eval = eval_freq or steps
            self.hit: tuple[int, float, float] | None = None
            self.t0 = time.perf_counter()
            self.c0 = time.process_time()

        def _on_step(self) -> bool:
            return True

        def evaluate(self) -> float:
            t, c = time.perf_counter(), time.process_time()
            returns, _ = evaluate_policy(lambda o: self.model.predict(o, deterministic=True)[0], env_id, {}, seeds)
            self.eval_wall += time.perf_counter() - t
            self.eval_cpu += time.process_time() - c
            return float(returns.mean())

        def _on_rollout_start(self) -> None:
            n = self.model.num_timesteps
            if n < self.next_eval:
                return
            self.next_eval = (n // (eval_freq or steps) + 1) * (eval_freq or steps)
            wall = time.perf_counter() - self.t0 - self.eval_wall
            cpu = time.process_time() - self.c0 - self.eval_cpu
            if self.evaluate() >= threshold and self.hit is None:
                self.hit = (n, wall, cpu)

    env = make_vec_env(env_id, n_envs=n_envs, seed=seed * 10_000)
    model = PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **hp)
    cb = EvalTimer()
    model.learn(total_timesteps=steps, callback=cb)
    train_wall = time.perf_counter() - cb.t0 - cb.eval_wall
    train_cpu = time.process_time() - cb.c0 - cb.eval_cpu
    final = cb.evaluate()
    conn.send(
        {
            "algo": "sb3-ppo (standalone)", "seed": seed, "steps": model.num_timesteps,
            "steps_per_second": model.num_timesteps / train_wall, "steps_per_cpu_second": model.num_timesteps / train_cpu,
            "train_wall_s": train_wall, "train_cpu_s": train_cpu,
            "time_to_threshold_s": cb.hit[1] if cb.hit else None, "cpu_time_to_threshold_s": cb.hit[2] if cb.hit else None,
            "steps_to_threshold": cb.hit[0] if cb.hit else None, "final_eval_mean": final,
            "peak_rss_mb": _status_mb("VmHWM"), "start_rss_mb": None,
        }
    )  # fmt: skip
    conn.close()


def run_isolated(
    algo: str, env_id: str, seed: int, steps: int, eval_freq: int, n_eval: int, standalone: bool = False,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    argv: tuple[Any, ...] = (algo, env_id, seed, steps, eval_freq, n_eval, child)
    proc = ctx.Process(target=_run_standalone if standalone else _run, args=argv if standalone else (*argv, overrides))
    proc.start()
    child.close()
    out = parent.recv()
    proc.join()
    return out


def _median(xs: list[Any]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _limit(env_id: str, steps: int, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    from suite.profile.speed import profile_speed

    prof = profile_speed("ppo", env_id, steps=steps, overrides=overrides, with_cprofile=False, clock="cpu")
    return {
        "slice_steps": prof.steps,
        "steps_per_cpu_second": prof.steps_per_second,
        "limit_steps_per_cpu_second": prof.limit.get("limit_steps_per_second"),
        "limit_fraction": prof.limit_fraction,
        "env_s": prof.limit.get("env_s"),
        "network_s": prof.limit.get("network_s"),
    }


def bench_env(
    env_id: str, seeds: list[int], steps: int, eval_freq: int, n_eval: int, limit_steps: int, peer: str,
    ppo_overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    from suite.stats.scores import score_intervals

    rows = []
    for seed in seeds:
        pair = {}
        for algo in ("ppo", "sb3-ppo"):
            pair[algo] = run_isolated(
                algo, env_id, seed, steps, eval_freq, n_eval, standalone=algo != "ppo" and peer == "standalone",
                overrides=ppo_overrides if algo == "ppo" else None,
            )  # fmt: skip
            r = pair[algo]
            print(
                f"  {env_id} seed {seed} {algo:8s}: {r['steps_per_second']:8,.0f} steps/s wall, "
                f"{r['steps_per_cpu_second']:8,.0f} per CPU s; to-threshold {r['time_to_threshold_s']} s wall "
                f"({r['cpu_time_to_threshold_s']} CPU); final {r['final_eval_mean']:.1f}; peak RSS {r['peak_rss_mb']:.0f} MB",
                flush=True,
            )
        rows.append({"seed": seed, **pair})
    keys = ("steps_per_second", "steps_per_cpu_second", "time_to_threshold_s", "cpu_time_to_threshold_s", "peak_rss_mb")
    med = {a: {k: _median([r[a][k] for r in rows]) for k in keys} for a in ("ppo", "sb3-ppo")}

    def ratio(k: str, inverse: bool = False) -> float | None:
        a, b = med["ppo"][k], med["sb3-ppo"][k]
        if not a or not b:
            return None
        return b / a if inverse else a / b

    iqm = {a: score_intervals(np.array([r[a]["final_eval_mean"] for r in rows]), reps=20_000)["iqm"] for a in med}
    out = {
        "env": env_id, "steps": steps, "seeds": seeds, "rows": rows, "median": med,
        "steps_per_second_ratio": ratio("steps_per_second"), "steps_per_cpu_second_ratio": ratio("steps_per_cpu_second"),
        "time_to_threshold_speedup": ratio("time_to_threshold_s", inverse=True),
        "cpu_time_to_threshold_speedup": ratio("cpu_time_to_threshold_s", inverse=True),
        "peak_rss_ratio": ratio("peak_rss_mb"), "final_iqm": iqm, "threshold": THRESHOLDS.get(env_id), "peer": peer,
        "ppo_overrides": dict(ppo_overrides or {}),
    }  # fmt: skip
    if limit_steps:
        out["ppo_limit"] = _limit(env_id, limit_steps, ppo_overrides)
        lim = out["ppo_limit"]["limit_steps_per_cpu_second"]
        sb3 = med["sb3-ppo"]["steps_per_cpu_second"]
        out["limit_over_sb3"] = lim / sb3 if lim and sb3 else None  # the best ratio ppo could reach here
    return out


def report(res: dict[str, Any]) -> None:
    def f(x: Any, fmt: str = ".2f") -> str:
        return "-" if x is None else format(x, fmt)

    m = res["median"]
    ours, peer = m["ppo"], m["sb3-ppo"]
    sets = ", ".join(f"{k}={v}" for k, v in res.get("ppo_overrides", {}).items())
    print(f"{res['env']} ({res['steps']:,} steps, seeds {res['seeds']}, peer: {res['peer']} SB3"
          + (f"; ppo with {sets}" if sets else "") + "):")  # fmt: skip
    print(f"  median steps/s wall: ppo {f(ours['steps_per_second'], ',.0f')}, sb3 {f(peer['steps_per_second'], ',.0f')} "
          f"-> {f(res['steps_per_second_ratio'])}x; per CPU second: {f(m['ppo']['steps_per_cpu_second'], ',.0f')} vs "
          f"{f(m['sb3-ppo']['steps_per_cpu_second'], ',.0f')} -> {f(res['steps_per_cpu_second_ratio'])}x")  # fmt: skip
    print(f"  training time to >= {res['threshold']}: ppo {f(m['ppo']['time_to_threshold_s'])} s, sb3 "
          f"{f(m['sb3-ppo']['time_to_threshold_s'])} s -> sb3/ppo {f(res['time_to_threshold_speedup'])}; CPU "
          f"{f(m['ppo']['cpu_time_to_threshold_s'])} vs {f(m['sb3-ppo']['cpu_time_to_threshold_s'])} s -> "
          f"{f(res['cpu_time_to_threshold_speedup'])}")  # fmt: skip
    iq = res["final_iqm"]
    print(f"  final evaluation IQM [95% CI]: ppo {iq['ppo'][0]:.1f} [{iq['ppo'][1]:.1f}, {iq['ppo'][2]:.1f}], "
          f"sb3 {iq['sb3-ppo'][0]:.1f} [{iq['sb3-ppo'][1]:.1f}, {iq['sb3-ppo'][2]:.1f}]")  # fmt: skip
    print(f"  peak RSS: ppo {f(m['ppo']['peak_rss_mb'], '.0f')} MB, sb3 {f(m['sb3-ppo']['peak_rss_mb'], '.0f')} MB -> "
          f"{f(res['peak_rss_ratio'])}x")  # fmt: skip
    if "ppo_limit" in res:
        lim = res["ppo_limit"]
        print(f"  ppo's limit (env alone + network alone, CPU time, {lim['slice_steps']:,}-step slice): "
              f"{f(lim['limit_steps_per_cpu_second'], ',.0f')} steps/s; training at {f(lim['limit_fraction'])} of it; "
              f"the limit is {f(res['limit_over_sb3'])}x sb3's steps/s")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", action="append", help="env id (repeatable; default CartPole-v1)")
    ap.add_argument("--seeds", default="0-2")
    ap.add_argument("--steps", type=int, help="budget per trial (default: 100k; Pong 3,072)")
    ap.add_argument("--eval-freq", type=int, help="steps between evaluations (default: CartPole 5,120)")
    ap.add_argument("--eval-episodes", type=int, default=10)
    ap.add_argument("--limit-steps", type=int, default=20_480, help="slice for ppo's limit (0 = skip; Pong: 3,072)")
    ap.add_argument("--peer", choices=("auto", "standalone", "suite"), default="auto",
                    help="SB3 as its users run it (standalone) or the sb3-ppo trial (suite); auto: standalone on "
                    "CartPole and LunarLander, suite on Pong")  # fmt: skip
    ap.add_argument(
        "--ppo-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="hyperparameter override for the suite's ppo only (TOML value), e.g. grad_accumulation=4",
    )
    ap.add_argument("--output", default="results/benchmarks/ppo_vs_sb3.json")
    args = ap.parse_args()
    from suite.config import parse_assignments

    ppo_overrides = parse_assignments(args.ppo_set)
    results = []
    load = os.getloadavg()
    for env_id in args.env or ["CartPole-v1"]:
        steps = args.steps or DEFAULT_STEPS.get(env_id, 100_000)
        eval_freq = args.eval_freq or DEFAULT_EVAL_FREQ.get(env_id, 0)
        limit = min(args.limit_steps, 3_072) if env_id.startswith("ALE/") and args.limit_steps else args.limit_steps
        peer = args.peer if args.peer != "auto" else ("standalone" if env_id in ZOO else "suite")
        if peer == "standalone" and env_id not in ZOO:
            raise SystemExit(f"the standalone peer knows {', '.join(ZOO)} only")
        res = bench_env(env_id, parse_seeds(args.seeds), steps, eval_freq, args.eval_episodes, limit, peer, ppo_overrides)
        report(res)
        results.append(res)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "ppo_vs_sb3", "format_version": 2, "timestamp": utc_now_iso(), "args": vars(args),
        "load_average_start": load, "load_average_end": os.getloadavg(), "results": results,
        "machine": collect_provenance(1),
    }  # fmt: skip
    out.write_text(json.dumps(payload, indent=2, default=float))
    print(f"wrote {out} (load average {load[0]:.1f} at start, {os.getloadavg()[0]:.1f} at end)")


if __name__ == "__main__":
    main()
