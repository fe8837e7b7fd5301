"""Re-encode committed results databases in the current format (``suite migrate``), checking that nothing but the
update rows' resolution changed.

For each database: a copy of the file as it is is read with plain ``sqlite3`` in its own (older) layout; the file is
then migrated in place (upgraded, update rows binned, VACUUMed) and read back through :class:`ResultsStore`. Every
trial's row (key, config, outcome, provenance: every column), its study memberships, its learning curve and its
evaluations must be identical, bit for bit; its update rows must cover the same updates (count, first and last update
number and env step of every bin, exact) with each bin's mean, minimum and maximum those of the original rows.
Any difference restores the original file and exits 1.

``--drop-superseded`` also deletes the trials of an algorithm version other than the registered one (e.g.
``ppo-rlvr-prm`` 1.3.0 and 1.4.0 beside 1.5.0): no claim table reads them, since a trial's key holds its algorithm's
version, and git keeps them in the history. It is the one step that removes trials; each is listed, and every trial
kept must be identical as above.

    python benchmarks/reencode_records.py                      # every tracked reports/**/records.db
    python benchmarks/reencode_records.py reports/claims/zoo-benchmark/records.db
    python benchmarks/reencode_records.py --drop-superseded reports/claims/ppo-rlvr-prm-ablation/records.db
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from suite.store import ResultsStore

I8, F8 = np.dtype("<i8"), np.dtype("<f8")


def _tracked_databases() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "reports/**/records.db", "reports/*/records.db"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return sorted({Path(line) for line in out.splitlines() if line})


def _old_rows(conn: sqlite3.Connection) -> dict[str, Any]:
    """Everything a version-1/2 (or 3) file holds, keyed by trial, in plain Python/numpy."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    trials = {row[0]: row for row in conn.execute("SELECT * FROM trials ORDER BY key")}
    columns = [d[1] for d in conn.execute("PRAGMA table_info(trials)")]
    study = sorted(conn.execute("SELECT study, key, tier FROM study_trials"))
    if version >= 3:
        raise SystemExit(f"{conn}: already schema {version}; compare against a schema-2 copy")
    curves = {k: (np.frombuffer(s, I8), np.frombuffer(r, F8), np.frombuffer(ln, I8))
              for k, s, r, ln in conn.execute("SELECT key, step_i8, return_f8, length_i8 FROM curves")}  # fmt: skip
    evals: dict[str, list[tuple[Any, ...]]] = {}
    for key, *rest in conn.execute('SELECT key, step, final, episode, "return", length, wall_time_s FROM evals'
                                   " ORDER BY key, idx, episode"):  # fmt: skip
        evals.setdefault(key, []).append(tuple(rest))
    updates = {}
    for key, n, metrics, u, s, v in conn.execute("SELECT key, n, metrics, update_i8, step_i8, values_f8 FROM updates"):
        names = json.loads(metrics)
        updates[key] = (names, np.frombuffer(u, I8), np.frombuffer(s, I8), np.frombuffer(v, F8).reshape(n, len(names)))
    return {"columns": columns, "trials": trials, "study": study, "curves": curves, "evals": evals, "updates": updates}


def _same_float(a: float | None, b: float) -> bool:
    return (a is None and np.isnan(b)) or (a is not None and (a == b or (np.isnan(a) and np.isnan(b))))


def _superseded(conn: sqlite3.Connection) -> dict[str, tuple[str, str]]:
    """``{key: (algo, version)}`` of the trials whose algorithm version is not the registered one."""
    import suite.algorithms  # noqa: F401  (fills the registry)
    from suite.registry import get_algorithm

    out = {}
    for key, algo, version in conn.execute("SELECT key, algo, algo_version FROM trials"):
        if str(get_algorithm(algo).version) != version:
            out[key] = (algo, version)
    return out


def _drop(old: dict[str, Any], keys: set[str]) -> None:
    """Forget ``keys`` in the old content, so that the comparison expects them gone."""
    for part in ("trials", "curves", "evals", "updates"):
        for key in keys:
            old[part].pop(key, None)
    old["study"] = [row for row in old["study"] if row[1] not in keys]


