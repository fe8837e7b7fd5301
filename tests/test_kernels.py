"""Kernel modes (suite/kernels.py, docs/kernels.md): native keys stay the keys made before the modes existed, a
portable trial process reads back held kernels, a process set up otherwise refuses a portable trial, the two modes
never share a key in one database, and merges and regression notes name each record's mode and CPU."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from suite import kernels
from suite.errors import UserError
from suite.executors import run_trials
from suite.store import ResultsStore
from suite.store.models import model_filename
from suite.trial import TrialSpec, run_trial, trial_kernels

REPO = Path(__file__).resolve().parent.parent

NATIVE_KEYS = {
    ("ppo", 2048, 5, 1024): "7173f4051c0f1d32a4a356193a8a8d5e69fd2e0b055d2b642f71ba1578f87294",
    ("grpo", 2048, 5, 1024): "395eb8c5efca17ebe65a579d56958a2bc34469c146780a71be21511e29df5e3d",
    ("sb3-ppo", 2048, 5, 1024): "739792f12e7ce9ff1227d2fda3552c08d5a4b0fba6bd1852df9d8b92bf1b82b2",
    ("ppo", 5000, 5, 1000): "16b243e63f2f595d7c5d9214ac452c214e83cee13a4798c4933484b4d84dd50b",
}
"""Keys of CartPole-v1 seed-0 trials as the committed native reference run recorded them (results/reference/runs.csv
at commit 99ac361, before the kernel modes existed)."""


def tiny(algo: str = "ppo", steps: int = 256, **kw: Any) -> TrialSpec:
    return TrialSpec(algo, "CartPole-v1", 0, steps, overrides={"n_envs": 2, "n_steps": 64, "n_epochs": 1}, n_eval_episodes=2,
                     **kw)  # fmt: skip


@pytest.mark.parametrize(("algo", "budget", "episodes", "freq"), list(NATIVE_KEYS))
def test_native_keys_are_the_keys_made_before_the_modes_existed(algo, budget, episodes, freq):
    spec = TrialSpec(algo, "CartPole-v1", 0, budget, n_eval_episodes=episodes, eval_freq=freq, kernels="native")
    assert spec.resolve().key == NATIVE_KEYS[algo, budget, episodes, freq]
    assert TrialSpec(algo, "CartPole-v1", 0, budget, n_eval_episodes=episodes, eval_freq=freq).kernels == "native"


def test_a_portable_trial_has_its_own_key():
    spec = TrialSpec("ppo", "CartPole-v1", 0, 2048, n_eval_episodes=5, eval_freq=1024)
    portable = dataclasses.replace(spec, kernels="portable").resolve()
    assert portable.key != spec.resolve().key
    assert portable.config_hash == spec.resolve().config_hash


PORTABLE_KEYS_AT_REVISION_1 = {
    "sb3-a2c": "626f3088a294ea9c166856e278eeab9c427a63dbd0cdcc5adf382e0523f8c7df",
    "sb3-dqn": "b069b851c3669e4c3ba0239e8c4caae57ef1173fd5d0b12c36e03ccdec298f91",
}
"""Keys of portable CartPole-v1 trials of results/portable/study-sb3.toml before the portable revision existed
(results/portable/hashes-sb3.json at commit 5f8027a)."""


def test_a_changed_portable_path_changes_the_portable_key_only(monkeypatch):
    """sb3-a2c's portable RMSprop changed its portable bits and not its native ones (registry ``portable_revision``):
    its portable key moved and records the revision; sb3-dqn (revision 1) kept its portable key, and a native key
    never holds a revision."""
    from suite.registry import get_algorithm
    from suite.study import load_study

    specs = {s.algo: s for s in load_study(str(SB3_SET[1])).trials(envs=["CartPole-v1"]) if s.seed == 0}
    assert get_algorithm("sb3-a2c").portable_revision == 2 and get_algorithm("sb3-dqn").portable_revision == 1
    assert specs["sb3-a2c"].kernels == specs["sb3-dqn"].kernels == "portable"
    assert specs["sb3-dqn"].resolve().key == PORTABLE_KEYS_AT_REVISION_1["sb3-dqn"]
    assert specs["sb3-a2c"].resolve().key != PORTABLE_KEYS_AT_REVISION_1["sb3-a2c"]
    import suite.trial

    provenance = suite.trial._kernels_revision  # what a record's provenance["kernels"] adds to the mode
    assert provenance(specs["sb3-a2c"].resolve()) == {"revision": 2} and provenance(specs["sb3-dqn"].resolve()) == {}
    assert provenance(dataclasses.replace(specs["sb3-a2c"], kernels="native").resolve()) == {}
    # the same trial with the registry entry at revision 1 has the old key: the revision is the only change
    at_1 = dataclasses.replace(get_algorithm("sb3-a2c"), portable_revision=1)
    monkeypatch.setattr(suite.trial, "get_algorithm", lambda algo: at_1)
    assert specs["sb3-a2c"].resolve().key == PORTABLE_KEYS_AT_REVISION_1["sb3-a2c"]
    native_at_1 = dataclasses.replace(specs["sb3-a2c"], kernels="native").resolve().key
    monkeypatch.undo()
    assert dataclasses.replace(specs["sb3-a2c"], kernels="native").resolve().key == native_at_1


def test_a_portable_revision_must_be_a_positive_int():
    from suite.registry import register

    with pytest.raises(ValueError, match="portable_revision must be an int >= 1"):
        register("never-registered", version="1", summary="", reference="", action_spaces=("discrete",), config=object,
                 portable_revision=0)(lambda ctx, cfg: None)  # fmt: skip


def test_the_default_mode_comes_from_the_context_then_the_variable(monkeypatch):
    monkeypatch.delenv(kernels.DEFAULT_VARIABLE, raising=False)
    assert tiny().kernels == kernels.DEFAULT == "native"
    monkeypatch.setenv(kernels.DEFAULT_VARIABLE, "portable")
    assert tiny().kernels == "portable"
    with trial_kernels("native"):
        assert tiny().kernels == "native"
    monkeypatch.setenv(kernels.DEFAULT_VARIABLE, "fast")
    with pytest.raises(UserError, match=r"^\$SUITE_KERNELS: unknown kernel mode 'fast'; allowed: native, portable$"):
        tiny()


def test_an_unknown_mode_is_one_line():
    with pytest.raises(UserError, match="unknown kernel mode 'avx2'; allowed: native, portable"):
        tiny(kernels="avx2").resolve()


def test_portable_variables_are_the_same_on_every_machine():
    env = kernels.environ("portable")
    assert env["ATEN_CPU_CAPABILITY"] == "avx2" and env["MKL_CBWR"] == "COMPATIBLE"
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2" and env["OPENBLAS_CORETYPE"] == "Haswell"
    # numpy 2.4's AVX-512 dispatch targets, taken from the build (not from this CPU)
    assert env["NPY_DISABLE_CPU_FEATURES"].split() == ["X86_V4", "AVX512_ICL", "AVX512_SPR"]
    assert kernels.environ("native") == {}


def test_a_process_set_up_otherwise_refuses_a_portable_trial():
    if kernels.process_mode() == "portable":
        pytest.skip("this test process was itself started with the portable variables")
    with pytest.raises(UserError) as err:
        run_trial(tiny(kernels="portable").resolve())
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("this process was not started for portable kernels, so it refuses a portable trial")
    assert "ATEN_CPU_CAPABILITY=unset (portable: avx2)" in message


@pytest.mark.parametrize("lacks", [("AVX2",), ("FMA3",), ("AVX2", "FMA3")])
def test_a_cpu_without_avx2_and_fma_refuses_portable_kernels_in_one_line(monkeypatch, lacks):
    """The CPU's features as numpy reads them, with the baseline's taken away: a portable mode there could not give
    the bits of other machines (and OpenBLAS's Haswell kernels kill numpy's import with SIGILL on such a CPU)."""
    import platform

    features = kernels._numpy_features()
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(kernels, "_numpy_features", lambda: {**features, **dict.fromkeys(lacks, False)})
    said = " and ".join(kernels.BASELINE[f] for f in lacks)
    assert kernels.missing_baseline() == [kernels.BASELINE[f] for f in lacks]
    for refuse in (lambda: kernels.environ("portable"), lambda: kernels.check_process("portable"),
                   lambda: run_trials([tiny(kernels="portable").resolve()], save=lambda r: None, workers=1,
                                      show_progress=False)):  # fmt: skip
        with pytest.raises(UserError) as err:
            refuse()
        assert str(err.value).startswith(f"this CPU lacks {said}, the baseline of portable kernels")
        assert "\n" not in str(err.value) and str(err.value).endswith("or use --kernels native here")
    assert kernels.environ("native") == {}
    kernels.check_process("native")
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")  # another architecture: nothing to hold (docs)
    assert kernels.missing_baseline() == []


def _read_back_in_fresh_process(env: dict[str, str]) -> dict[str, Any]:
    code = "import json, torch, numpy, suite.kernels as k; print(json.dumps(k.read_back()))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))


def test_the_variables_hold_every_library_that_can_be_read_back():
    held = _read_back_in_fresh_process(kernels.environ("portable"))
    assert held["held"] is True
    assert held["aten"] in ("AVX2", "DEFAULT")  # DEFAULT only on a CPU without AVX2
    assert held["mkl_cbwr"] == "COMPATIBLE"
    assert not set(held["numpy_dispatch"]) & set(kernels.NUMPY_AVX512)
    assert held["openblas"] == ["Haswell"]
    assert held["environ"]["NPY_DISABLE_CPU_FEATURES"] == "X86_V4 AVX512_ICL AVX512_SPR"


def _records(db: Path) -> list[dict[str, Any]]:
    with ResultsStore(db, create=False) as store:
        return list(store.trials().to_dict("records"))


@pytest.fixture(scope="module")
def both_modes(tmp_path_factory) -> Path:
    """One database holding the same tiny trial run in both modes, through the local executor's forkservers."""
    db = tmp_path_factory.mktemp("modes") / "suite.db"
    specs = [tiny(kernels="native").resolve(), tiny(kernels="portable").resolve()]
    with ResultsStore(db) as store:
        summary = run_trials(specs, save=store.save_trial, workers=1, show_progress=False, models_dir=db.parent / "models")
    assert len(summary.finished) == 2
    return db


