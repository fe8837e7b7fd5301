"""Planted regressions: how the gate is shown to catch what it is for (used by the tests and the targets script).

:func:`make_planted_repo` copies a checkout's working tree into a new git repository with a ``base`` branch and one
throwaway commit per plant, so the gate runs on real revisions and never touches the original history. Each plant
is appended to a module as a wrapper around a stable interface (the trial's phases and envs, the PPO trainer's
loss), so it keeps working when the algorithms' internals are rewritten:

``slow-update``
    every ``update`` phase takes 30% longer (a busy wait, so it costs CPU like slower code would);
``slow-update-2x``
    every ``update`` phase takes twice as long: the test's plant, a slowdown that 2 repeats settle on a shared
    2-core machine (the 30% plant needs the gate's undecided repeats, up to 6: ``benchmarks/regress_targets.py``);
``wait-update``
    every ``update`` phase is followed by a sleep of 30% of its CPU time (as code that waits on I/O, a lock or
    another process would): no CPU time, so the CPU clock cannot see it; the unstarved wall clock must;
``wait-update-2x``
    every ``update`` phase sleeps as long again as it computed: the test's plant, like ``slow-update-2x``;
``flipped-loss``
    PPO's loss with a flipped sign (the returns collapse);
``obs-copy``
    the rollout keeps an extra float32 copy of every observation it collects (on Pong: 8 envs x 128 steps x
    4x84x84 frames = 115.6 MB more at the peak);
``alloc-128mb``
    the trial holds an extra 128 MB buffer (written, so resident) from its first rollout on: the CI-sized memory
    plant, caught on any env (CartPole's peak RSS is a few hundred MB, so +128 MB is far past the 1.1 factor), in
    seconds and without Atari;
``same``
    a README-only change: identical code, which must pass.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from suite.regress.revisions import working_tree_files


def _slow_update(extra: float, label: str, sleep: bool = False) -> tuple[str, str]:
    """A plant that makes every ``update`` phase take ``extra`` (a fraction) longer, by a busy wait after it, or by a
    sleep (``sleep=True``) of ``extra`` times the phase's CPU time.

    The busy wait runs until ``extra`` times the phase's wall time has passed; on a loaded machine it is starved as
    the phase was, so it costs about ``extra`` times the phase's CPU time whatever the load. A sleep is never starved:
    one as long as the phase's wall time would grow with the load (a phase that got a fifth of a CPU would sleep five
    times its run time), so it is measured on the CPU clock instead.
    """
    if sleep:
        how, clock = "sleep, like code that waits", "time.process_time()"
        wait = f"time.sleep({extra!r} * (time.process_time() - started[1]))"
    else:
        how, clock = "busy wait, like slower code", "time.perf_counter()"
        wait = (
            f"until = time.perf_counter() + {extra!r} * (time.perf_counter() - started[1])\n"
            "            while time.perf_counter() < until:  # spin, not sleep: the plant costs CPU time as a slower "
            "update would\n                continue"
        )
    return (
        "suite/trial.py",
        f"""
# planted regression: every "update" phase takes {label} longer ({how})
def _planted_slow_update(begin, end):
    def begin_phase(self, name):
        begin(self, name)
        self._planted_t0 = (name, {clock})

    def end_phase(self):
        started = getattr(self, "_planted_t0", None)
        self._planted_t0 = None
        if started is not None and started[0] == "update":
            {wait}
        end(self)

    return begin_phase, end_phase


TrialContext.begin_phase, TrialContext.end_phase = _planted_slow_update(TrialContext.begin_phase, TrialContext.end_phase)
""",
    )


SLOW_UPDATE = _slow_update(0.3, "30%")
SLOW_UPDATE_2X = _slow_update(1.0, "twice as long (100%)")
WAIT_UPDATE = _slow_update(0.3, "30%", sleep=True)
WAIT_UPDATE_2X = _slow_update(1.0, "twice as long (100%)", sleep=True)

FLIPPED_LOSS = (
    "suite/algorithms/ppo.py",
    """
