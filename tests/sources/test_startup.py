"""Start-up cost (issue 18): what a run loads, and the shortcuts that keep it from loading more,
each checked against the normal path. No test here asserts a time.

- commands/coercion.py: option values converted without pydantic where certain; every value
  shape below gives the same output, error and exit code as typer's own path;
- cli.main() registers only the command named (cli.app still has them all);
- rich's broken-pipe patch waits for rich to be imported; main() freezes the imported objects
  (not under a test runner). (whatif was imported only with a fix to replay; since issue 34 the
  library imports at module top, the CLI edge alone is lazy, and what a run loads is the fix plan's
  dependencies: the replay modules, no replay run.)
"""

from __future__ import annotations

import enum
import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import typer.core
import typer.main
from typer._coercion import build_runtime_param as typer_build_runtime_param
from typer._param_types import coerce_cli_choice
from typer.testing import CliRunner

from preemptlog.cli import _commands_for, app, make_app
from preemptlog.commands import COMMANDS, coercion, runner
from preemptlog.errors import ExitCode

from ..conftest import FIXTURES, ROOT, write_lines

V0 = str(FIXTURES / "golden" / "v0-unbracketed-0.6.log")

# A V1 log without a preemption: requests and stats lines only (hand-written).
QUIET_V1 = [
    "(APIServer pid=9) INFO 11-20 08:00:00 [entrypoints/logger.py:43] Received request chatcmpl-a1: params: "
    "SamplingParams(n=1, temperature=0.0, max_tokens=256), lora_request: None.",
    "(APIServer pid=9) INFO 11-20 08:00:01 [entrypoints/logger.py:43] Received request chatcmpl-a2: params: "
    "SamplingParams(n=1, temperature=0.7, max_tokens=64), lora_request: None.",
    "(APIServer pid=9) INFO 11-20 08:00:10 [loggers.py:123] Engine 000: Avg prompt throughput: 12.0 tokens/s, "
    "Avg generation throughput: 40.0 tokens/s, Running: 2 reqs, Waiting: 0 reqs, GPU KV cache usage: 10.0%, "
    "Prefix cache hit rate: 0.0%",
    "(APIServer pid=9) INFO 11-20 08:00:20 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
    "Avg generation throughput: 35.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 4.0%, "
    "Prefix cache hit rate: 0.0%",
]


def _run_py(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False
    )


# ---------------------------------------------------------------- option values: plain vs typer's path

SHAPES = [
    [],
    ["--year", "2025"],
    ["--year", "abc"],
    ["--year", "1800"],
    ["--year", "2201"],
    ["--year", "+2025"],
    ["--year", " 2025"],
    ["--year", "02025"],
    ["--year", "99999999999999999999999"],
    ["--before", "3"],
    ["--before", "0.5"],
    ["--before", "-1"],
    ["--before", "-0"],
    ["--before", "1e1"],
    ["--before", "nan"],
    ["--after", "inf"],
    ["--after", "5."],
    ["-f", "json"],
    ["-f", "JSON"],
    ["-f", "Csv"],
    ["-f", "bogus"],
    ["-f", ""],
    ["--lookback-steps", "0"],
    ["--lookback-steps", "-1"],
    ["--lookback-steps", "x"],
    ["--gate", "G1", "--gate", "G3-queue-overflow", "--kind", "logged"],
    ["--min-confidence", "high", "--columns", "time,event,gate"],
    ["--since", "", "--request", "x"],
]


def _invoke_both(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> tuple[object, object]:
    assert coercion.installed() and typer.core.build_runtime_param is not typer_build_runtime_param
    fast = CliRunner().invoke(app, args)
    with monkeypatch.context() as m:
        m.setattr(typer.core, "build_runtime_param", typer_build_runtime_param)
        normal = CliRunner().invoke(app, args)
    return fast, normal


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: " ".join(s) or "defaults")
def test_analyze_options_as_typer_converts_them(monkeypatch, shape):
    fast, normal = _invoke_both(monkeypatch, ["analyze", V0, "--tz", "UTC", *shape])
    assert (fast.exit_code, fast.stdout, fast.stderr) == (normal.exit_code, normal.stdout, normal.stderr)


@pytest.mark.parametrize("args", [["rules", "-f", "json"], ["rules", "-f", "TOML"], ["rules", "--set", "queue_cap=7"]])
def test_other_commands_as_typer_converts_them(monkeypatch, args):
    fast, normal = _invoke_both(monkeypatch, args)
    assert (fast.exit_code, fast.stdout, fast.stderr) == (normal.exit_code, normal.stdout, normal.stderr)