def test_a_portable_trial_process_reads_back_held_kernels(both_modes):
    by_mode = {r["provenance"]["kernels"]["mode"]: r for r in _records(both_modes)}
    portable, native = by_mode["portable"]["provenance"]["kernels"], by_mode["native"]["provenance"]["kernels"]
    assert portable["held"] is True and portable["mkl_cbwr"] == "COMPATIBLE" and portable["openblas"] == ["Haswell"]
    assert {k: portable["environ"][k] for k in kernels.PORTABLE_ENV} == kernels.PORTABLE_ENV
    assert by_mode["portable"]["provenance"]["cpu_capability"] in ("AVX2", "DEFAULT")
    assert native["environ"] == {k: os.environ.get(k) for k in native["environ"]}  # what this shell gives, untouched
    assert all(r["status"] == "ok" for r in by_mode.values())


def test_mixing_modes_in_one_database_never_mixes_keys(both_modes):
    records = _records(both_modes)
    assert len({r["key"] for r in records}) == 2
    for r in records:
        spec = tiny(kernels=r["provenance"]["kernels"]["mode"])
        assert spec.resolve().key == r["key"]


def test_a_merge_can_take_one_modes_records_only(both_modes, tmp_path, capsys):
    """``suite merge --kernels portable``: how a claim set's records.db keeps the mode its table is judged in."""
    from suite.cli.main import main

    portable_key = tiny(kernels="portable").resolve().key
    assert main(["merge", str(both_modes), "--kernels", "portable", "--db", str(tmp_path / "p.db")]) == 0
    assert "1 trials added" in capsys.readouterr().out
    assert [r["key"] for r in _records(tmp_path / "p.db")] == [portable_key]
    with ResultsStore(tmp_path / "n.db") as store:
        assert store.merge_from(both_modes, kernels="native").added == 1
        with pytest.raises(UserError, match="fast"):
            store.merge_from(both_modes, kernels="fast")
    assert [r["key"] for r in _records(tmp_path / "n.db")] == [tiny(kernels="native").resolve().key]


