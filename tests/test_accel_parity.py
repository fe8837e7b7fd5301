"""The shared parity harness over every registered accelerator (built-in, and the example plugin's): each computes its
specification's loss, metrics and gradients, and takes its updates, within the tolerances of
:mod:`suite.parity`; and each was checked against the specification's source as it is now."""

from __future__ import annotations

from pathlib import Path

import pytest

import suite.algorithms  # noqa: F401  (registers the built-in algorithms)
import suite.algorithms.ppo as ppo_module
from suite.accel import (
    Accelerator,
    ParityCase,
    accelerators,
    fingerprint,
    source_fingerprint,
    unregister_accelerator,
)
from suite.parity import check_fingerprint, check_parity
from suite.plugins import isolated, load_plugins

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "accelerated" / "ppo_logit_penalty.py"
BUILT_IN = accelerators()
CASES = [(acc, case) for acc in BUILT_IN for case in acc.parity]


def test_every_built_in_accelerated_loss_is_registered():
    assert {acc.name: acc.algorithms for acc in BUILT_IN} == {
        "grpo-hand-derived": ("grpo",),
        "grpo-pairwise-hand-derived": ("grpo-pairwise",),
        "ppo-hand-derived": ("ppo",),
        "ppo-adaptive-clip-hand-derived": ("ppo-adaptive-clip",),
        "ppo-rlvr-prm-hand-derived": ("ppo-rlvr-prm",),
    }


@pytest.mark.parametrize(("acc", "case"), CASES, ids=[f"{a.name}:{c.label}" for a, c in CASES])
def test_accelerator_matches_its_specification(acc: Accelerator, case: ParityCase):
    check_parity(acc, case)


@pytest.mark.parametrize("acc", BUILT_IN, ids=[a.name for a in BUILT_IN])
def test_accelerator_was_checked_against_the_specification_as_it_is(acc: Accelerator):
    check_fingerprint(acc)


def test_a_plugins_accelerator_goes_through_the_same_harness():
    """The worked example (``examples/accelerated``) registers an algorithm and its accelerator; the harness checks it
    exactly as it checks the built-in ones."""
    try:
        with isolated():
            load_plugins([str(EXAMPLE)])
            acc = next(a for a in accelerators() if a.name == "ppo-logit-penalty-hand-derived")
            assert acc.algorithms == ("ppo-logit-penalty",) and len(acc.parity) == 2
            check_fingerprint(acc)
            for case in acc.parity:
                check_parity(acc, case)
    finally:
        unregister_accelerator("ppo-logit-penalty-hand-derived")


def test_a_changed_specification_fails_the_harness_until_its_accelerator_follows(monkeypatch):
    """PPO's specification with its loss weighted 1% more: the accelerator no longer computes it, and the harness's
    numbers say so (the fingerprint of the changed source would too: next test)."""
    acc = next(a for a in accelerators() if a.name == "ppo-hand-derived")
    real = ppo_module.ppo_policy_value_loss

    def changed(trainer, mb, clip):
        loss, metrics, logp, params = real(trainer, mb, clip)
        return 1.01 * loss, metrics, logp, params

    monkeypatch.setattr(ppo_module, "ppo_policy_value_loss", changed)
    with pytest.raises(AssertionError, match="accelerator .* vs specification"):
        check_parity(acc, acc.parity[0])


def test_the_fingerprint_ignores_documentation_and_layout_but_not_code():
    base = 'def loss(x):\n    """Doc."""\n    return x + 1\n'
    reworded = 'def loss(x):\n    """Other words,\n    two lines."""\n    return (x\n            + 1)  # a comment\n'
    changed = 'def loss(x):\n    """Doc."""\n    return x + 2\n'
    assert source_fingerprint(base) == source_fingerprint(reworded) != source_fingerprint(changed)
    assert len(source_fingerprint(base)) == 16
    assert fingerprint(ppo_module.PPOTrainer.loss) == fingerprint(ppo_module.PPOTrainer.loss)


def test_the_specification_runs_where_no_accelerator_applies():
    """An autograd-only setting (``hand_derived = false``, an LSTM critic, image observations) has no accelerator; the
    trainer runs its specification."""
    from suite.parity import trainer_of

    acc = next(a for a in accelerators() if a.name == "ppo-rlvr-prm-hand-derived")
    with trainer_of(acc, ParityCase("ppo-rlvr-prm", "CartPole-v1", {"hand_derived": False})) as trainer:
        assert trainer.kernel is not None and trainer.accelerator is None
    acc = next(a for a in accelerators() if a.name == "ppo-adaptive-clip-hand-derived")
    with trainer_of(acc, ParityCase("ppo-adaptive-clip", "CartPole-v1", {"critic": "lstm"})) as trainer:
        assert trainer.kernel is None and trainer.accelerator is None


def test_a_stale_accelerator_never_runs_the_specification_does(monkeypatch):
    """At run time too: an accelerator whose recorded fingerprint is not the specification's source is not used (the
    trial runs the specification by autograd, with a warning), so an edited loss never runs on stale maths."""
    import dataclasses

    import suite.accel as accel
    from suite.parity import trainer_of

    acc = next(a for a in BUILT_IN if a.name == "ppo-hand-derived")
    stale = dataclasses.replace(acc, fingerprint="0" * 16)
    monkeypatch.setitem(accel._ACCELERATORS, acc.name, stale)
    monkeypatch.setattr(accel, "_CURRENT", {})
    with pytest.warns(RuntimeWarning, match="ppo-hand-derived.*the specification runs instead"):
        with trainer_of(stale, ParityCase("ppo", "CartPole-v1")) as trainer:
            assert trainer.kernel is not None and trainer.accelerator is None
    monkeypatch.setitem(accel._ACCELERATORS, acc.name, acc)
    monkeypatch.setattr(accel, "_CURRENT", {})
    with trainer_of(acc, ParityCase("ppo", "CartPole-v1")) as trainer:
        assert trainer.accelerator is not None