def _compare(old: dict[str, Any], store: ResultsStore) -> list[str]:
    """Differences between the old file's content and the migrated store (empty: identical but the binning)."""
    problems: list[str] = []
    conn = store._conn
    new_trials = {row[0]: row for row in conn.execute(f"SELECT {', '.join(old['columns'])} FROM trials ORDER BY key")}
    if new_trials != old["trials"]:
        problems.append(f"trial rows differ ({len(old['trials'])} before, {len(new_trials)} after)")
    if sorted(conn.execute("SELECT study, key, tier FROM study_trials")) != old["study"]:
        problems.append("study memberships differ")
    curves = store.curves()
    for key, (step, ret, length) in old["curves"].items():
        got = curves[curves["key"] == key]
        if not (np.array_equal(got["step"].to_numpy(), step) and np.array_equal(got["length"].to_numpy(), length)
                and got["return"].to_numpy().tobytes() == ret.astype(np.float64).tobytes()):  # fmt: skip
            problems.append(f"{key[:12]}: curve differs")
    evals = store.evals()
    for key in old["trials"]:
        rows = old["evals"].get(key, [])
        got = evals[evals["key"] == key]
        if len(got) != len(rows):
            problems.append(f"{key[:12]}: {len(rows)} eval episodes before, {len(got)} after")
            continue
        new_rows = got[["step", "final", "episode", "return", "length", "wall_time_s"]].itertuples(index=False, name=None)
        for (step, final, episode, ret, length, wall), new in zip(rows, new_rows, strict=True):
            if (step, bool(final), episode) != new[:3] or not (
                _same_float(ret, new[3]) and _same_float(length, new[4]) and _same_float(wall, new[5])
            ):
                problems.append(f"{key[:12]}: eval episode differs")
                break
    bins = store.update_bins()
    for key, (names, update_no, step, values) in old["updates"].items():
        got = bins[bins["key"] == key]
        counts = got["bin_size"].to_numpy()
        if counts.sum() != len(update_no):
            problems.append(f"{key[:12]}: {len(update_no)} updates before, {counts.sum()} after")
            continue
        if not len(update_no):
            continue
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        ends = starts + counts - 1
        exact = [("update_first", update_no[starts]), ("update_last", update_no[ends]),
                 ("step_first", step[starts]), ("step_last", step[ends])]  # fmt: skip
        for column, want in exact:
            if not np.array_equal(got[column].to_numpy(), want):
                problems.append(f"{key[:12]}: {column} differs")
        full = len(got) == len(update_no)
        for j, name in enumerate(names):
            col = values[:, j]
            if full:  # not binned: every value exact
                if got[name].to_numpy().tobytes() != col.astype(np.float64).tobytes():
                    problems.append(f"{key[:12]}: update metric {name} differs")
                continue
            with np.errstate(all="ignore"):
                mean = np.array([np.nanmean(col[a : b + 1]) if (~np.isnan(col[a : b + 1])).any() else np.nan
                                 for a, b in zip(starts, ends, strict=True)])  # fmt: skip
            low = np.fmin.reduceat(col, starts).astype(np.float32)
            high = np.fmax.reduceat(col, starts).astype(np.float32)
            if not (np.allclose(got[name].to_numpy(), mean.astype(np.float32), rtol=1e-5, atol=0, equal_nan=True)
                    and np.array_equal(got[f"{name}_min"].to_numpy(), low.astype(np.float64), equal_nan=True)
                    and np.array_equal(got[f"{name}_max"].to_numpy(), high.astype(np.float64), equal_nan=True)):  # fmt: skip
                problems.append(f"{key[:12]}: binned update metric {name} is not the mean/min/max of its updates")
    return problems


def reencode(path: Path, drop_superseded: bool) -> bool:
    size_before = path.stat().st_size
    with tempfile.TemporaryDirectory() as tmp:
        original = Path(tmp) / "original.db"
        shutil.copy2(path, original)
        with sqlite3.connect(f"file:{original}?mode=ro", uri=True) as conn:
            old = _old_rows(conn)
            dropped = _superseded(conn) if drop_superseded else {}
        _drop(old, set(dropped))
        try:
            with ResultsStore(path, create=False) as store:
                if dropped:
                    with store._transaction() as conn:
                        for table in ("trials", "curves", "evals", "updates", "study_trials"):
                            conn.executemany(f"DELETE FROM {table} WHERE key = ?", [(k,) for k in dropped])
                trials, rows_before, rows_after = store.bin_updates()
                store.compact()
            with ResultsStore(path, create=False) as store:
                problems = _compare(old, store)
        except Exception as exc:  # a failed check must never leave a half-checked file behind
            problems = [f"{type(exc).__name__}: {exc}"]
        if problems:
            shutil.copy2(original, path)
            for suffix in ("-wal", "-shm"):
                path.with_name(path.name + suffix).unlink(missing_ok=True)
            print(f"{path}: NOT re-encoded, restored: {'; '.join(problems[:5])}", file=sys.stderr)
            return False
    if dropped:
        counts: dict[tuple[str, str], int] = {}
        for pair in dropped.values():
            counts[pair] = counts.get(pair, 0) + 1
        listed = ", ".join(f"{n} {algo} {version}" for (algo, version), n in sorted(counts.items()))
        print(f"{path}: dropped {len(dropped)} trials of superseded algorithm versions ({listed}):")
        for key in sorted(dropped):
            print(f"  {key}")
    print(f"{path}: {len(old['trials'])} trials identical; {trials} binned ({rows_before:,} -> {rows_after:,} update rows);"
          f" {size_before / 1e6:.2f} MB -> {path.stat().st_size / 1e6:.2f} MB")  # fmt: skip
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("databases", nargs="*", type=Path, help="default: every tracked reports/**/records.db")
    parser.add_argument("--drop-superseded", action="store_true", help="also delete trials of superseded algorithm versions")
    args = parser.parse_args()
    paths = args.databases or _tracked_databases()
    ok = [reencode(p, args.drop_superseded) for p in paths]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
