"""Published claims as data, measured and judged: ``suite reproduce CLAIMSET``.

Modules:
    claimset: the claim-set file format (``sets/*.toml``), its validation and its expansion into trials.
    metrics: the metrics a claim can name, and value / improvement / ratio comparisons with bootstrap CIs.
    verdict: the verdict rule (reproduced, not reproduced, inconclusive, impossible) incl. power analysis.
    reproduce: run the missing trials through the executor, measure and judge every cell.
    tables: the writers (source layout and every cell in HTML, Markdown, LaTeX; verdicts as CSV and JSON).
    published: published reference results (``baselines/published/*.csv``).
"""

from suite.claims.claimset import ClaimSet, list_claim_sets, load_claim_set, parse_claim_set
from suite.claims.published import load_published

__all__ = ["ClaimSet", "list_claim_sets", "load_claim_set", "load_published", "parse_claim_set"]
