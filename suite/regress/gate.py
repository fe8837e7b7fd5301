"""``suite regress``: build the revisions, run them interleaved, decide, write; the exit code is the verdict.

Three modes share the machinery of the sibling modules:

* ``BASE [HEAD]``: build both (HEAD: the working tree by default), run the study interleaved, compare;
* ``--against-reference [HEAD]``: run HEAD only and compare it with ``results/reference/``;
* ``--write-reference [REV]``: run REV (default: the committed ``HEAD``) and write ``results/reference/``.

Exit codes: 0 pass, 1 HEAD is worse on something (or cannot be built or run at all), 2 a user mistake (unknown
revision, dirty tree where a commit is needed, bad option; BASE cannot be built or run), 130 interrupted (run
the same command again to resume).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from suite.errors import UserError
from suite.interrupts import Interrupted
from suite.kernels import default_mode
from suite.regress.build import Build, Builder, default_cache_dir
from suite.regress.compare import GroupResult, Thresholds, compare, rule_text, undecided
from suite.regress.output import Context, terminal_table, write_outputs
from suite.regress.plan import Plan, make_plans, plans_id
from suite.regress.records import load_slot
from suite.regress.reference import REFERENCE_DIR, REGENERATE, Reference, write_reference
from suite.regress.revisions import Revision, is_dirty, repo_root, resolve_commit, working_tree
from suite.regress.runner import SCHEDULES, RevisionFailed, Slot, Unit, batches, interleaved, machine, run_batch

EXIT_PASS, EXIT_FAIL = 0, 1
RUNS_DIR = Path("results") / "regress"
"""Parent of the default run folders, relative to the current directory (like ``results/suite.db``)."""
DEFAULT_REPEATS = 2
"""Runs per revision: with the studies' seeds, 2 repeats give >= 2 interleaved pairs per comparison (6 with 3 seeds)."""
DEFAULT_MAX_REPEATS = 6
"""Runs per revision an undecided comparison may reach (:func:`suite.regress.compare.undecided`): measured on the
shared 2-core machine, a twin pair's HEAD/BASE ratio of CPU-time steps/s spreads by 0.13-0.19 (sd of the log) even
with the twins side by side, so 2 repeats leave a ~20% slowdown's interval straddling the threshold; only the
undecided comparison's algorithm and env run again (seconds each), not the whole study."""
REPORT_REPS = 2000
"""Bootstrap replications of the side-by-side study report (its CIs are context; the gate has its own tests)."""


@dataclass
class RegressOptions:
    """Everything ``suite regress`` takes (the CLI's flags)."""

    base: str | None = None
    """BASE revision (interleaved mode)."""
    head: str | None = None
    """HEAD revision; None = the working tree, uncommitted changes included."""
    studies: list[str] = field(default_factory=list)
    """Study names or paths; default :data:`~suite.regress.plan.DEFAULT_STUDIES`."""
    tier: str | None = None
    seeds: str | None = None
    repeats: int | None = None
    """Runs per revision; default :data:`DEFAULT_REPEATS` (a reference: its own count)."""
    max_repeats: int | None = None
    """Runs per revision an undecided comparison may reach (BASE HEAD mode); default :data:`DEFAULT_MAX_REPEATS`,
    never below ``repeats`` (equal: no extra runs)."""
    threads: int | None = None
    workers: int = 1
    """Parallel trials inside each run (1: trials do not compete with each other for the CPU)."""
    schedule: str | None = None
    """``concurrent`` (the revisions' runs side by side), ``interleaved`` (one at a time, alternating), or None:
    concurrent where the machine has a CPU per revision and run (:func:`default_schedule`)."""
    thresholds: Thresholds = field(default_factory=Thresholds)
    against_reference: bool = False
    write_reference: bool = False
    reference: Path | None = None
    """Reference folder; default ``<repository>/results/reference``."""
    cache: Path | None = None
    deps_env: Path | None = None
    output: Path | None = None
    """Run folder; default ``results/regress/<base>-<head>-<study>/``."""
    report: bool = True
    """Also write the normal study report of both revisions under ``<run>/report/``."""
    quiet: bool = False
    repo: Path | None = None
    """Checkout the revisions come from; default: the one containing the current directory."""
    kernels: str | None = None
    """Kernel mode of every revision's trials (:mod:`suite.kernels`); None: the reference's against a reference,
    portable when writing one, else the default mode."""


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


