"""The analysis options: one declaration (commands/options.py), the same options with the same help in
every command that analyses a bundle, and one AnalyzeOptions handed on by each of them."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from preemptlog.cli import app
from preemptlog.commands import COMMANDS
from preemptlog.errors import UsageError
from preemptlog.model.result import AnalyzeOptions

from ..conftest import FIXTURES, ROOT

# Every command that analyses a bundle (export: when its SOURCE is a bundle).
ANALYSING = [
    ["analyze"],
    ["explain"],
    ["report"],
    ["whatif"],
    ["fleet", "run"],
    ["export", "grafana"],
    ["export", "openmetrics"],
]
if "watch" in COMMANDS:  # the live watcher explains each storm it saves as analyze would
    ANALYSING.append(["watch"])
OPTIONS = [
    "--year",
    "--tz",
    "--file-kind",
    "--offset",
    "--before",
    "--after",
    "--lookback-steps",
    "--rules",
    "--threshold",
]
FILTERING = {"analyze", "explain", "report"}  # they take --kind, whose FILE=KIND still forces a file's kind


def _help(cmd: list[str]) -> str:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", *cmd, "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout


def _options(text: str) -> dict[str, tuple[str, str]]:
    """--help's options: long name -> (the names as listed, the help with all white space taken out:
    the column width, and so the wrapping, differs between commands)."""
    body = text.split("Options:", 1)[1]
    out: dict[str, tuple[str, str]] = {}
    current: list[str] | None = None
    for line in body.splitlines():
        m = re.match(r"^  (-\S.*?)(?:\s{2,}(.*))?$", line)
        if m:
            names = m.group(1)
            longs = re.findall(r"(?<![\w-])--[\w-]+", names)
            current = [names, m.group(2) or ""]
            out[longs[0]] = current  # type: ignore[assignment]
        elif current is not None and line.strip():
            current[1] += line
    return {k: (names, "".join(h.split())) for k, (names, h) in out.items()}


@pytest.fixture(scope="module")
def helps() -> dict[str, dict[str, tuple[str, str]]]:
    return {" ".join(cmd): _options(_help(cmd)) for cmd in ANALYSING}


def test_every_analysing_command_lists_the_same_analysis_options(helps):
    first = helps["analyze"]
    for cmd, opts in helps.items():
        missing = [o for o in OPTIONS if o not in opts]
        assert not missing, f"{cmd} --help lacks {missing}"
        for o in OPTIONS:
            assert opts[o][1] == first[o][1], f"{cmd} {o}: another help than analyze's"
        # The listed order is the group's.
        listed = [o for o in opts if o in OPTIONS]
        assert listed == OPTIONS, cmd
        # --set, the old spelling of --threshold: everywhere but in whatif, where it is a vLLM setting.
        spellings = opts["--threshold"][0]
        assert ("--set" in spellings) == (cmd != "whatif"), (cmd, spellings)
        assert ("--kind" in opts) == (cmd in FILTERING), cmd
    assert "--set" in helps["whatif"]  # whatif's own: a vLLM setting


def _typer_option_strings(path) -> set[str]:
    """The option names given to typer.Option(...) in one module."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Option":
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-"):
                    names.add(arg.value)
    return names


# simulate's --tz is another option: the zone of the simulated wall clock it writes.
OTHER_MEANING = {"simulate.py": {"--tz"}}


def test_the_analysis_options_are_declared_in_one_module():
    modules = sorted((ROOT / "preemptlog" / "commands").glob("*.py"))
    declared = {m.name: _typer_option_strings(m) - OTHER_MEANING.get(m.name, set()) for m in modules}
    for o in OPTIONS:
        where = [name for name, opts in declared.items() if o in opts]
        assert where == ["options.py"], f"{o} is declared in {where}"
    # ... and nowhere else is a copy of their help text.
    help_text = "Evidence window: seconds before each event."
    assert [m.name for m in modules if help_text in m.read_text()] == ["options.py"]