def test_a_merge_conflict_names_each_records_mode_and_cpu(both_modes, tmp_path):
    other = tmp_path / "other.db"
    with ResultsStore(both_modes, create=False) as store:
        record = store.get_trial(tiny(kernels="native").resolve().key)
    assert record is not None
    record = {**record, "final_eval_mean": -1.0, "provenance": {**record["provenance"], "cpu_model": "Elsewhere CPU"}}
    with ResultsStore(other) as store:
        store.save_trial(record)
    copy = tmp_path / "copy.db"
    copy.write_bytes(both_modes.read_bytes())
    with ResultsStore(copy, create=False) as store:
        result = store.merge_from(other)
    assert result.differing == [record["key"]]
    (conflict,) = result.conflicts
    assert conflict.kernels == "native" and conflict.cpu_source == "Elsewhere CPU"
    assert conflict.describe().startswith(f"{record['key'][:12]} (native: ")
    assert conflict.describe().endswith(", Elsewhere CPU in the source)")


def test_an_unchanged_key_with_other_outcomes_between_machines_says_the_machines_differ():
    from suite.regress.compare import changed_same_key_note

    def side(cpu: str, mode: str = "native") -> pd.DataFrame:
        return pd.DataFrame({"seed": [0], "cpu": [cpu], "kernels": [mode]})

    note = changed_same_key_note(side("Intel Xeon"), side("AMD EPYC"), [0])
    assert "the machines differ (BASE on Intel Xeon, HEAD on AMD EPYC, native kernels)" in note
    assert "version not bumped" not in note
    same = changed_same_key_note(side("AMD EPYC"), side("AMD EPYC"), [0])
    assert "(version not bumped?)" in same and "HEAD on AMD EPYC, native kernels" in same
    portable = changed_same_key_note(side("Intel Xeon", "portable"), side("AMD EPYC", "portable"), [0])
    assert "portable kernels do not hold" in portable


