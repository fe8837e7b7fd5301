"""Plugins: single files and installed packages register algorithms and env specs with the built-ins' guarantees.

In-process tests load plugins inside ``plugins.isolated()`` so nothing leaks into other tests. The CLI tests install
the worked example (``examples/reinforce``) from a temporary copy into this environment and uninstall it afterwards.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

from suite import api, plugins
from suite.cli import main
from suite.envs import get_env_spec, list_envs
from suite.errors import UserError
from suite.registry import get_algorithm, list_algorithms
from suite.stats.references import env_reference
from suite.study import load_study, parse_study
from suite.trial import TrialSpec, deterministic_view, run_trial

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "reinforce"
SUITE = [sys.executable, "-m", "suite.cli"]

# A complete algorithm plugin in one file: PPO's trainer under another id, written against suite.api only.
MY_PPO = '''
from dataclasses import dataclass

from suite import api

__version__ = "2.3.4"


@dataclass(frozen=True)
class MyConfig(api.ActorCriticConfig):
    """PPO's config."""


class MyTrainer(api.ActorCriticTrainer):
    def loss(self, mb):
        loss, metrics, _, _ = api.ppo_policy_value_loss(self, mb, self.clip)
        return loss, metrics


@api.register("my-ppo", version="0.0.1", summary="PPO again, from a file", reference="test",
              action_spaces=("discrete",), config=MyConfig, policy_factory=api.actor_critic_policy)
def train(ctx, cfg):
    return MyTrainer(ctx, cfg).train()