EXIT_TERMINATED = 143


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(EXIT_TERMINATED)  # unwinds like Ctrl-C: the revisions' runs are stopped, finished trials kept


def regress(opts: RegressOptions, say: Callable[[str], None] = _say) -> int:
    """Run ``suite regress`` (see the module docstring); return the exit code. SIGTERM (in the main thread) stops the
    revisions' runs and exits 143, keeping what finished, like Ctrl-C (130)."""
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
        try:
            return _regress(opts, say)
        finally:
            signal.signal(signal.SIGTERM, previous)
    return _regress(opts, say)


def _regress(opts: RegressOptions, say: Callable[[str], None]) -> int:
    _validate(opts)
    repo = repo_root(opts.repo or Path.cwd())
    if opts.write_reference:
        return _write_reference(opts, repo, say)
    if opts.against_reference:
        return _against_reference(opts, repo, say)
    assert opts.base is not None
    base = resolve_commit(repo, opts.base)
    head = resolve_commit(repo, opts.head) if opts.head else working_tree(repo)
    builder = _builder(opts, repo, say)
    base_build = _build(builder, base, "base", say)
    head_build = _build(builder, head, "head", say)
    if base.key == head.key:
        say("note: BASE and HEAD are the same code: an A/A run, which measures the gate's noise")
    plans = make_plans(opts.studies, tier=opts.tier, seeds=opts.seeds, threads=opts.threads,
                       capabilities=[base_build.capabilities, head_build.capabilities])  # fmt: skip
    repeats = opts.repeats or DEFAULT_REPEATS
    run_dir = (opts.output or RUNS_DIR / f"{base.short[:8]}-{head.short[:8]}-{plans_id(plans)}").absolute()
    builds = {"base": base_build, "head": head_build}
    slots_log = _run(builds, plans, run_dir, repeats, opts, say)
    runs = _load_runs(run_dir, builds, repeats)
    results = compare(runs, opts.thresholds)
    ceiling = max(opts.max_repeats or DEFAULT_MAX_REPEATS, repeats)
    notes: list[str] = []
    for extra in range(repeats, ceiling):
        units = _undecided_units(results, plans, opts.thresholds)
        if not units:
            break
        listed = ", ".join(f"{u.algo}/{u.env} ({u.part})" for u in units)
        say(f"undecided after {extra} repeats: {listed}; repeat {extra + 1} of those (at most {ceiling})")
        notes.append(f"repeat {extra + 1} ran only the undecided {listed}")
        slots_log += _run(builds, plans, run_dir, extra + 1, opts, say, only=(extra, units))
        runs = _load_runs(run_dir, builds, extra + 1)
        results = compare(runs, opts.thresholds)
    reached = int(runs["repeat"].max()) + 1 if not runs.empty else repeats
    mode = opts.schedule or "interleaved"
    ctx = _context(base.describe(), head.describe(), plans, reached, mode, slots_log, notes, run_dir)
    return _finish(results, runs, ctx, opts, say, builds)


def _undecided_units(results: Sequence[GroupResult], plans: Sequence[Plan], t: Thresholds) -> list[Unit]:
    """The slots' units (study, algorithm, env) holding a comparison that more repeats could decide."""
    wanted = {(g.algo, g.env_id, g.budget) for g in results if undecided(g, t)}
    out: list[Unit] = []
    for plan in plans:
        for algo, env in plan.units:
            if any((algo, env, grp.budget) in wanted for grp in plan.groups if (grp.algo, grp.env.id) == (algo, env)):
                out.append(Unit(plan.study.name, algo, env))
    return out