def test_studies_and_claim_sets_name_their_mode(tmp_path):
    from suite.claims import load_claim_set
    from suite.study import load_study

    study = tmp_path / "s.toml"
    study.write_text('name = "s"\nkernels = "portable"\nalgos = ["ppo"]\nenvs = ["CartPole-v1"]\nseeds = "0"\n')
    assert {s.kernels for s in load_study(str(study)).trials(steps=64)} == {"portable"}
    study.write_text('name = "s"\nkernels = "wide"\nalgos = ["ppo"]\nenvs = ["CartPole-v1"]\n')
    with pytest.raises(UserError, match="unknown kernel mode 'wide'"):
        load_study(str(study))
    text = Path(load_claim_set("cleanrl-benchmark").path or "").read_text()
    native = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("kernels ="))
    assert native != text  # a shipped set names its mode; without the line a set is native, the default
    claims = tmp_path / "c.toml"
    for line, mode in (("", None), ('kernels = "portable"\n', "portable")):
        claims.write_text(line + native)
        loaded = load_claim_set(str(claims))
        cell = loaded.cells[0]
        assert loaded.kernels == mode and loaded.trial_spec(cell, cell.arms[0], 0, "smoke").kernels == (mode or "native")


def test_the_cli_takes_kernels_on_every_command_that_computes_trials():
    from suite.cli.main import build_parser

    parser = build_parser()
    for argv in (["run"], ["reproduce", "x"], ["regress", "main"], ["profile", "speed", "--algo", "ppo", "--env", "e"],
                 ["profile", "memory", "--algo", "ppo", "--env", "e"], ["evaluate", "m.pt"]):  # fmt: skip
        assert parser.parse_args([*argv, "--kernels", "portable"]).kernels == "portable", argv