# planted regression: PPO's loss with a flipped sign
_planted_loss = PPOTrainer.loss


def _flipped_loss(self, mb):
    loss, metrics = _planted_loss(self, mb)
    return -loss, metrics


PPOTrainer.loss = _flipped_loss  # another specification: PPO's registered accelerator (suite.accel) no longer applies
""",
)

OBS_COPY = (
    "suite/trial.py",
    """
# planted regression: the rollout keeps an extra float32 copy of every observation it collects
_planted_make_envs, _planted_begin = TrialContext.make_envs, TrialContext.begin_phase


def _make_envs_keeping_copies(self, n_envs, **kwargs):
    envs = _planted_make_envs(self, n_envs, **kwargs)
    step = envs.step
    self._planted_copies = []

    def step_and_copy(actions):
        out = step(actions)
        self._planted_copies.append(np.array(out[0], dtype=np.float32))
        return out

    envs.step = step_and_copy
    return envs


def _begin_phase_dropping_copies(self, name):
    if name == "rollout":
        self._planted_copies = []  # a new rollout: the copies of the last one go, this one's are kept
    _planted_begin(self, name)


TrialContext.make_envs, TrialContext.begin_phase = _make_envs_keeping_copies, _begin_phase_dropping_copies
""",
)

ALLOC_128MB = (
    "suite/trial.py",
    """
# planted regression: the trial holds an extra 128 MB buffer from its first rollout on
_planted_begin_alloc = TrialContext.begin_phase


def _begin_phase_allocating(self, name):
    if name == "rollout" and getattr(self, "_planted_buffer", None) is None:
        self._planted_buffer = np.ones(16 * 2**20)  # 16 Mi float64 = 128 MB, written: resident
    _planted_begin_alloc(self, name)


TrialContext.begin_phase = _begin_phase_allocating
""",
)

SAME = ("README.md", "\nA README-only change.\n")

PLANTS: dict[str, tuple[str, str]] = {
    "slow-update": SLOW_UPDATE, "slow-update-2x": SLOW_UPDATE_2X, "wait-update": WAIT_UPDATE,
    "wait-update-2x": WAIT_UPDATE_2X, "flipped-loss": FLIPPED_LOSS, "obs-copy": OBS_COPY, "alloc-128mb": ALLOC_128MB,
}  # fmt: skip
"""Plant name -> (file it is appended to, code)."""

_WHO = {"GIT_AUTHOR_NAME": "plant", "GIT_AUTHOR_EMAIL": "plant@localhost", "GIT_COMMITTER_NAME": "plant",
        "GIT_COMMITTER_EMAIL": "plant@localhost"}  # fmt: skip


def git(repo: Path, *args: str) -> str:
    """Run git in a throwaway repository, hermetically (no user or system config: signing, hooks, branch names)."""
    env = {
        **_WHO,
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env).stdout.strip()


def make_planted_repo(source: Path, dest: Path) -> Path:
    """A new git repository at ``dest`` holding ``source``'s working tree (without ``results/``) as branch ``base``,
    and one branch per plant of :data:`PLANTS` plus ``same``, each one commit on top of ``base``.

    Raises:
        ValueError: a plant's target file is missing (the plant must be updated to the code).
    """
    for rel in working_tree_files(source):
        if rel.startswith("results/"):
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / rel, dest / rel)
    git(dest, "init", "-q", "-b", "base")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "base")
    for name, (path, code) in {**PLANTS, "same": SAME}.items():
        if not (dest / path).is_file():
            raise ValueError(f"plant {name!r} targets {path}, which the copy of {source} does not have")
        git(dest, "checkout", "-q", "-b", name, "base")
        with open(dest / path, "a") as fh:
            fh.write(code)
        git(dest, "commit", "-q", "-am", f"plant {name}")
    git(dest, "checkout", "-q", "base")
    return dest
