"""The claims of the sources that no cell measures, and why (``suite/claims/uncovered.toml``): every claim of the
seed documents is either a cell of a claim set or a row here, and each set's report shows the rows of its source."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

from suite.config import load_toml
from suite.errors import UserError

FIELDS = ("source", "location", "claim", "why")


@dataclass(frozen=True)
class Uncovered:
    """A claim no cell measures."""

    source: str
    """The document (file name)."""
    location: str
    """Where in it."""
    claim: str
    """What it claims."""
    why: str
    """Why no cell measures it (what it would need)."""


@cache
def load_uncovered() -> tuple[Uncovered, ...]:
    """Every row of the ledger.

    Raises:
        UserError: a row with a missing or unknown field.
    """
    data = load_toml(resources.files("suite.claims") / "uncovered.toml")  # type: ignore[arg-type]
    rows = []
    for i, entry in enumerate(data.get("claims", [])):
        if set(entry) != set(FIELDS):
            raise UserError(f"suite/claims/uncovered.toml claims[{i}]: fields {sorted(entry)}; expected {list(FIELDS)}")
        rows.append(Uncovered(**{k: str(entry[k]) for k in FIELDS}))
    return tuple(rows)


def uncovered_for(source: str) -> list[Uncovered]:
    """The rows of one source (a claim set's ``source``, matched on the document's file name)."""
    return [u for u in load_uncovered() if u.source in source]