def test_evaluate_starts_itself_again_for_portable_kernels(both_modes):
    resolved = tiny(kernels="portable").resolve()
    model = (
        both_modes.parent / "models" / model_filename(resolved.algo.id, resolved.spec.env_id, resolved.spec.seed, resolved.key)
    )
    env = {k: v for k, v in os.environ.items() if k not in kernels.environ("portable")}
    for flag, said in (([], "native kernels)"), (["--kernels", "portable"], "portable kernels)")):
        out = subprocess.run([sys.executable, "-m", "suite.cli", "evaluate", str(model), "--episodes", "1", *flag],
                             env=env, capture_output=True, text=True, check=True, cwd=REPO)  # fmt: skip
        assert out.stdout.strip().endswith(said), out.stdout


def _benchmark(name: str) -> Any:
    """The script ``benchmarks/<name>.py`` loaded as a module (benchmarks/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _hash_set_module() -> Any:
    return _benchmark("portable_hashes")


SB3_SET = (REPO / "results" / "portable" / "hashes-sb3.json", REPO / "results" / "portable" / "study-sb3.toml")
"""sb3-a2c, sb3-dqn, sb3-sac and sb3-td3: the hash set's second part, made by ``benchmarks/portable_hashes.py --study``."""


@pytest.mark.parametrize("part", ["main", "sb3"])
def test_the_committed_portable_set_replays_bit_for_bit_on_this_machine(tmp_path, capsys, part):
    hashes = _hash_set_module()
    path, study = (hashes.HASHES, hashes.STUDY) if part == "main" else SB3_SET
    committed = json.loads(path.read_text())
    made, here = committed["cpu"], hashes.cpu()
    new = [made[k] for k in ("model", "family", "model_number", "flags")] != [
        here[k] for k in ("model", "family", "model_number", "flags")
    ]
    with capsys.disabled():
        for what, cpu in (("portable hash set made on", made), ("replayed on", here)):
            print(f"\n{what}: {cpu['model']} (family {cpu['family']} model {cpu['model_number']}; "
                  f"{' '.join(cpu['flags'])}; torch native {cpu['native_capability']})", end="")  # fmt: skip
        print("  <- a CPU this set was not made on" if new else "")
    rows = hashes.run_set(tmp_path, "portable", workers=2, study=study)
    assert {r["key"] for r in rows} == {r["key"] for r in committed["trials"]}  # the keys are machine-independent
    assert all(r["status"] == "ok" for r in rows), [r for r in rows if r["status"] != "ok"]
    assert hashes.compare(committed["trials"], rows) == []


QEMU = "qemu-x86_64"
"""Debian's ``qemu-user`` (``.ci/run`` installs it): runs an x86-64 process on an emulated CPU."""
EMULATES_X86 = pytest.mark.skipif(
    sys.platform != "linux" or os.uname().machine != "x86_64", reason="emulates x86-64 on x86-64 Linux"
)


def _require_qemu() -> None:
    """A missing QEMU fails the emulated tests rather than skipping them: CI must run them."""
    import shutil

    if shutil.which(QEMU) is None:
        pytest.fail(f"{QEMU} is missing: install Debian's qemu-user (.ci/run does)")


