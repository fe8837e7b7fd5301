"""Merging the trials of another results database into this one (records of several machines become one)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from suite.errors import UserError
from suite.kernels import check_mode as check_kernels
from suite.store.queries import StoreQueries
from suite.store.schema import TRIAL_COLUMNS


@dataclass(frozen=True)
class MergeResult:
    """What :meth:`ResultsStore.merge_from` did."""

    source: str
    added: int
    """Trials copied (absent here before)."""
    identical: int
    """Trials already here with the same outcome (status, steps, final evaluation): this database's kept."""
    differing: list[str]
    """Keys already here whose outcome differs in the source: this database's record kept, listed for the user."""
    conflicts: tuple[Conflict, ...] = ()
    """The records behind :attr:`differing`, each side's kernel mode and CPU (why they differ, mostly)."""


@dataclass(frozen=True)
class Conflict:
    """A key both databases hold with other outcomes. The kernel mode is part of the key (portable keys say so), so
    the two records always ran in the same mode; native records of one key differ between CPUs of other vector
    widths (:mod:`suite.kernels`), portable ones should not."""

    key: str
    kernels: str
    """``native`` or ``portable`` (the same on both sides)."""
    cpu_here: str | None
    cpu_source: str | None

    def describe(self) -> str:
        """``3f2a1b2c4d5e (native: AMD EPYC ... here, Intel Xeon ... in the source)``."""
        where = f"{self.cpu_here} here, {self.cpu_source} in the source"
        if self.cpu_here == self.cpu_source:
            where = f"both on {self.cpu_here}"
        return f"{self.key[:12]} ({self.kernels}: {where})"


class StoreMerge(StoreQueries):
    """:meth:`merge_from` for :class:`suite.store.ResultsStore`."""

    def merge_from(
        self,
        source: str | os.PathLike[str],
        studies: Sequence[str] = (),
        keys: Iterable[str] | None = None,
        kernels: str | None = None,
    ) -> MergeResult:
        """Copy the trials of another results database into this one: the records of several machines (array
        jobs, sessions, claim rows run apart) become one database that reports and ``suite reproduce --no-run``
        read as if one run had made them.

        Every trial of ``source`` (of ``studies`` only, of ``keys`` only, and of those that ran in the kernel mode
        ``kernels`` only, when given; a record made before the modes existed is native) that this database lacks is
        copied whole: its row, curve, evaluations and update metrics, and its study memberships. A key already here is never
        overwritten: both records are kept apart and compared on what the key determines (status, steps trained,
        final evaluation; trials are pure functions of their key), and those that differ are listed. One
        transaction: an interrupted merge adds nothing.

        Raises:
            UserError: ``source`` is missing, is not a results database, is this database, or names no such study;
                ``kernels`` is not a mode.
        """
        if kernels is not None:
            check_kernels(kernels)
        src_path = Path(source)
        if src_path.exists() and self.path.exists() and src_path.resolve() == self.path.resolve():
            raise UserError(f"cannot merge {src_path} into itself")
        with type(self)(src_path, create=False) as src:  # validates it (format, schema; upgrades an older one)
            known = set(src.studies())
        missing = [s for s in studies if s not in known]
        if missing:
            raise UserError(f"{src_path} has no study {missing[0]!r}; its studies: {', '.join(sorted(known)) or 'none'}")
        conn = self._conn
        cols = ", ".join(f'"{c}"' for c in TRIAL_COLUMNS)
        conn.execute("ATTACH DATABASE ? AS src", (str(src_path.resolve()),))  # validated above; only read
        try:
            in_studies = f"study IN ({', '.join('?' * len(studies))})" if studies else "1"
            where = f" WHERE key IN (SELECT key FROM src.study_trials WHERE {in_studies}) OR {in_studies}" if studies else ""
            params = [*studies, *studies]
            chosen = f"SELECT key FROM src.trials{where}"
            with self._transaction():
                conn.execute(f"CREATE TEMP TABLE merge_keys AS {chosen}", params)
                if keys is not None:
                    conn.execute("CREATE TEMP TABLE merge_only (key TEXT PRIMARY KEY)")
                    conn.executemany("INSERT OR IGNORE INTO temp.merge_only VALUES (?)", [(k,) for k in keys])
                    conn.execute("DELETE FROM temp.merge_keys WHERE key NOT IN (SELECT key FROM temp.merge_only)")
                    conn.execute("DROP TABLE temp.merge_only")
                if kernels is not None:
                    conn.execute(
                        "DELETE FROM temp.merge_keys WHERE key NOT IN (SELECT key FROM src.trials WHERE "
                        "COALESCE(json_extract(provenance, '$.kernels.mode'), 'native') = ?)",
                        (kernels,),
                    )
                conn.execute("CREATE TEMP TABLE merge_new AS SELECT key FROM temp.merge_keys WHERE key NOT IN "
                             "(SELECT key FROM main.trials)")  # fmt: skip
                compare = ("status", "steps", "final_eval_mean")
                same_sql = " AND ".join(f"a.{c} IS b.{c}" for c in compare)
                both = conn.execute(
                    f"SELECT a.key, {same_sql}, json_extract(a.provenance, '$.kernels.mode'), "
                    "json_extract(a.provenance, '$.cpu_model'), json_extract(b.provenance, '$.cpu_model') "
                    "FROM main.trials a JOIN src.trials b ON a.key = b.key WHERE a.key IN (SELECT key FROM temp.merge_keys)"
                ).fetchall()
                new = "key IN (SELECT key FROM temp.merge_new)"
                added = conn.execute(f"INSERT INTO main.trials ({cols}) SELECT {cols} FROM src.trials WHERE {new}").rowcount
                for table in ("curves", "evals", "updates"):
                    conn.execute(f"INSERT INTO main.{table} SELECT * FROM src.{table} WHERE {new}")
                conn.execute(
                    "INSERT OR IGNORE INTO main.study_trials (study, key, tier) SELECT study, key, tier"
                    f" FROM src.study_trials WHERE ({in_studies}) AND key IN (SELECT key FROM temp.merge_keys)"
                    " AND key IN (SELECT key FROM main.trials)",
                    list(studies),
                )
                conn.execute("DROP TABLE temp.merge_keys")
                conn.execute("DROP TABLE temp.merge_new")
        finally:
            conn.execute("DETACH DATABASE src")
        conflicts = tuple(
            Conflict(key, mode or "native", here, there) for key, same, mode, here, there in sorted(both) if not same
        )  # a record made before the modes existed has no kernels block: native
        return MergeResult(
            source=str(src_path), added=added, identical=sum(1 for row in both if row[1]),
            differing=[c.key for c in conflicts], conflicts=conflicts,
        )  # fmt: skip