# -- modes ---------------------------------------------------------------------------------------------------
def _against_reference(opts: RegressOptions, repo: Path, say: Callable[[str], None]) -> int:
    ref = Reference(opts.reference or repo / REFERENCE_DIR)
    if opts.kernels and opts.kernels != ref.kernels:
        raise UserError(f"the reference ran in {ref.kernels} kernel mode; --kernels {opts.kernels} would give other "
                        f"trial keys (regenerate it with '{REGENERATE} --kernels {opts.kernels}')")  # fmt: skip
    opts.kernels = ref.kernels
    head = resolve_commit(repo, opts.head) if opts.head else working_tree(repo)
    head_build = _build(_builder(opts, repo, say), head, "head", say)
    plans = make_plans([str(f) for f in ref.study_files], tier=None, seeds=None, threads=None,
                       capabilities=[head_build.capabilities])  # fmt: skip
    for plan, file in zip(plans, ref.study_files, strict=True):
        if plan.toml != file.read_text():
            say(f"note: HEAD runs part of the reference's study {plan.study.name!r} only: "
                + ("; ".join(plan.skipped) or "the study file differs"))  # fmt: skip
    repeats = opts.repeats or ref.repeats
    key = str(ref.provenance.get("content_key"))[:8]
    run_dir = (opts.output or RUNS_DIR / f"reference-{key}-{head.short[:8]}-{plans_id(plans)}").absolute()
    builds = {"head": head_build}
    slots_log = _run(builds, plans, run_dir, repeats, opts, say)
    runs = pd.concat([ref.runs[ref.runs["repeat"] < repeats], _load_runs(run_dir, builds, repeats)], ignore_index=True)
    mismatch = ref.machine_mismatch(machine())
    notes = [mismatch + ": memory ratios compare different machines too"] if mismatch else []
    results = compare(runs, opts.thresholds, paired_speed=False)
    ctx = _context(ref.describe(), head.describe(), plans, repeats, "reference", slots_log, notes, run_dir)
    return _finish(results, runs, ctx, opts, say, builds)


def _write_reference(opts: RegressOptions, repo: Path, say: Callable[[str], None]) -> int:
    if opts.head:
        rev = resolve_commit(repo, opts.head)
    else:
        if is_dirty(repo):
            raise UserError("the working tree has uncommitted changes: a reference must name the commit it came from; "
                            "commit them, or name a revision ('suite regress --write-reference REV')")  # fmt: skip
        rev = working_tree(repo)
    assert rev.commit is not None
    opts.kernels = opts.kernels or "portable"  # a reference is checked on other machines: the same bits there
    build = _build(_builder(opts, repo, say), rev, "base", say)
    plans = make_plans(opts.studies, tier=opts.tier, seeds=opts.seeds, threads=opts.threads,
                       capabilities=[build.capabilities])  # fmt: skip
    repeats = opts.repeats or DEFAULT_REPEATS
    run_dir = (opts.output or RUNS_DIR / f"reference-build-{rev.short[:8]}-{plans_id(plans)}").absolute()
    builds = {"base": build}
    _run(builds, plans, run_dir, repeats, opts, say)
    runs = _load_runs(run_dir, builds, repeats)
    first = _first_provenance(run_dir / "base" / "r0" / "suite.db")
    folder = opts.reference or repo / REFERENCE_DIR
    files = write_reference(
        folder, runs=runs, studies={p.study.name: p.toml for p in plans}, commit=rev.commit, key=rev.key,
        repeats=repeats, machine=machine(),
        packages=first.get("packages", {}), suite_version=str(first.get("suite_version")), kernels=opts.kernels,
    )  # fmt: skip
    size = sum(f.stat().st_size for f in files)
    say(f"reference written to {folder} ({len(runs)} trial runs of {rev.describe()}, {size / 1024:.0f} KB); "
        f"records in {run_dir}")  # fmt: skip
    return EXIT_PASS


# -- steps -----------------------------------------------------------------------------------------------------
def _validate(opts: RegressOptions) -> None:
    if opts.against_reference and opts.write_reference:
        raise UserError("--against-reference and --write-reference exclude each other")
    if opts.against_reference or opts.write_reference:
        if opts.base is not None and opts.head is not None:
            raise UserError("with --against-reference or --write-reference give at most one revision")
        if opts.base is not None:  # the one positional revision is HEAD (or the revision the reference is made of)
            opts.head, opts.base = opts.base, None
    elif opts.base is None:
        raise UserError("give a BASE revision to compare with (e.g. 'suite regress main'), or --against-reference")
    if opts.against_reference and (opts.studies or opts.tier or opts.seeds or opts.threads):
        raise UserError("--against-reference runs the reference's own study: --study, --tier, --seeds and --threads "
                        "do not apply (regenerate the reference to change them)")  # fmt: skip
    if opts.repeats is not None and opts.repeats < 1:
        raise UserError(f"--repeats must be >= 1, got {opts.repeats}")
    if opts.max_repeats is not None and opts.max_repeats < 1:
        raise UserError(f"--max-repeats must be >= 1, got {opts.max_repeats}")
    if opts.workers < 1:
        raise UserError(f"--workers must be >= 1, got {opts.workers}")
    if opts.schedule is None:
        opts.schedule = default_schedule(opts.workers)
    if opts.schedule not in SCHEDULES:
        raise UserError(f"unknown --schedule {opts.schedule!r}; allowed: {', '.join(SCHEDULES)}")


