"""The committed reference run: ``results/reference/`` holds the regression study as run by one commit.

``suite regress --against-reference`` compares HEAD with it without building BASE; ``suite regress
--write-reference [REV]`` (re)generates it. Files (a few KB, meant to be committed)::

    provenance.json   format, the commit and its content key, the studies, repeats, the machine (CPU, usable CPUs,
                      load), package versions and suite version from the records, UTC time, and the command that
                      regenerates it
    studies/*.toml    the exact study files the reference ran, in run order (HEAD runs the same ones)
    runs.csv          one row per trial and repeat: the runs frame (:mod:`suite.regress.records`), with the outcome
                      and trained-parameter hashes that make the returns comparison exact
    README.md         what this folder is and how to regenerate it

The records themselves (curves, evaluations, models) stay in the run folder the command names; ``runs.csv`` keeps
everything the gate compares, so the reference stays small enough to commit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from suite.errors import UserError
from suite.provenance import utc_now_iso
from suite.regress.records import BASE_COLUMNS, TEXT_COLUMNS

REFERENCE_FORMAT = 1
"""Version of the reference folder layout."""

REFERENCE_DIR = Path("results") / "reference"
"""Where the reference lives, relative to the repository root."""

REGENERATE = "suite regress --write-reference"
"""The command that regenerates the reference (run at the repository root, with the tree committed); it runs in
portable kernel mode unless ``--kernels native`` is given, so the reference can be checked exactly on any machine."""

_README = """# Reference run of the regression study

Written by `{command}` from commit `{commit}` on {created} ({machine}).
`suite regress --against-reference` compares the working tree (or a named revision) with it: returns exactly
(outcome and parameter hashes) or with the stated test, peak memory as a ratio; speed is shown but does not
gate, since this run was not interleaved with the one it is compared to (use `suite regress BASE` for that).

Regenerate it (after a change that is meant to move results, e.g. an algorithm version bump) with a committed
tree, at the repository root:

    {command}

Files: `provenance.json` (commit, studies, machine, packages, command), `studies/*.toml` (what ran), `runs.csv`
(one row per trial and repeat: final return, AUC, steps/s, peak RSS, per-phase fields, hashes).
"""


class Reference:
    """A loaded reference folder."""

    def __init__(self, folder: Path) -> None:
        """Read ``folder``.

        Raises:
            UserError: it is missing or incomplete (the message names the command that creates it).
        """
        self.folder = folder
        missing = [n for n in ("provenance.json", "runs.csv") if not (folder / n).is_file()]
        if missing:
            raise UserError(f"no reference run in {folder} (missing {', '.join(missing)}); create it with '{REGENERATE}'")
        try:
            self.provenance: dict[str, Any] = json.loads((folder / "provenance.json").read_text())
            self.runs = pd.read_csv(folder / "runs.csv", dtype=dict.fromkeys(TEXT_COLUMNS, str))
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot read the reference run in {folder}: {exc}") from None
        if self.provenance.get("format") != REFERENCE_FORMAT:
            raise UserError(f"{folder} holds a reference of format {self.provenance.get('format')!r}; this suite reads "
                            f"format {REFERENCE_FORMAT}: regenerate it with '{REGENERATE}'")  # fmt: skip
        self.runs["side"] = "base"
        machine = self.provenance.get("machine", {})
        if "cpu" not in self.runs.columns:  # a reference written before the runs frame named them
            self.runs["cpu"] = machine.get("cpu_model")
        if "kernels" not in self.runs.columns:
            self.runs["kernels"] = self.kernels
        self.study_files = [folder / "studies" / f"{name}.toml" for name in self.provenance.get("studies", [])]
        absent = [str(f) for f in self.study_files if not f.is_file()]
        if absent or not self.study_files:
            raise UserError(f"the reference run in {folder} lacks its study files ({', '.join(absent) or 'none listed'}); "
                            f"regenerate it with '{REGENERATE}'")  # fmt: skip

    @property
    def kernels(self) -> str:
        """The kernel mode the reference ran in (one written before the modes existed: native)."""
        return str(self.provenance.get("kernels") or "native")

    @property
    def repeats(self) -> int:
        return int(self.provenance["repeats"])

    def describe(self) -> str:
        """``reference run of 3f2a1b2c4d5e (2025-01-31, AMD EPYC ..., portable kernels)``."""
        cpu = self.provenance.get("machine", {}).get("cpu_model")
        return (f"reference run of {str(self.provenance.get('commit'))[:12]} "
                f"({str(self.provenance.get('created_at'))[:10]}, {cpu}, {self.kernels} kernels)")  # fmt: skip

    def machine_mismatch(self, machine: dict[str, Any]) -> str | None:
        """Why timings of this machine and the reference's are not comparable, or None."""
        theirs = self.provenance.get("machine", {})
        diffs = [k for k in ("cpu_model", "cpu_count_usable") if theirs.get(k) != machine.get(k)]
        # the instruction set only where both recorded it (a reference made before it was recorded stays comparable)
        ours, their_isa = machine.get("cpu_capability"), theirs.get("cpu_capability")
        if ours and their_isa and ours != their_isa:
            diffs.append("cpu_capability")
        if not diffs:
            return None
        return (
            "the reference ran on another machine ("
            + ", ".join(f"{k}: {theirs.get(k)} vs {machine.get(k)}" for k in diffs)
            + ")"
        )


def write_reference(
    folder: Path, *, runs: pd.DataFrame, studies: dict[str, str], commit: str, key: str, repeats: int,
    machine: dict[str, Any], packages: dict[str, Any], suite_version: str, kernels: str = "native",
) -> list[Path]:  # fmt: skip
    """Write a reference folder (replacing one that exists); return the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    columns = [c for c in runs.columns if c != "side"]
    for c in BASE_COLUMNS:
        if c not in columns and c != "side":
            raise ValueError(f"runs frame lacks {c!r}")
    created = utc_now_iso()
    provenance: dict[str, Any] = {
        "format": REFERENCE_FORMAT,
        "commit": commit,
        "content_key": key,
        "studies": list(studies),
        "repeats": repeats,
        "trials": int(len(runs)),
        "machine": machine,
        "packages": packages,
        "suite_version": suite_version,
        "created_at": created,
        "command": REGENERATE,
        "kernels": kernels,
    }
    study_dir = folder / "studies"
    if study_dir.is_dir():
        for old in study_dir.glob("*.toml"):
            old.unlink()
    study_dir.mkdir(exist_ok=True)
    files = [folder / "provenance.json", folder / "runs.csv", folder / "README.md"]
    files[0].write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n")
    runs[columns].to_csv(files[1], index=False, float_format="%.10g")
    for name, text in studies.items():
        files.append(study_dir / f"{name}.toml")
        files[-1].write_text(text)
    machine_text = f"{machine.get('cpu_model')}, {machine.get('cpu_count_usable')} usable CPUs, {kernels} kernels"
    files[2].write_text(_README.format(command=REGENERATE, commit=commit[:12], created=created[:16],
                                       machine=machine_text))  # fmt: skip
    return files