'''


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def isolated() -> Iterator[None]:
    with plugins.isolated():
        yield


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("suite: error: "), stderr
    return lines[0]


# ----------------------------------------------------------------------------------------------------------- in-process
def test_single_file_plugin_registers_with_its_name_version_and_hash(tmp_path, isolated):
    path = _write(tmp_path / "my_ppo.py", MY_PPO)
    [info] = plugins.load_plugins([str(path)])
    assert (info.name, info.version, info.kind, info.source) == ("my_ppo", "2.3.4", "file", str(path))
    assert info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert info.algorithms == ("my-ppo",) and info.envs == ()
    algo = get_algorithm("my-ppo")
    assert (algo.plugin, algo.plugin_version, algo.version) == ("my_ppo", "2.3.4", "0.0.1")
    assert get_algorithm("ppo").plugin is None
    assert plugins.load_plugins([str(path)]) == [info]  # loaded once: no second import, no clash with itself
    assert plugins.provenance_of("my-ppo", "CartPole-v1")["algo_plugin"] == info.as_dict()
    assert plugins.provenance_of("ppo", "CartPole-v1")["algo_plugin"] is None


def test_plugin_trials_are_deterministic_and_carry_the_plugin_in_provenance(tmp_path, isolated):
    path = str(_write(tmp_path / "my_ppo.py", MY_PPO))
    spec = TrialSpec("my-ppo", "CartPole-v1", 0, 512, overrides={"n_steps": 128}, n_eval_episodes=2, plugins=(path,))
    first, second = run_trial(spec.resolve()), run_trial(spec.resolve())
    assert first["status"] == "ok", first["error"]
    assert deterministic_view(first) == deterministic_view(second)
    assert first["provenance"]["algo_plugin"]["name"] == "my_ppo" and first["provenance"]["env_plugin"] is None
    # the plugin's paths are not part of the key: the same trial planned elsewhere has the same identity
    assert TrialSpec("my-ppo", "CartPole-v1", 0, 512, overrides={"n_steps": 128}, n_eval_episodes=2).resolve().key == (
        spec.resolve().key
    )


def test_broken_plugin_is_one_error_naming_it_and_registers_nothing(tmp_path, isolated):
    path = _write(
        tmp_path / "broken.py",
        MY_PPO.replace('"my-ppo"', '"half-registered"') + "\nraise RuntimeError('boom\\nsecond line')\n",
    )
    with pytest.raises(UserError) as err:
        plugins.load_plugins([str(path)])
    message = str(err.value)
    assert message.startswith(f"plugin 'broken' ({path}) failed to import: RuntimeError: boom | second line")
    assert "\n" not in message
    with pytest.raises(UserError, match="unknown algorithm 'half-registered'"):
        get_algorithm("half-registered")  # what it registered before failing was removed
    assert not any(m.startswith("rl_suite_plugin_broken") for m in sys.modules)


@pytest.mark.parametrize(
    ("name", "owner"),
    [("ppo", "algorithm id, built-in"), ("rlvr-prm", "alias of 'ppo-rlvr-prm', built-in")],
)
def test_clashing_id_is_an_error_never_an_override(tmp_path, isolated, name, owner):
    path = _write(tmp_path / "clash.py", MY_PPO.replace('"my-ppo"', f'"{name}"'))
    with pytest.raises(UserError, match=f"plugin 'clash' .*: algorithm id '{name}' is already registered \\({owner}\\)"):
        plugins.load_plugins([str(path)])
    assert get_algorithm(name).plugin is None and get_algorithm(name).train.__module__.startswith("suite.")


def test_two_plugins_with_one_id_clash_naming_the_first(tmp_path, isolated):
    first = _write(tmp_path / "first.py", MY_PPO)
    second = _write(tmp_path / "second.py", MY_PPO)
    plugins.load_plugins([str(first)])
    with pytest.raises(
        UserError, match="plugin 'second' .*'my-ppo' is already registered \\(algorithm id, by plugin 'first'\\)"
    ):
        plugins.load_plugins([str(second)])
    assert get_algorithm("my-ppo").plugin == "first"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("missing_dir/none.py", "plugin file not found: "),
        ("no_such_plugin_module", "plugin 'no_such_plugin_module' not found: no such module or .py file"),
    ],
)
def test_missing_plugins_are_user_errors(spec, message, isolated):
    with pytest.raises(UserError, match=message):
        plugins.load_plugins([spec])


def test_a_plugin_for_another_api_major_version_fails_naming_it(tmp_path, isolated):
    path = _write(tmp_path / "future.py", "from suite import api\napi.require_api(2)\n")
    with pytest.raises(UserError, match=r"plugin 'future' .*ImportError: written for suite.api 2.x, but this suite provides"):
        plugins.load_plugins([str(path)])


def test_plugin_env_spec_overrides_inference_with_reference_scores_and_budgets(tmp_path, isolated):
    env_id = "PluginCartPole-v0"
    plugin = _write(
        tmp_path / "my_env.py",
        f'''
        import gymnasium as gym
        from suite import api

        gym.register("{env_id}", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv", max_episode_steps=200)
        api.register_env_spec(api.EnvSpec("{env_id}", "classic", "discrete", "vector", 200, random_score=20.0,
                                          reference_score=200.0, threshold=195.0, references_source="test numbers",
                                          budgets={{"smoke": 1024}}))
        ''',
    )
    try:
        [info] = plugins.load_plugins([str(plugin)])
        assert info.envs == (env_id,)
        spec = get_env_spec(env_id)
        assert (spec.random_score, spec.reference_score, dict(spec.budgets)) == (20.0, 200.0, {"smoke": 1024})
        assert spec in list_envs()
        ref = env_reference(env_id)
        assert ref.normalised and float(ref.normalise(110.0)) == pytest.approx(0.5) and ref.threshold == 195.0
        study = parse_study({"envs": [env_id], "algos": ["ppo"], "tier": "smoke"})
        assert [t.total_timesteps for t in study.trials(seeds=[0])] == [1024]  # the spec's budget
        assert plugins.provenance_of("ppo", env_id)["env_plugin"]["name"] == "my_env"
    finally:
        gym.registry.pop(env_id, None)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('api.register_env_spec(api.EnvSpec("CartPole-v1", "classic", "discrete", "vector", 500))',
         "env id 'CartPole-v1' is a built-in env spec; env specs are never overridden"),
        ('api.register_env_spec(api.EnvSpec("NotInGym-v0", "classic", "discrete", "vector", 500))',
         "no such gymnasium id"),
        ('api.register_env_spec(api.EnvSpec("Acrobot-v1", "classic", "discrete", "vector", 100))',
         "max_episode_steps 100 differs from the gymnasium registration's 500"),
        ('api.register_env_spec(api.EnvSpec("Acrobot-v1", "space", "discrete", "vector", 500))', "unknown family 'space'"),
    ],
)  # fmt: skip
def test_bad_env_specs_fail_the_plugin_naming_it(tmp_path, isolated, body, message):
    path = _write(tmp_path / "bad_env.py", f"from suite import api\n{body}\n")
    with pytest.raises(UserError, match=f"plugin 'bad_env' .*{message}"):
        plugins.load_plugins([str(path)])
    assert get_env_spec("Acrobot-v1").max_episode_steps == 500


def test_study_plugins_are_relative_to_the_file_and_star_means_builtins_plus_its_own(tmp_path, isolated):
    (tmp_path / "algos").mkdir()
    _write(tmp_path / "algos" / "my_ppo.py", MY_PPO)
    study_file = tmp_path / "s.toml"
    study_file.write_text('plugins = ["algos/my_ppo.py"]\nenvs = ["CartPole-v1"]\nalgos = ["*"]\nseeds = "0"\n')
    study = load_study(str(study_file))
    assert study.plugins == (str((tmp_path / "algos" / "my_ppo.py").resolve()),)
    trials = study.trials(tier="smoke")
    assert {"my-ppo", "ppo"} <= {t.algo for t in trials}
    assert all(t.plugins == study.plugins for t in trials)
    # another study in the same process: the loaded plugin is not pulled into its "*"
    other = parse_study({"envs": ["CartPole-v1"], "algos": ["*"], "seeds": "0"})
    assert "my-ppo" not in {t.algo for t in other.trials(tier="smoke")}
    assert "my-ppo" in {a.id for a in list_algorithms()}


def test_study_plugins_key_must_be_a_list_of_strings():
    with pytest.raises(UserError, match="plugins must be a list of .py paths or module names"):
        parse_study({"envs": ["CartPole-v1"], "plugins": "x.py"})


# --------------------------------------------------------------------------------------------------------- the API
def test_api_exports_every_name_once_split_into_stable_and_unstable():
    assert set(api.STABLE).isdisjoint(api.UNSTABLE)
    assert sorted(api.__all__) == sorted({*api.STABLE, *api.UNSTABLE})
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    major, minor = (int(x) for x in api.API_VERSION.split("."))
    api.require_api(major)
    with pytest.raises(ImportError, match="written for suite.api"):
        api.require_api(major + 1)


def test_the_worked_example_uses_only_the_public_api_and_is_small():
    source = (EXAMPLE / "suite_reinforce" / "__init__.py").read_text()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "suite":
            assert node.module == "suite" and [a.name for a in node.names] == ["api"], ast.dump(node)
        if isinstance(node, ast.Import):
            assert all(a.name.split(".")[0] != "suite" for a in node.names)
    docstrings = {
        line
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)
    }
    code = [
        text
        for number, text in enumerate(source.splitlines(), start=1)
        if text.strip() and not text.strip().startswith("#") and number not in docstrings
    ]
    assert len(source.splitlines()) < 100 and len(code) < 70, len(code)  # "well under 100 lines" (issue 13)


# ------------------------------------------------------------------------------------------------- through the CLI
def _pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def _pip_install_into(package: Path, target: Path) -> Path:
    """Install ``package`` (not editable, no dependencies) into the directory ``target``, not into this venv: only
    the processes given ``target`` on their path (:func:`_cli`'s ``path``) see it. Installing into the shared venv
    let the suite commands of tests running beside this one in other xdist workers load the plugin too (a broken one
    made them exit 2)."""
    _pip("install", "--no-deps", "--no-build-isolation", "-q", "--target", str(target), str(package))
    return target


@pytest.fixture(scope="module")
def example_installed(tmp_path_factory) -> Iterator[Path]:
    """The example package installed (not editable) from a temporary copy into a directory of its own; yields that
    directory (pass it as ``path`` to :func:`_cli`)."""
    copy = tmp_path_factory.mktemp("example") / "reinforce"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    yield _pip_install_into(copy, tmp_path_factory.mktemp("example-site"))


def _cli(*args: str, cwd: Path, timeout: float = 600, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``suite ARGS`` in a fresh process; ``path``: a directory of installed packages put first on its PYTHONPATH
    (inherited by its trial processes)."""
    env = None
    if path is not None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([*SUITE, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def _records(db: Path) -> dict[tuple[str, str, int], dict]:
    from suite.store import ResultsStore

    with ResultsStore(db, create=False) as store:
        keys = store.trials()["key"].tolist()
        out = {}
        for key in keys:
            rec = store.get_trial(key)
            out[(rec["algo"], rec["env_id"], rec["seed"])] = rec
        return out


def test_example_plugin_runs_through_the_cli_deterministic_recorded_and_reported(example_installed, tmp_path):
    listed = _cli("list", "--json", cwd=tmp_path, path=example_installed)
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    reinforce = next(a for a in data["algorithms"] if a["id"] == "reinforce")
    assert (reinforce["plugin"], reinforce["plugin_version"]) == ("rl-suite-reinforce", "0.1.0")
    assert [p["name"] for p in data["plugins"]] == ["rl-suite-reinforce"]

    study = str(EXAMPLE / "study.toml")
    db, db2 = tmp_path / "a.db", tmp_path / "b.db"
    common = ["--tier", "smoke", "--seeds", "0", "--workers", "2", "--quiet"]
    run = _cli(
        "run", study, "--algo", "reinforce", "--algo", "ppo", *common, "--db", str(db), cwd=tmp_path, path=example_installed
    )
    assert run.returncode == 0, run.stderr
    again = _cli(
        "run", study, "--algo", "reinforce", *common, "--no-report", "--db", str(db2), cwd=tmp_path, path=example_installed
    )
    assert again.returncode == 0, again.stderr

    first, second = _records(db), _records(db2)
    assert set(first) == {(a, e, 0) for a in ("reinforce", "ppo") for e in ("CartPole-v1", "Acrobot-v1")}
    for env_id in ("CartPole-v1", "Acrobot-v1"):
        rec = first[("reinforce", env_id, 0)]
        assert rec["status"] == "ok" and rec["steps"] == {"CartPole-v1": 2048, "Acrobot-v1": 2048}[env_id]
        assert deterministic_view(rec) == deterministic_view(second[("reinforce", env_id, 0)])
        plugin = rec["provenance"]["algo_plugin"]
        assert (plugin["name"], plugin["version"], plugin["kind"]) == ("rl-suite-reinforce", "0.1.0", "package")
        assert first[("ppo", env_id, 0)]["provenance"]["algo_plugin"] is None

    report = (tmp_path / "reports" / "reinforce-example" / "report.md").read_text()
    assert "reinforce" in report and "Acrobot-v1" in report
    assert "algorithm reinforce from rl-suite-reinforce 0.1.0 (package)" in report

    model = first[("reinforce", "Acrobot-v1", 0)]["model_path"]
    evaluated = _cli("evaluate", model, "--episodes", "2", cwd=tmp_path, path=example_installed)
    assert evaluated.returncode == 0, evaluated.stderr
    assert evaluated.stdout.startswith("reinforce on Acrobot-v1: mean return ")


def test_single_file_plugin_runs_in_worker_processes(tmp_path):
    path = _write(tmp_path / "my_ppo.py", MY_PPO)
    db = tmp_path / "w.db"
    run = _cli(
        "run", "--plugin", str(path), "--algo", "my-ppo", "--env", "CartPole-v1", "--seeds", "0,1", "--steps", "512",
        "--set", "n_steps=128", "--workers", "2", "--no-report", "--quiet", "--db", str(db), cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    records = _records(db)
    assert {k: r["status"] for k, r in records.items()} == {("my-ppo", "CartPole-v1", s): "ok" for s in (0, 1)}
    plugin = records[("my-ppo", "CartPole-v1", 0)]["provenance"]["algo_plugin"]
    assert (plugin["name"], plugin["kind"], plugin["version"]) == ("my_ppo", "file", "2.3.4")
    assert plugin["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    with plugins.isolated():  # the worker's record equals this process's run of the same trial
        spec = TrialSpec("my-ppo", "CartPole-v1", 1, 512, overrides={"n_steps": 128}, plugins=(str(path),))
        local = run_trial(spec.resolve())
    saved = records[("my-ppo", "CartPole-v1", 1)]
    for field in ("curve", "evals", "updates", "final_eval_mean", "config_hash", "key"):
        assert deterministic_view(local)[field] == deterministic_view(saved)[field], field


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("import no_such_dependency\n", "plugin 'bad' ({path}) failed to import: ModuleNotFoundError: No module named"),
        (
            MY_PPO.replace('"my-ppo"', '"ppo"'),
            "plugin 'bad' ({path}): algorithm id 'ppo' is already registered (algorithm id, built-in)",
        ),
    ],
)
def test_broken_or_clashing_file_plugin_is_one_line_and_exit_2_before_anything_runs(tmp_path, text, message):
    path = _write(tmp_path / "bad.py", text)
    db = tmp_path / "x.db"
    for argv in (
        ["run", "--plugin", str(path), "--algo", "ppo", "--env", "CartPole-v1", "--db", str(db)],
        ["list", "--plugin", str(path)],
    ):
        done = _cli(*argv, cwd=tmp_path, timeout=120)
        assert done.returncode == 2
        assert message.format(path=path) in _one_error_line(done.stderr)
    assert not db.exists()


@pytest.mark.parametrize("command", [["report", "default"], ["evaluate", "model.pt"], ["list"]])
def test_every_command_that_resolves_algorithms_takes_plugin(tmp_path, capsys, command, isolated):
    path = _write(tmp_path / "bad.py", "raise RuntimeError('no')\n")
    assert main([*command, "--plugin", str(path)]) == 2
    assert (
        _one_error_line(capsys.readouterr().err) == f"suite: error: plugin 'bad' ({path}) failed to import: RuntimeError: no"
    )
    good = _write(tmp_path / "my_ppo.py", MY_PPO)
    assert main(["list", "--plugin", str(good)]) == 0
    assert "my-ppo" in capsys.readouterr().out


def test_broken_installed_plugin_package_is_one_line_naming_it(tmp_path):
    package = tmp_path / "broken_pkg"
    (package / "suite_broken_plugin").mkdir(parents=True)
    (package / "suite_broken_plugin" / "__init__.py").write_text("raise ValueError('cannot start')\n")
    (package / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [build-system]
            requires = ["setuptools>=68"]
            build-backend = "setuptools.build_meta"
            [project]
            name = "rl-suite-broken-plugin"
            version = "9.9"
            [project.entry-points."rl_suite.algorithms"]
            broken = "suite_broken_plugin"
            """
        )
    )
    site = _pip_install_into(package, tmp_path / "site")
    done = _cli("list", cwd=tmp_path, timeout=120, path=site)
    assert done.returncode == 2
    assert _one_error_line(done.stderr) == (
        "suite: error: plugin 'rl-suite-broken-plugin' 9.9 (entry point rl_suite.algorithms: broken = suite_broken_plugin) "
        "failed to import: ValueError: cannot start"
    )


def test_a_study_needing_a_plugin_that_is_not_installed_is_one_line(tmp_path):
    study = tmp_path / "needs.toml"
    study.write_text('plugins = ["suite_reinforce_not_here"]\nenvs = ["CartPole-v1"]\nalgos = ["ppo"]\n')
    done = _cli("run", str(study), "--db", str(tmp_path / "x.db"), cwd=tmp_path, timeout=120)
    assert done.returncode == 2
    assert "plugin 'suite_reinforce_not_here' not found" in _one_error_line(done.stderr)
    assert not (tmp_path / "x.db").exists()