def default_schedule(workers: int = 1) -> str:
    """``concurrent`` where this process may use a CPU for each revision's runs (2 x workers), else ``interleaved``.

    Measured on the shared 2-core dev machine (load 6-8, the regression study, A/A): the spread of the per-trial
    HEAD/BASE ratio of CPU-time steps/s was 0.044 (log units) with the two revisions running side by side and 0.15-0.22
    with them alternating a run at a time, because the load of the moment hits twins alike; see the README.
    """
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return "concurrent" if usable >= 2 * workers else "interleaved"


def _builder(opts: RegressOptions, repo: Path, say: Callable[[str], None]) -> Builder:
    deps_env = opts.deps_env.absolute() if opts.deps_env else None
    return Builder(repo, default_cache_dir(opts.cache).absolute(), deps_env=deps_env, log=lambda line: say(f"  {line}"))


def _build(builder: Builder, rev: Revision, side: str, say: Callable[[str], None]) -> Build:
    try:
        build = builder.build(rev)
    except UserError as exc:
        if side == "head":
            raise RevisionFailed("head", f"HEAD {rev.describe()} cannot be built: {exc}") from None
        raise UserError(f"BASE {rev.describe()} cannot be built: {exc}") from None
    cost = ", ".join(f"{k} {v:.1f} s" for k, v in build.seconds.items()) or "cached"
    say(f"{side.upper()}: {rev.describe()} built ({cost})")
    return build