@EMULATES_X86
@pytest.mark.parametrize(("algo", "env"), [("ppo", "CartPole-v1")])
def test_a_portable_trial_gives_the_same_bits_on_an_emulated_avx2_only_intel_cpu(algo, env, capsys):
    """The set's trial replayed in one process under ``qemu-x86_64 -cpu Haswell-v4`` (Intel, AVX2, no AVX-512): the
    libraries pick their kernels by the emulated CPU. QEMU computes ``rcpps``/``rsqrtps`` exactly and the x87
    transcendentals by its own software, where real CPUs differ; the replay's translated code holds none of them,
    so its equal bits are those of a real AVX2 CPU too (docs/kernels.md)."""
    _require_qemu()
    hashes = _hash_set_module()
    committed = {(r["algo"], r["env_label"]): r for r in json.loads(hashes.HASHES.read_text())["trials"]}
    argv = [QEMU, "-cpu", "Haswell-v4", sys.executable, str(REPO / "benchmarks" / "portable_hashes.py"), "--in-process",
            algo, env]  # fmt: skip
    out, insns = _benchmark("emulated_replays").run_scanned(argv, {**os.environ, **kernels.environ("portable")})
    assert out.returncode == 0, out.stderr[-2000:]
    row = json.loads(out.stdout.strip().splitlines()[-1])
    with capsys.disabled():
        print(f"\n{algo} {env} under {QEMU} -cpu Haswell-v4: final return {row['final_return']}, CPU-dependent "
              f"instructions translated: {insns or 'none'}")  # fmt: skip
    assert hashes.compare([committed[algo, env]], [row]) == []
    assert insns == {}


_SGEMM = """
import hashlib, torch
a, b = (torch.randn(64, 64, generator=torch.Generator().manual_seed(s)) for s in (0, 1))
print(torch.backends.cpu.get_cpu_capability(), hashlib.sha256((a @ b).numpy().tobytes()).hexdigest())
"""


@EMULATES_X86
def test_native_mkl_picks_its_kernels_by_the_cpus_vendor_and_portable_holds_it(capsys):
    """One float32 GEMM (MKL, as torch's linear layers) on an emulated Intel and an emulated AMD CPU with the same
    features (AVX2, FMA: ``Haswell-v4``, ``EPYC-Rome-v1``) and on this host. Native: ATen's capability is the same on
    both, yet MKL takes its AVX2 kernels on the Intel one only (its banner says so) and the bits differ, which is
    how an AVX-512 Xeon and an AVX-512 EPYC disagree on a native record (docs/kernels.md). Portable: MKL's
    ``COMPATIBLE`` branch on all three, and the same bits."""
    _require_qemu()
    runs = {}
    for mode, cpu in (("native", "Haswell-v4"), ("native", "EPYC-Rome-v1"), ("portable", "Haswell-v4"),
                      ("portable", "EPYC-Rome-v1"), ("portable", None)):  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k not in kernels.environ("portable")}
        env.update({**(kernels.environ("portable") if mode == "portable" else {}), "MKL_VERBOSE": "1"})
        argv = [*([] if cpu is None else [QEMU, "-cpu", cpu]), sys.executable, "-c", _SGEMM]
        runs[mode, cpu] = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    seen = {}
    for (mode, cpu), proc in runs.items():
        out = proc.communicate(timeout=600)[0].splitlines()
        assert proc.returncode == 0 and out, (mode, cpu)
        banner = next(line for line in out if "oneMKL" in line).split(" architecture ")[1].split(",")[0]
        cnr = {line.split("CNR:")[1].split()[0] for line in out if "SGEMM" in line}
        capability, digest = out[-1].split()
        seen[mode, cpu] = (capability, digest, cnr, banner)
        with capsys.disabled():
            print(f"\n{mode:8} {cpu or 'this host':12} {capability:6} {digest[:16]} CNR:{','.join(cnr)} MKL: {banner}", end="")
    native_intel, native_amd = seen["native", "Haswell-v4"], seen["native", "EPYC-Rome-v1"]
    assert native_intel[0] == native_amd[0] == "AVX2" and native_intel[2] == native_amd[2] == {"OFF"}
    assert "AVX2" in native_intel[3] and "AVX" not in native_amd[3]  # MKL's kernels by vendor: AVX2 on Intel only
    assert native_intel[1] != native_amd[1]  # and other bits for the same product
    portable = [v for (mode, _), v in seen.items() if mode == "portable"]
    assert {(v[0], v[1]) for v in portable} == {("AVX2", portable[0][1])} and all(v[2] == {"COMPATIBLE"} for v in portable)