class Colour(enum.Enum):
    red = "red"
    dark_blue = "Dark-Blue"


def _conv(annotation, info):
    plain = coercion._plain(annotation, info, coerce_cli_choice)
    assert plain is not None
    return plain


def test_plain_conversions_take_only_certain_values():
    year = _conv(int, typer.Option(min=1970, max=2200))
    assert year("2025", None) == 2025 and year(2025, None) == 2025
    for value in ("1800", "abc", "02025", "+5", " 5", True, 2025.0, "9" * 30):
        with pytest.raises(coercion._Slow):
            year(value, None)
    secs = _conv(float, typer.Option(min=0.0))
    assert secs("0.5", None) == 0.5 and secs("3", None) == 3.0 and secs(10.0, None) == 10.0
    assert type(secs("3", None)) is float
    for value in ("-1", "1e3", "nan", float("nan"), "inf", "5.", 10):
        with pytest.raises(coercion._Slow):
            secs(value, None)
    text = _conv(str, typer.Option())
    assert text("x", None) == "x"
    with pytest.raises(coercion._Slow):
        text(b"x", None)
    many = _conv(list[str], typer.Option())
    assert many(("a", "b"), None) == ["a", "b"] and many("a", None) == ["a"]
    colour = _conv(Colour, typer.Option(case_sensitive=False))
    assert colour("dark-blue", None) is Colour.dark_blue and colour(Colour.red, None) is Colour.red
    with pytest.raises(coercion._Slow):
        colour("green", None)
    exact = _conv(Colour, typer.Option())
    with pytest.raises(coercion._Slow):
        exact("dark-blue", None)
    flag = _conv(bool, typer.Option())
    assert flag(True, None) is True
    with pytest.raises(coercion._Slow):
        flag("yes", None)


def test_types_it_does_not_know_go_to_typer():
    choose = coerce_cli_choice
    assert coercion._plain(Path, typer.Option(), choose) is None
    assert coercion._plain(int, typer.Option(parser=int), choose) is None
    assert coercion._plain(int, typer.Option(min=0, clamp=True), choose) is None
    assert coercion._plain(tuple[int, int], typer.Option(), choose) is None
    assert coercion._plain(list[list[str]], typer.Option(), choose) is None
    assert coercion._plain(str, typer.Option(min=1), choose) is None


_FOREIGN_PATCH = """
import sys
import typer.core, typer._coercion
typer.core.build_runtime_param = lambda d: typer._coercion.build_runtime_param(d)  # someone else's wrap
from preemptlog.commands import coercion
from preemptlog.cli import main
assert not coercion.installed(), "installed over a foreign patch"
sys.argv = ["preemptlog", *sys.argv[1:]]
main()
"""