def _run(builds: dict[str, Build], plans: Sequence[Plan], run_dir: Path, repeats: int, opts: RegressOptions,
         say: Callable[[str], None], only: tuple[int, Sequence[Unit]] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Run every slot not yet done (``only``: the slots of one more repeat of these units); return the log of the
    slots run now."""
    from tqdm import tqdm

    run_dir.mkdir(parents=True, exist_ok=True)
    by_name = {p.study.name: p for p in plans}
    for plan in plans:
        (run_dir / plan.file_name).write_text(plan.toml)
    _write_manifest(run_dir, builds, plans, repeats, opts)
    units = [Unit(p.study.name, algo, env) for p in plans for algo, env in p.units]
    if only is None:
        slots = interleaved(list(builds), repeats, units)
    else:
        slots = [s for s in interleaved(list(builds), only[0] + 1, list(only[1])) if s.repeat == only[0]]
    todo = [s for s in slots if not s.done(run_dir)]
    schedule = opts.schedule if len(builds) > 1 and opts.schedule else "interleaved"
    if only is None:
        for plan in plans:
            say(f"study {plan.study.name!r} ({plan.tier} tier): {len(plan.groups)} (algorithm, env) x {len(plan.seeds)} "
                f"seeds = {plan.n_trials} trials")  # fmt: skip
            for note in plan.skipped:
                say(f"note: left out of {plan.study.name!r}: {note}")
        say(f"{len(slots)} runs ({' and '.join(builds)}, {repeats} repeats, {schedule}), {len(slots) - len(todo)} "
            f"already done; results in {run_dir}")  # fmt: skip
    size = {Unit(p.study.name, algo, env): p.unit_trials(algo, env) for p in plans for algo, env in p.units}
    total = sum(size[s.unit] for s in slots)
    bar = tqdm(total=total, initial=total - sum(size[s.unit] for s in todo), unit="trial", disable=opts.quiet,
               dynamic_ncols=True, file=sys.stderr, mininterval=1.0)  # fmt: skip
    log: list[dict[str, Any]] = []
    try:
        for batch in batches(todo, schedule):
            start, n = bar.n, sum(size[s.unit] for s in batch)
            first = batch[0]
            bar.set_description(f"repeat {first.repeat + 1}/{repeats} {'+'.join(s.side for s in batch)} {first.unit.name}")

            def progress(count: int, start: int = start, n: int = n) -> None:
                delta = min(max(count, 0), n) + start - bar.n
                if delta > 0:
                    bar.update(delta)

            study_file = run_dir / by_name[first.part].file_name
            log.extend(run_batch(builds, batch, run_dir, study_file, workers=opts.workers, on_progress=progress,
                                 kernels=opts.kernels or default_mode()))  # fmt: skip
            progress(n)
    except (KeyboardInterrupt, SystemExit, Interrupted):
        bar.close()
        say(f"suite: interrupted; finished trials are kept in {run_dir}. Run the same command again to resume.")
        raise
    finally:
        with open(run_dir / "slots.jsonl", "a") as fh:
            for entry in log:
                fh.write(json.dumps(entry) + "\n")
    bar.close()
    return log


def _context(base: str, head: str, plans: Sequence[Plan], repeats: int, mode: str, slots: list[dict[str, Any]],
             notes: list[str], run_dir: Path) -> Context:  # fmt: skip
    skipped = [f"left out of {p.study.name!r}: {n}" for p in plans for n in p.skipped]
    return Context(base, head, {p.study.name: p.tier for p in plans}, {p.study.name: list(p.seeds) for p in plans},
                   repeats, mode, machine(), slots, skipped + notes, run_dir)  # fmt: skip


def _write_manifest(
    run_dir: Path, builds: dict[str, Build], plans: Sequence[Plan], repeats: int, opts: RegressOptions
) -> None:
    manifest = {
        "revisions": {side: {**b.revision.__dict__, "venv": str(b.venv), "deps": str(b.deps)} for side, b in builds.items()},
        "studies": [{"name": p.study.name, "file": p.file_name, "tier": p.tier, "seeds": list(p.seeds), "threads": p.threads}
                    for p in plans],
        "repeats": repeats, "workers": opts.workers, "schedule": opts.schedule, "thresholds": opts.thresholds.__dict__,
        "command": sys.argv, "cwd": os.getcwd(),
    }  # fmt: skip
    (run_dir / "run.json").write_text(json.dumps(manifest, indent=2, default=str))


def _load_runs(run_dir: Path, builds: dict[str, Build], repeats: int) -> pd.DataFrame:
    frames = [load_slot(Slot(side, r).db(run_dir), side, r) for side in builds for r in range(repeats)]
    return pd.concat([f for f in frames if not f.empty], ignore_index=True)


def _first_provenance(db: Path) -> dict[str, Any]:
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        row = conn.execute("SELECT provenance FROM trials LIMIT 1").fetchone()
    return json.loads(row[0]) if row and row[0] else {}


def _finish(results: Sequence[GroupResult], runs: pd.DataFrame, ctx: Context, opts: RegressOptions,
            say: Callable[[str], None], builds: dict[str, Build]) -> int:  # fmt: skip
    print(terminal_table(results))
    print()
    for line in rule_text(opts.thresholds, ctx.speed_gated):
        print(f"  {line}")
    for note in ctx.notes:
        print(f"  note: {note}")
    for g in results:
        for note in g.notes:
            print(f"  note: {g.algo} / {g.env_label}: {note}")
    files = write_outputs(results, runs, ctx, opts.thresholds)
    if opts.report:
        _side_by_side_report(ctx.run_dir, list(builds), ctx.tiers_by_study, say)
    failing = [g for g in results if g.failures]
    print(f"\n{'FAIL' if failing else 'PASS'}: {len(failing)} of {len(results)} comparisons fail; "
          f"verdicts in {files['regression.html']}")  # fmt: skip
    return EXIT_FAIL if failing else EXIT_PASS


def _side_by_side_report(run_dir: Path, sides: list[str], tiers: Mapping[str, str], say: Callable[[str], None]) -> None:
    """The normal study report of repeat 0 of every side, algorithms labelled ``<algo>@<side>``."""
    import tempfile

    from suite.regress.records import copy_database
    from suite.report import write_report
    from suite.store import ResultsStore

    combined = run_dir / "report.db"
    combined.unlink(missing_ok=True)
    with ResultsStore(combined) as out:
        keys: dict[str, list[str]] = {}
        for side in sides:
            db = Slot(side, 0).db(run_dir)
            if not db.is_file():
                continue
            with tempfile.TemporaryDirectory(prefix="suite-regress-") as tmp:
                copy = Path(tmp) / "copy.db"
                copy_database(db, copy)
                with ResultsStore(copy, create=False) as src:
                    for key in src.trials()["key"]:
                        record = src.get_trial(key)
                        assert record is not None
                        part = str(record["study"])
                        record.update(key=f"{side}-{key}", algo=f"{record['algo']}@{side}", study="regress")
                        out.save_trial(record)
                        keys.setdefault(part, []).append(record["key"])
        for part, part_keys in keys.items():
            out.add_to_study("regress", part_keys, tier=tiers.get(part))
    try:
        index = write_report(study="regress", db=combined, out_dir=run_dir / "report", reps=REPORT_REPS)
    except UserError as exc:
        say(f"note: no side-by-side report: {exc}")
        return
    say(f"side-by-side study report: {index}")