def test_every_trial_of_the_hash_sets_was_replayed_on_an_emulated_haswell_with_its_bits_and_no_cpu_dependent_code():
    """The committed evidence covers the committed sets: each trial of ``hashes.json`` and ``hashes-sb3.json``, at
    its current key and hashes, has a last replay under ``qemu-x86_64 -cpu Haswell-v4`` in
    ``results/portable/emulated-replays.jsonl`` that gave the same hashes and translated no instruction whose result
    differs between real CPUs (``--scan``). A set made again without replaying it fails here."""
    replays = _benchmark("emulated_replays")
    last = replays.latest("Haswell-v4")
    for _, trial in replays.trials():
        name = f"{trial['algo']} {trial['env_label']}"
        line = last.get(trial["key"])
        assert line is not None, f"{name}: never replayed at this key"
        made = (line["made_result_hash"], line["made_param_hash"])
        assert made == (trial["result_hash"], trial["param_hash"]), f"{name}: replayed against other hashes"
        assert line["equal"] and not line.get("error"), name
        assert line.get("cpu_dependent_insns") == {}, f"{name}: {line.get('cpu_dependent_insns', 'not scanned')}"
    assert len(replays.trials()) == 35


@EMULATES_X86
def test_the_emulated_replays_scan_sees_an_approximate_reciprocal_and_an_x87_sine(tmp_path):
    """The scan's positive control: a process that runs ``rcpps`` and ``fsin`` once (machine code called through
    ctypes) is reported with both, and a process that runs neither with none."""
    _require_qemu()
    script = tmp_path / "approx.py"
    script.write_text(
        "import ctypes, mmap\n"
        "code = bytes.fromhex('0f53c0' 'd9ee' 'd9fe' 'ddd8' 'c3')  # rcpps xmm0,xmm0; fldz; fsin; fstp st(0); ret\n"
        "buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
        "buf.write(code)\n"
        "ctypes.CFUNCTYPE(None)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))()\n"
        "print('ran')\n"
    )
    scan = _benchmark("emulated_replays").run_scanned
    out, insns = scan([QEMU, "-cpu", "Haswell-v4", sys.executable, str(script)], dict(os.environ))
    assert (out.returncode, out.stdout.strip(), insns) == (0, "ran", {"fsin": 1, "rcpps": 1})
    out, insns = scan([QEMU, "-cpu", "Haswell-v4", sys.executable, "-c", "import math; print(math.sin(1.0))"],
                      dict(os.environ))  # fmt: skip
    assert (out.returncode, insns) == (0, {})


def test_portable_sb3_rmsprop_steps_as_torchs_with_an_exactly_rounded_square_root(monkeypatch):
    """sb3-a2c's optimizer in portable trials (suite.algorithms.sb3.registration.hold_rmsprop): with torch's own
    square root put back it gives torch's RMSprop and SB3's RMSpropTFLike bits in every variant, and numpy's gives
    other bits (torch's float sqrt is not correctly rounded: docs/kernels.md), the correctly rounded ones."""
    import numpy as np
    import torch
    from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike

    from suite.algorithms.sb3 import registration

    held, held_tf = registration._held_classes()

    def steps(base: Any, swap: Any, **kw: Any) -> bytes:
        g = torch.Generator().manual_seed(0)
        w = torch.randn(4096, generator=g, requires_grad=True)
        opt = base([w], lr=7e-4, alpha=0.99, eps=1e-5, **kw)
        if swap is not None:
            opt.__class__ = swap
        for _ in range(3):
            opt.zero_grad()
            (w * torch.randn(4096, generator=g)).sum().backward()
            opt.step()
        return w.detach().numpy().tobytes()

    variants = ({}, {"momentum": 0.9}, {"centered": True}, {"weight_decay": 0.01})
    exact = {i: steps(torch.optim.RMSprop, held, **kw) for i, kw in enumerate(variants)}
    monkeypatch.setattr(registration, "exact_sqrt", lambda t: t.sqrt())
    for i, kw in enumerate(variants):
        assert steps(torch.optim.RMSprop, held, **kw) == steps(torch.optim.RMSprop, None, **kw), kw
        assert steps(RMSpropTFLike, held_tf, **kw) == steps(RMSpropTFLike, None, **kw), kw
        assert exact[i] != steps(torch.optim.RMSprop, None, **kw), kw
    monkeypatch.undo()
    x = torch.rand(65536, generator=torch.Generator().manual_seed(1)) * 4
    rounded = np.sqrt(x.numpy().astype(np.float64)).astype(np.float32)
    assert np.array_equal(registration.exact_sqrt(x).numpy(), rounded)


