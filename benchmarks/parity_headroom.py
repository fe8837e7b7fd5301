"""How much of the parity harness's tolerances each accelerator uses (1.0 = the tolerance itself).

Runs :func:`suite.parity.check_parity` on every registered accelerator's cases and prints, per case, the largest
share of the gradient tolerance and of the update tolerance the accelerator's results used against its
specification's.

    python benchmarks/parity_headroom.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import suite.algorithms  # noqa: E402, F401
from suite.accel import accelerators  # noqa: E402
from suite.parity import GRAD_TOL, UPDATE_TOL, check_parity  # noqa: E402


def main() -> int:
    print(f"tolerances: gradients {GRAD_TOL}, updates {UPDATE_TOL}")
    for acc in accelerators():
        for case in acc.parity:
            used = check_parity(acc, case)
            print(f"{acc.name:32s} {case.label:72s} gradients {used['gradients']:.3f}  updates {used['updates']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
