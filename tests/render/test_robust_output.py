"""Log text is data (issue 7): rich markup shown literally, control sequences neutralised in every
terminal output, spreadsheet formulas guarded in CSV, output files atomic."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from preemptlog.cli import app
from preemptlog.outputs.safe import TerminalWriter, markup, neutralise, neutralise_lines

from ..conftest import write_lines

ESC = "\x1b"
V0 = (
    "WARNING 05-04 05:25:{:02d} [scheduler.py:1775] Sequence group {} is preempted by PreemptionMode.SWAP mode "
    "because there is not enough KV cache space. total_num_cumulative_preemption={}"
)
# Hostile request ids (V0 takes any non-space id). CSI/OSC sequences are removed from log text by the
# parser (ANSI colour); these are the control characters that get through to the renderers.
IDS = [
    "[red]boom[/red]",
    "[link=http://evil.example]click[/link]",
    f"reset{ESC}c{ESC}Pdcs\x07bell\x08bs",
    "\u202eevil:smile:",
    '=HYPERLINK("http://evil")',
    "@SUM(A1)\x9b31m",
    "[red]boom[/red]",  # twice: listed in the summary's "preempted more than once"
]
LINES = [V0.format(i, rid, i + 1) for i, rid in enumerate(IDS)]
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture
def hostile(tmp_path) -> Path:
    """A log with hostile text in a file whose *name* is hostile too."""
    d = tmp_path / "b"
    d.mkdir()
    p = d / f"[bold]v{ESC}[31mllm.log"
    write_lines(p, LINES)
    return p


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_neutralise_and_markup_units():
    assert neutralise(f"a{ESC}[31mb\n\u202ec\x9bd\x07") == "a\\x1b[31mb\\x0a\\u202ec\\x9bd\\x07"
    assert neutralise_lines("a\tb\r\nc\x1b") == "a\tb\nc\\x1b"
    assert markup("[red]x[/red]") == "\\[red]x\\[/red]"
    out = io.BytesIO()
    w = TerminalWriter(out)
    data = f'{{"raw": "{ESC}]0;t\u202e"}}\n'.encode()
    for i in range(len(data)):  # byte by byte: multi-byte characters split across writes
        w.write(data[i : i + 1])
    w.flush()
    assert out.getvalue().decode() == '{"raw": "\\x1b]0;t\\u202e"}\n'


def test_table_shows_markup_and_escapes_literally(hostile, monkeypatch):
    monkeypatch.chdir(hostile.parent.parent)  # short relative names: no folded cells
    r = invoke("analyze", Path("b") / hostile.name, "--tz", "UTC", "-f", "table", "-q")
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    assert "[red]boom[/red]" in out and "[link=http://evil.example]" in out  # not interpreted
    assert "reset\\x1bc\\x1bPdcs\\x07bell\\x08bs" in out and "\\u202eevil:smile:" in out
    assert not CONTROL.search(out), repr(CONTROL.search(out))
    assert "[bold]v\\x1b[31mllm.log" in out  # the file name, in the source:line column


def test_summary_shows_log_text_literally(hostile, tmp_path):
    (tmp_path / "b" / f"notes[blink]{ESC}]0;x{ESC}\\.txt").write_text("nothing here\n")
    r = invoke("analyze", hostile.parent, "--tz", "UTC", "-f", "ndjson", "-v")  # -v: every line of the summary
    assert r.exit_code == 0, r.stderr
    assert not CONTROL.search(r.stderr)
    err = " ".join(r.stderr.split())  # wrapped at word boundaries
    assert "[red]boom[/red] x2" in err  # "preempted more than once": a request id from the log
    assert "[bold]v\\x1b[31mllm.log" in err  # file names in assumptions
    assert "notes[blink]\\x1b]0;x\\x1b\\.txt" in err  # and in "not recognised"
    assert ":smile:" not in err or "😄" not in err
    assert not CONTROL.search(err)


def test_error_messages_are_neutralised(tmp_path):
    name = tmp_path / f"[red]missing{ESC}]0;pwned{ESC}\\.log"
    r = invoke("analyze", name)
    assert r.exit_code == 3
    assert r.stderr.count("\n") == 1
    assert "[red]missing\\x1b]0;pwned\\x1b\\.log: no such file" in r.stderr
    assert not CONTROL.search(r.stderr)


def test_explain_table_is_inert(hostile):
    r = invoke("analyze", hostile, "--tz", "UTC", "-f", "ndjson", "-q")
    ev = json.loads(r.stdout.splitlines()[2])["event_id"]
    r = invoke("explain", ev, hostile, "--tz", "UTC", "-f", "table")
    assert r.exit_code == 0, r.stderr
    assert "reset\\x1bc\\x1bPdcs" in r.stdout and not CONTROL.search(r.stdout)
    first = json.loads(invoke("analyze", hostile, "--tz", "UTC", "-f", "ndjson", "-q").stdout.splitlines()[0])
    r2 = invoke("explain", first["event_id"], hostile, "--tz", "UTC", "-f", "table")
    assert "[red]boom[/red]" in r2.stdout


def test_simulate_and_rules_print_paths_literally(tmp_path):
    out = tmp_path / "[red]sim"
    r = invoke("simulate", "clean", "-o", out, "--seed", "1")
    assert r.exit_code == 0, r.stderr
    assert f"wrote {out}" in r.stderr
    r = invoke("rules", "--rules", tmp_path / f"[red]nope{ESC}[2J.toml")
    assert r.exit_code == 2
    assert "[red]nope\\x1b[2J.toml" in r.stderr and not CONTROL.search(r.stderr)


def _on_a_terminal(args: list[str]) -> str:
    """Run the CLI with stdout on a pseudo-terminal; what the terminal received."""
    master, slave = pty.openpty()
    env = dict(os.environ, NO_COLOR="1", COLUMNS="300")
    p = subprocess.Popen(
        [sys.executable, "-m", "preemptlog", *args],
        stdout=slave,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    p.wait(timeout=60)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.parametrize("fmt", ["ndjson", "csv", "json"])
def test_machine_formats_on_a_terminal_are_neutralised(hostile, fmt):
    out = _on_a_terminal(["analyze", str(hostile), "--tz", "UTC", "-f", fmt, "-q"])
    assert "boom" in out
    assert "\u202e" not in out and "\x9b" not in out and ESC not in out.replace("\x1b[?", "")
    # in a pipe the bytes stay exact (the JSON escapes are JSON's own)
    r = invoke("analyze", hostile, "--tz", "UTC", "-f", fmt, "-q")
    assert "\u202e" in r.stdout


def test_csv_safe_guards_formula_cells_including_nested_json(hostile):
    r = invoke("analyze", hostile, "--tz", "UTC", "-f", "csv", "-q", "--csv-safe")
    assert r.exit_code == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert rows
    ids = [row["request_id"] for row in rows]
    assert '\'=HYPERLINK("http://evil")' in ids and any(i.startswith("'@SUM(A1)") for i in ids)
    for row in rows:
        for col, cell in row.items():
            if cell and cell[0] in "=+-@\t\r":
                # only typed numbers may start with '-' (they are numbers, not formulas)
                assert re.fullmatch(r"-?\d+(\.\d+)?", cell), (col, cell)
    nested = [c for c in rows[0] if rows[0][c].startswith(("[", "{"))]
    assert nested  # the verdict's nested columns are JSON text in one cell
    # without --csv-safe the cells are exact
    r = invoke("analyze", hostile, "--tz", "UTC", "-f", "csv", "-q")
    assert any(row["request_id"] == '=HYPERLINK("http://evil")' for row in csv.DictReader(io.StringIO(r.stdout)))


def test_nested_json_cell_with_a_formula_is_guarded():
    import polars as pl

    from preemptlog.render import csvfmt

    class A:
        pass

    df = pl.DataFrame({"event_id": ["e1"], "notes": [["=1+1", "ok"]], "evidence": [[{"name": "x", "value": "=2"}]]})
    out = io.BytesIO()
    orig = csvfmt.event_rows
    csvfmt.event_rows = lambda analysis: df
    try:
        csvfmt.write_csv(A(), out, safe=True)
    finally:
        csvfmt.event_rows = orig
    row = next(csv.DictReader(io.StringIO(out.getvalue().decode())))
    assert row["notes"] == '["=1+1","ok"]'  # JSON text starts with "[": never a formula
    assert json.loads(row["evidence"]) == [{"name": "x", "value": "=2"}]