def _battery() -> Any:
    return _benchmark("libm_battery")


@EMULATES_X86
def test_python_libm_and_numpy_ufuncs_give_the_committed_bits_here_and_on_an_emulated_haswell(capsys):
    """The libm/numpy battery (benchmarks/libm_battery.py: Python's ``math`` and numpy's float64/float32 ufuncs, over
    the envs' and algorithms' ranges and hard cases) in portable mode, hashed per function: this machine and
    ``qemu-x86_64 -cpu Haswell-v4`` (Intel, AVX2, FMA) give the committed hashes of every function, and the emulated
    run translates no instruction whose result differs between real CPUs (benchmarks/emulated_replays.py)."""
    _require_qemu()
    battery = _battery()
    committed = json.loads(battery.HASHES.read_text())
    env = {**os.environ, **kernels.environ("portable")}
    script = str(REPO / "benchmarks" / "libm_battery.py")
    verdicts = {}
    here = [sys.executable, script, "--check"]
    out = subprocess.run(here, env=env, capture_output=True, text=True)
    emulated, insns = _benchmark("emulated_replays").run_scanned([QEMU, "-cpu", "Haswell-v4", *here], env)
    for where, run in (("this machine", out), (f"{QEMU} -cpu Haswell-v4", emulated)):
        assert run.returncode in (0, 1), run.stderr
        verdicts[where] = json.loads(run.stdout.strip().splitlines()[-1])
    with capsys.disabled():
        print(f"\nlibm battery made on {committed['cpu']['model']} ({committed['libc']}), replayed on "
              f"{_hash_set_module().cpu()['model']} ({battery.libm()}) and under {QEMU} -cpu Haswell-v4")  # fmt: skip
    for where, verdict in verdicts.items():
        assert verdict == {"functions": len(committed["hashes"]), "differ": []}, where
    assert insns == {}  # no approximate or x87 instruction: the emulated bits are a real AVX2 CPU's
    assert len(committed["hashes"]) == 70 and min(committed["inputs_per_function"].values()) >= 20_000


def test_a_claim_table_says_its_mode(tmp_path):
    from suite.claims import load_claim_set
    from suite.claims.tables import KERNEL_LINES, headline

    shipped = load_claim_set("cleanrl-benchmark")
    assert shipped.kernels == "portable" and KERNEL_LINES["portable"] in headline(shipped, [])
    native = dataclasses.replace(shipped, kernels=None)  # a set without a kernels line: the default, native
    assert KERNEL_LINES["native"] in headline(native, [])
    modes = {}
    for path in sorted((REPO / "reports" / "claims").glob("**/verdicts.json")):  # every committed table, detailed runs too
        committed = json.loads(path.read_text())
        mode = load_claim_set(committed["claim_set"]).kernels or "native"
        assert committed["kernels"] == mode and KERNEL_LINES[mode] in committed["headline"], path
        modes[committed["claim_set"]] = mode
    shipped_sets = {path.stem for path in (REPO / "suite" / "claims" / "sets").glob("*.toml")}
    assert set(modes) == shipped_sets and set(modes.values()) == {"portable"}  # every committed table checks anywhere
    records = sorted((REPO / "reports" / "claims").glob("**/records.db"))  # each folder holds its table's mode only
    assert len(records) >= len(modes)
    for db in records:
        conn = sqlite3.connect(f"file:{db}?immutable=1", uri=True)
        try:
            held = conn.execute("SELECT DISTINCT COALESCE(json_extract(provenance, '$.kernels.mode'), 'native') "
                                "FROM trials").fetchall()  # fmt: skip
        finally:
            conn.close()
        assert held == [("portable",)], db
