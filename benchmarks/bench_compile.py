"""Benchmark: ``torch.compile`` on ``ppo``'s update against the shared core's hand-derived update, side by side.

The issue asks for ``torch.compile`` "only where it measurably helps and its warm-up is paid back within the tier's
budget"; this measures both. Three paths train on the same fixed rollout (``ppo`` on the env with its zoo
hyperparameters: CartPole-v1's 256-sample rollout is one 256-sample minibatch per epoch, 20 epochs per update):

* ``hand-derived``: the suite's default (``suite/accel/``: the kernel's forward and backward by hand,
  the loss's derivatives in numpy, one fused Adam step);
* ``autograd``: the same trainer with its autograd loss (``trainer.accelerator = None``: modules, autograd backward);
* ``compiled``: that autograd loss through ``torch.compile`` (inductor, ``--mode``); its forward and backward graphs
  are compiled (AOTAutograd), the clipping and Adam step stay the suite's.

Each path runs in a fresh spawned process (one torch thread), the paths alternating repeat by repeat. Per run: one
update's seconds after warm-up (the median of ``--updates``), per train step, and the first update's extra time
(the warm-up: tracing and compiling for ``compiled``). The compiled path starts from an empty inductor cache (a
fresh ``TORCHINDUCTOR_CACHE_DIR``) unless ``--warm-cache``, which runs it once first to fill a cache, as a second
trial on the same machine would find it. The fixed rollout keeps the clip range constant; in a trial ``ppo``'s
CartPole clip range is a linear schedule, a new Python float every update, on which dynamo may specialise.

    python benchmarks/bench_compile.py --env CartPole-v1 --repeats 3 --json results/speed/compile-....json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from typing import Any

PATHS = ("hand-derived", "autograd", "compiled")


def _run(path: str, env_id: str, updates: int, mode: str, cache_dir: str | None, conn: Any) -> None:
    if cache_dir is not None:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir  # this process's inductor cache, set before torch loads
    import torch

    import suite.algorithms.actor_critic as ac
    from suite.trial import TrialContext, TrialSpec, seed_everything

    torch.set_num_threads(1)
    captured: dict[str, Any] = {}
    original = ac.ActorCriticTrainer.update

    class Captured(Exception):
        pass

    def capture(self: Any, rollout: Any, adv: Any, ret: Any, progress: float) -> Any:
        captured["args"] = (self, rollout, adv, ret, progress)
        raise Captured  # the first full rollout: stop the trial here

    ac.ActorCriticTrainer.update = capture  # type: ignore[method-assign]
    resolved = TrialSpec("ppo", env_id, 0, 10**6, n_eval_episodes=1).resolve()
    seed_everything(0, 1)
    ctx = TrialContext(resolved)
    try:
        resolved.algo.train(ctx, resolved.config)
    except Captured:
        pass
    finally:
        ac.ActorCriticTrainer.update = original  # type: ignore[method-assign]
    trainer, rollout, adv, ret, progress = captured["args"]
    if path != "hand-derived":
        trainer.accelerator = None
    if path == "compiled":
        trainer.loss = torch.compile(trainer.loss, mode=mode)
    t0 = time.perf_counter()
    out = trainer.update(rollout, adv, ret, progress)
    first = time.perf_counter() - t0
    times = []
    for _ in range(updates):
        t0 = time.perf_counter()
        trainer.update(rollout, adv, ret, progress)
        times.append(time.perf_counter() - t0)
    ctx.close()
    per_update = statistics.median(times)
    steps = int(out["n_minibatches"])
    conn.send({
        "path": path, "env": env_id, "train_steps_per_update": steps, "batch_size": trainer.cfg.batch_size,
        "update_s": per_update, "us_per_train_step": per_update / steps * 1e6, "warmup_s": first - per_update,
        "updates": updates, "kernel_fused": trainer.accelerator is not None, "torch": torch.__version__,
    })  # fmt: skip
    conn.close()


def run_isolated(path: str, env_id: str, updates: int, mode: str, cache_dir: str | None) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_run, args=(path, env_id, updates, mode, cache_dir, child))
    proc.start()
    child.close()
    out = parent.recv()
    proc.join()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--updates", type=int, default=30, help="timed updates per run after the first")
    p.add_argument("--mode", default="default", help="torch.compile mode (default, reduce-overhead, max-autotune, ...)")
    p.add_argument("--warm-cache", action="store_true", help="compile once first, then measure on that cache")
    p.add_argument("--json", help="also write every run and the summary to this file")
    args = p.parse_args()

    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-compile-") as tmp:
        warm_dir = os.path.join(tmp, "warm")
        if args.warm_cache:
            run_isolated("compiled", args.env, 1, args.mode, warm_dir)
        for r in range(args.repeats):
            order = PATHS if r % 2 == 0 else tuple(reversed(PATHS))
            for path in order:
                cache = (warm_dir if args.warm_cache else os.path.join(tmp, f"cold-{r}")) if path == "compiled" else None
                out = run_isolated(path, args.env, args.updates, args.mode, cache)
                out["repeat"] = r
                runs.append(out)
                print(f"repeat {r} {path:>12}: {out['us_per_train_step']:8.1f} us per train step of "
                      f"{out['batch_size']}, warm-up {out['warmup_s']:6.2f} s")  # fmt: skip
    summary: dict[str, Any] = {}
    for path in PATHS:
        mine = [x for x in runs if x["path"] == path]
        summary[path] = {
            "us_per_train_step": statistics.median(x["us_per_train_step"] for x in mine),
            "warmup_s": statistics.median(x["warmup_s"] for x in mine),
        }
    base = summary["hand-derived"]["us_per_train_step"]
    for path in PATHS:
        summary[path]["vs_hand_derived"] = summary[path]["us_per_train_step"] / base
        s = summary[path]
        print(f"{path:>12}: {s['us_per_train_step']:8.1f} us per train step ({s['vs_hand_derived']:.2f}x the "
              f"hand-derived step), warm-up {s['warmup_s']:.2f} s")  # fmt: skip
    if args.json:
        from suite.provenance import collect_provenance

        with open(args.json, "w") as f:
            json.dump({"benchmark": "compile", "args": vars(args), "runs": runs, "summary": summary,
                       "machine": collect_provenance(1)}, f, indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
