"""Benchmark: what each memory toggle of the shared core saves, per phase, on CartPole, LunarLander and Pong.

The toggles are config fields of the PPO family (``suite profile memory --toggle NAME=VALUE`` drives them too):
``rollout_storage`` (numpy | torch), ``gae_chunk`` (0 | k), ``grad_accumulation`` (1 | k) and
``obs_storage_dtype`` (auto | float32 | float16). Each variant trains the same slice of ``ppo`` (two rollouts at
the zoo's settings, one short evaluation) in a fresh spawned process; a probe resets the kernel's peak-RSS counter
(``/proc/self/clear_refs``) when each phase starts and reads ``VmHWM`` when it ends, so every phase gets its own
resident peak. Also recorded: the process's peak RSS, RSS before training, and the bytes the rollout's
observation store holds. The saving of a variant is its peak over the baseline's (ratios < 1 save memory).

    python benchmarks/bench_memory_toggles.py                         # all three envs, 2 repeats
    python benchmarks/bench_memory_toggles.py --env ALE/Pong-v5 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
from pathlib import Path
from typing import Any

VARIANTS: dict[str, list[dict[str, Any]]] = {
    "baseline": [{}],
    "rollout_storage": [{"rollout_storage": "torch"}],
    "gae_chunk": [{"gae_chunk": 16}],
    "grad_accumulation": [{"grad_accumulation": 4}],
    "obs_storage_dtype": [{"obs_storage_dtype": "float32"}, {"obs_storage_dtype": "float16"}],
}
SLICES = {"CartPole-v1": 512, "LunarLander-v3": 32_768, "ALE/Pong-v5": 2_048}
"""Two rollouts of the zoo's settings on each env."""


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


class _PhasePeaks:
    """Resident peak per phase (``VmHWM`` after resetting it at phase entry)."""

    def __init__(self) -> None:
        self.peaks: dict[str, float] = {}

    def enter(self, phase: str) -> None:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    def exit(self, phase: str) -> None:
        self.peaks[phase] = max(self.peaks.get(phase, 0.0), _status_mb("VmHWM"))

    def summary(self) -> dict[str, dict[str, Any]]:
        return {}


def _child(env_id: str, overrides: dict[str, Any], conn: Any) -> None:
    from suite.trial import TrialContext, TrialSpec, seed_everything

    resolved = TrialSpec("ppo", env_id, 0, SLICES[env_id], overrides=overrides, n_eval_episodes=2,
                         eval_freq=SLICES[env_id]).resolve()  # fmt: skip
    seed_everything(0, 1)
    start = _status_mb("VmRSS")
    ctx = TrialContext(resolved)
    probe = _PhasePeaks()
    ctx.add_probe(probe)
    try:
        policy = resolved.algo.train(ctx, resolved.config)
        ctx.evaluate(policy, final=True)
    finally:
        ctx.end_phase()
        ctx.close()
    conn.send({"peak_rss_mb": max(probe.peaks.values()), "start_rss_mb": start, "phase_peak_mb": probe.peaks,
               "steps": ctx.steps})  # fmt: skip
    conn.close()


def _obs_store_bytes(env_id: str, overrides: dict[str, Any]) -> int:
    """Bytes of one rollout's observation store under these settings (computed, not measured)."""
    import numpy as np
    import torch

    from suite.algorithms.core import make_obs_store
    from suite.registry import get_algorithm

    cfg = get_algorithm("ppo").make_config(env_id, overrides)
    shape = (4, 84, 84) if env_id.startswith("ALE/") else (8,) if env_id.startswith("Lunar") else (4,)
    dtype = torch.uint8 if env_id.startswith("ALE/") else torch.float32
    x0 = torch.zeros((cfg.n_envs, *shape), dtype=dtype)
    store = make_obs_store(cfg.n_steps, cfg.n_envs, x0, env_id.startswith("ALE/"), cfg.obs_storage_dtype, "numpy")
    if hasattr(store, "used"):  # frames: a full rollout keeps ~1 frame per step (+3 per env to start)
        return int(cfg.n_steps * cfg.n_envs * np.prod(shape[1:]) + 3 * cfg.n_envs * np.prod(shape[1:]))
    return store.nbytes


def run(env_id: str, overrides: dict[str, Any]) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(env_id, overrides, child))
    proc.start()
    child.close()
    out = parent.recv()
    proc.join()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", action="append", help="env id (repeatable; default: CartPole, LunarLander, Pong)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--output", default="results/benchmarks/memory_toggles.json")
    args = ap.parse_args()
    results: dict[str, Any] = {}
    for env_id in args.env or list(SLICES):
        rows = []
        for toggle, variants in VARIANTS.items():
            for overrides in variants:
                runs = [run(env_id, overrides) for _ in range(args.repeats)]
                row = {
                    "toggle": toggle, "overrides": overrides, "runs": runs,
                    "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in runs),
                    "peak_rss_spread_mb": max(r["peak_rss_mb"] for r in runs) - min(r["peak_rss_mb"] for r in runs),
                    "start_rss_mb": statistics.median(r["start_rss_mb"] for r in runs),
                    "phase_peak_mb": {
                        p: statistics.median(r["phase_peak_mb"][p] for r in runs) for p in runs[0]["phase_peak_mb"]
                    },
                    "obs_store_bytes": _obs_store_bytes(env_id, overrides),
                }  # fmt: skip
                rows.append(row)
                base = rows[0]["peak_rss_mb"]
                phases = ", ".join(f"{p} {v:.0f}" for p, v in row["phase_peak_mb"].items())
                print(f"{env_id:15s} {json.dumps(overrides) or 'baseline':40s} peak {row['peak_rss_mb']:6.0f} MB "
                      f"(x{row['peak_rss_mb'] / base:.3f}, spread {row['peak_rss_spread_mb']:.0f}); per phase: {phases}; "
                      f"obs store {row['obs_store_bytes'] / 2**20:.2f} MiB", flush=True)  # fmt: skip
        results[env_id] = rows
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    from suite.provenance import collect_provenance, utc_now_iso

    out.write_text(json.dumps({"benchmark": "memory_toggles", "format_version": 1, "timestamp": utc_now_iso(),
                               "load_average": os.getloadavg(), "results": results, "machine": collect_provenance(1)},
                              indent=2, default=float))  # fmt: skip
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