_NORMAL = """
import sys
from preemptlog.cli import main
sys.argv = ["preemptlog", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("shape", [["--year", "1800"], ["-f", "bogus"], ["--year", "2025", "-f", "JSON", "-q"]])
def test_typer_as_shipped_when_the_patch_cannot_apply(shape):
    """A typer whose internals are not the expected ones is left alone; the CLI answers the same."""
    args = ["analyze", V0, "--tz", "UTC", *shape]
    foreign, normal = _run_py(_FOREIGN_PATCH, *args), _run_py(_NORMAL, *args)
    assert (foreign.returncode, foreign.stdout, foreign.stderr) == (normal.returncode, normal.stdout, normal.stderr)
    assert normal.returncode in (0, ExitCode.USAGE)


# ---------------------------------------------------------------- what a run loads

_LOADED = """
import gc, json, sys
from preemptlog.cli import main
sys.argv = ["preemptlog", *sys.argv[2:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
mods = sorted(sys.modules)
with open(REPORT, "w") as f:
    json.dump({"code": code, "modules": mods, "frozen": gc.get_freeze_count()}, f)
"""


def _loaded(tmp_path: Path, *args: str) -> dict[str, object]:
    report = tmp_path / "loaded.json"
    code = _LOADED.replace("REPORT", repr(str(report)))
    p = _run_py(code, "x", *args)
    assert report.is_file(), p.stderr
    return json.loads(report.read_text())


def test_analyze_quiet_ndjson_loads_neither_pydantic_nor_rich_nor_the_other_commands(tmp_path):
    log = write_lines(tmp_path / "vllm.log", QUIET_V1)
    got = _loaded(tmp_path, "analyze", str(log), "-f", "ndjson", "-q", "--year", "2025", "--tz", "UTC")
    assert got["code"] == 0
    mods = set(got["modules"])
    assert "polars" in mods
    assert not {m for m in mods if m.split(".")[0] in ("pydantic", "pydantic_core", "rich")}
    others = {f"preemptlog.commands.{c}" for c in COMMANDS if c != "analyze"}
    assert "preemptlog.commands.analyze" in mods and not (mods & others)
    assert got["frozen"] > 0  # main() froze the imports' objects


def test_the_summary_still_loads_rich(tmp_path):
    log = write_lines(tmp_path / "vllm.log", QUIET_V1)
    got = _loaded(tmp_path, "analyze", str(log), "--year", "2025", "--tz", "UTC")
    assert got["code"] == 0 and "rich.console" in got["modules"]


def test_help_builds_every_command(tmp_path):
    got = _loaded(tmp_path, "--help")
    assert got["code"] == 0
    assert {f"preemptlog.commands.{c}" for c in COMMANDS} <= set(got["modules"])


def test_commands_for_the_command_line(monkeypatch):
    monkeypatch.delenv("_PREEMPTLOG_COMPLETE", raising=False)
    assert _commands_for(["analyze", "x.log", "-q"]) == ["analyze"]
    assert _commands_for(["rules"]) == ["rules"]
    for argv in ([], ["--help"], ["-V"], ["analyz", "x"], ["--install-completion"], ["ANALYZE"]):
        assert list(_commands_for(argv)) == COMMANDS, argv
    monkeypatch.setenv("_PREEMPTLOG_COMPLETE", "complete_bash")
    assert list(_commands_for(["analyze"])) == COMMANDS


def test_the_app_has_every_command_in_help_order():
    assert list(typer.main.get_command(app).commands) == COMMANDS  # type: ignore[attr-defined]
    assert list(typer.main.get_command(make_app(["rules"])).commands) == ["rules"]  # type: ignore[attr-defined]


def test_one_command_app_answers_like_the_full_one():
    for args in (["analyze", "--help"], ["analyze"], ["analyze", V0, "--bogus"], ["analyze", V0, "--year", "x"]):
        one = CliRunner().invoke(make_app(["analyze"]), args)
        full = CliRunner().invoke(app, args)
        assert (one.exit_code, one.stdout, one.stderr) == (full.exit_code, full.stdout, full.stderr), args


@pytest.mark.parametrize("args", [["analyze", "--bogus"], ["analyze", "--help"], ["rules", "-f", "nope"]])
def test_main_with_one_command_answers_like_the_full_app(args):
    """Through main() (one command registered) and through a main() given the full app."""
    full = _NORMAL.replace(
        "main()", "import preemptlog.cli as c\nc.make_app = lambda names=None, _m=c.make_app: _m()\nmain()"
    )
    one, every = _run_py(_NORMAL, *args), _run_py(full, *args)
    assert (one.returncode, one.stdout, one.stderr) == (every.returncode, every.stdout, every.stderr)


def test_no_freeze_under_a_test_runner(monkeypatch):
    monkeypatch.setattr(runner, "_OWN_PROCESS", False)
    before = gc.get_freeze_count()
    r = CliRunner().invoke(app, ["analyze", V0, "--tz", "UTC", "-q"])
    assert r.exit_code == 0
    assert gc.get_freeze_count() == before


# ---------------------------------------------------------------- rich's broken-pipe patch, when rich comes


@pytest.mark.parametrize("rich_first", [False, True])
def test_rich_is_patched_whenever_it_is_imported(rich_first):
    code = f"""
import sys
if {rich_first}:
    import rich.console
from preemptlog.commands import runner
runner._quiet_broken_pipes()
assert ("rich.console" in sys.modules) == {rich_first}
from rich.console import Console
import rich.console
print(Console.on_broken_pipe.__module__, rich.console.__spec__.origin.endswith("console.py"),
      type(rich.console.__spec__.loader).__name__, any(type(f).__name__ == "_PatchRichOnImport" for f in sys.meta_path))
"""
    p = _run_py(code)
    assert p.returncode == 0, p.stderr
    module, origin, loader, hook_left = p.stdout.split()
    assert module == "preemptlog.commands.runner" and origin == "True" and hook_left == "False"
    assert (loader == "_PatchingLoader") == (not rich_first)