GIVEN = [
    "--year",
    "2025",
    "--tz",
    "UTC",
    "--file-kind",
    "notes.md=vllm-log",
    "--offset",
    "dmon=-2s",
    "--before",
    "5",
    "--after",
    "1",
    "--lookback-steps",
    "2",
    "--rules",
    "ours.toml",
    "--threshold",
    "kv_ceiling=80",
]
WANT = {
    "year": 2025,
    "tz": "UTC",
    "kinds": ["notes.md=vllm-log"],
    "offsets": {"dmon": -2.0},
    "before": 5.0,
    "after": 1.0,
    "lookback_steps": 2,
    "rules_files": ["ours.toml"],
    "sets": ["kv_ceiling=80"],
}
DEMO = str(FIXTURES / "demo")


class _Stop(UsageError):
    pass


@pytest.mark.parametrize(
    ("cmd", "target"),
    [
        (["analyze", DEMO], "preemptlog.analysis.analyze"),
        (["explain", "vllm.log:1", DEMO], "preemptlog.analysis.analyze"),
        (["report", DEMO, "-o", "-"], "preemptlog.analysis.analyze"),
        (["whatif", DEMO], "preemptlog.analysis.analyze"),
        (["export", "grafana", DEMO], "preemptlog.fleet.export.load"),
        (["export", "openmetrics", DEMO], "preemptlog.fleet.export.load"),
        (["fleet", "run", DEMO, "--force", "--out", "{tmp}/fleet"], "preemptlog.fleet.pool.run"),
    ],
    ids=["analyze", "explain", "report", "whatif", "export-grafana", "export-openmetrics", "fleet-run"],
)
def test_each_command_hands_one_analyze_options_on(monkeypatch, tmp_path, cmd, target):
    if cmd[0] == "report":
        pytest.importorskip("plotly")
    seen: list[AnalyzeOptions] = []

    def stop(*args, **kwargs):
        seen.append(kwargs.get("options") or next(a for a in args if isinstance(a, AnalyzeOptions)))
        raise _Stop("stopped by the test")

    module, name = target.rsplit(".", 1)
    monkeypatch.setattr(f"{module}.{name}", stop)
    args = [a.replace("{tmp}", str(tmp_path)) for a in cmd] + GIVEN + ["-q"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "stopped by the test" in r.stderr, (r.exit_code, r.stderr)
    (options,) = seen
    assert {k: getattr(options, k) for k in WANT} == WANT
    assert options.keep_request_rows == (cmd[0] == "whatif")


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "preemptlog", *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_old_spellings_still_work_with_their_note():
    """The notes read the command line (sys.argv): through a real process."""
    p = _run("export", "grafana", "/nonexistent", "--set", "kv_ceiling=80", "--offset", "dmon")
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        "preemptlog: note: a rules threshold is --threshold NAME=VALUE now (--set still works)",
        "preemptlog: error: --offset expects KIND_OR_FILE=DURATION, got 'dmon' (e.g. --offset dmon=-2s)",
    ]
    p = _run("analyze", DEMO, "--tz", "UTC", "--kind", "vllm.log=vllm-log", "--offset", "x", "-q")
    assert p.returncode == 2 and p.stderr.splitlines()[0].endswith(
        "--kind FILE=KIND is --file-kind FILE=KIND now (the old spelling works)"
    )
    p = _run("whatif", DEMO, "--set", "max_num_seqs=8", "--threshold", "queue_cap=7", "--offset", "x", "-q")
    assert p.returncode == 2 and "--threshold NAME=VALUE now" not in p.stderr  # --set is whatif's own


def test_whatif_set_is_a_vllm_setting_not_the_threshold(monkeypatch):
    seen = []

    def stop(paths, options, **kwargs):
        seen.append(options)
        raise _Stop("stopped by the test")

    monkeypatch.setattr("preemptlog.analysis.analyze", stop)
    r = CliRunner().invoke(app, ["whatif", DEMO, "--set", "max_num_seqs=8", "--threshold", "queue_cap=7", "-q"])
    assert r.exit_code == 2 and "stopped by the test" in r.stderr
    assert seen[0].sets == ["queue_cap=7"]
