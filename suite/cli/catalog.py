"""``suite list``: the algorithms, environments, studies, claim sets and plugins the suite knows."""

from __future__ import annotations

import argparse
import json
from typing import Any

from suite.cli.options import add_plugin


def add_parser(sub: Any) -> None:
    """``suite list``."""
    p = sub.add_parser("list", help="algorithms, environments and studies")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_plugin(p)


def cmd_list(args: argparse.Namespace) -> int:
    from suite.envs.specs import list_envs
    from suite.plugins import loaded_plugins
    from suite.registry import list_algorithms
    from suite.study import list_studies

    algos: list[dict[str, Any]] = [
        {
            "id": a.id,
            "version": a.version,
            "action_spaces": sorted(a.action_spaces),
            "observations": sorted(a.observations),
            "summary": a.summary,
            "reference": a.reference,
            "aliases": list(a.aliases),
            "plugin": a.plugin,
            "plugin_version": a.plugin_version,
        }
        for a in list_algorithms()
    ]
    envs = [
        {"id": e.id, "family": e.family, "action_space": e.action_space, "observation": e.observation} for e in list_envs()
    ]
    studies = list_studies()
    claim_sets = _claim_sets()
    plugins: list[dict[str, Any]] = [
        {**p.as_dict(), "algorithms": list(p.algorithms), "envs": list(p.envs)} for p in loaded_plugins()
    ]
    if args.json:
        out = {"algorithms": algos, "envs": envs, "studies": studies, "claim_sets": claim_sets, "plugins": plugins}
        print(json.dumps(out, indent=2))
        return 0
    print("Algorithms:")
    for a in algos:
        alias = f" (aliases: {', '.join(a['aliases'])})" if a["aliases"] else ""
        origin = f" [plugin {a['plugin']} {a['plugin_version'] or ''}]".replace(" ]", "]") if a["plugin"] else ""
        print(f"  {a['id']:<20} v{a['version']:<7} {'/'.join(a['action_spaces']):<14} {a['summary']}{alias}{origin}")
        print(f"  {'':<20} {'':<8} {'':<14} ref: {a['reference']}")
    print("Environments:")
    for e in envs:
        print(f"  {e['id']:<16} {e['family']:<8} {e['action_space']:<9} {e['observation']}")
    print("  and any registered gymnasium id (e.g. Acrobot-v1): spaces, episode limit and family inferred")
    print("Studies:")
    for s in studies:
        print(f"  {s}")
    print("Claim sets (suite reproduce NAME):")
    for c in claim_sets:
        stand_in = " [stand-in]" if c["stand_in"] else ""
        print(f"  {c['name']:<24} {c['cells']:>3} cells  {c['title']}{stand_in}")
    if plugins:
        print("Plugins:")
        for p in plugins:
            provides = ", ".join(p["algorithms"] + p["envs"]) or "nothing"
            print(f"  {p['name']} {p['version'] or ''} ({p['kind']}: {p['source']}): {provides}")
    return 0


def _claim_sets() -> list[dict[str, Any]]:
    from suite.claims import list_claim_sets, load_claim_set

    out = []
    for name in list_claim_sets():
        claims = load_claim_set(name)
        out.append({"name": name, "title": claims.title, "source": claims.source, "cells": len(claims.cells),
                    "stand_in": bool(claims.stand_in)})  # fmt: skip
    return out
