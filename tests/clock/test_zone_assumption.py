"""The zone assumption ("zone ... applies to every timestamp without an offset") is listed only where it
applies: not when every time the bundle reads states its offset (a log behind docker's or kubectl's
``--timestamps`` prefix, ISO prefixes with ``+02:00``, the Rust frontend's tracing lines; scrapes dated
by epochs), and naming the files it applies to when the logs state their offsets and another source
does not (a dmon capture, a scrape separator without an offset).

Before: every bundle listed it, ``assumed zone: UTC from --tz; applies to every timestamp without an
offset``, even one in which no timestamp lacks an offset (and --tz moves nothing).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ..conftest import FIXTURES, run_cli
from ..support.stock_v1 import V1_LOG

TIME = re.compile(r"(\d\d)-(\d\d) (\d\d:\d\d:\d\d)")


def _prefixed(fmt) -> str:
    """The stock V1 log, each line behind a prefix that states its offset, built from the line's own
    time by ``fmt(month, day, hh:mm:ss)``."""
    out = []
    for line in V1_LOG.split("\n"):
        mo, dd, hms = TIME.search(line).groups()
        out.append(fmt(mo, dd, hms) + line)
    return "\n".join(out) + "\n"


def _rust_tracing_only() -> str:
    """The Rust frontend's log of fixtures/golden, its tracing lines only (each an RFC 3339 time)."""
    text = (FIXTURES / "golden" / "v1-rust-tracing.log").read_text()
    return "".join(ln for ln in text.splitlines(keepends=True) if re.match(r"(\x1b\[[0-9;]*m)?\d{4}-", ln))


SHAPES = {
    "docker-timestamps": lambda: _prefixed(lambda mo, dd, hms: f"2026-{mo}-{dd}T{hms}.123456789Z "),
    "kubectl-prefix-timestamps": lambda: _prefixed(
        lambda mo, dd, hms: f"[pod/vllm-0/vllm] 2026-{mo}-{dd}T{hms}.000000001Z "
    ),
    "iso-plus-0200": lambda: _prefixed(
        lambda mo, dd, hms: f"2026-{mo}-{dd}T{int(hms[:2]) + 2:02d}{hms[2:]}.250+02:00 "
    ),
    "rust-tracing": _rust_tracing_only,
}


def _cli(root: Path, *tz: str) -> dict:
    p = run_cli("analyze", str(root), "-f", "json", *tz)
    assert "Traceback" not in p.stderr, p.stderr
    return json.loads(p.stdout)


def _zone(s: dict) -> list[dict]:
    return [a for a in s["assumptions"] if a["topic"] == "zone"]


@pytest.mark.parametrize("shape", list(SHAPES))
def test_cli_no_zone_assumed_when_every_time_states_its_offset(tmp_path, shape):
    b = tmp_path / "b"
    b.mkdir()
    (b / "vllm.log").write_text(SHAPES[shape]())
    # scrapes dated by epoch names: exact instants too
    for i, t in enumerate((1796205610, 1796205620)):
        (b / f"metrics-{t}.prom").write_text(
            f'# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{{engine="0"}} {float(i)}\n'
        )
    utc, tokyo, machine = _cli(b, "--tz", "UTC"), _cli(b, "--tz", "Asia/Tokyo"), _cli(b)
    for d in (utc, tokyo, machine):
        assert [i["kind"] for i in d["summary"]["inputs"]].count("vllm-log") == 1
        assert _zone(d["summary"]) == [], d["summary"]["assumptions"]
    # the zone moves nothing read: the same instants whatever --tz says (only how they are shown)
    spans = [{k: _instant(t) for k, t in d["summary"]["log_span"].items()} for d in (utc, tokyo)]
    assert spans[0] == spans[1] and spans[0]["first"] is not None, spans
    assert utc["summary"]["log_span"] != tokyo["summary"]["log_span"]  # shown in --tz
    assert utc["summary"]["events"] == tokyo["summary"]["events"]


def _instant(t: str | None) -> datetime | None:
    return None if t is None else datetime.fromisoformat(t).astimezone(UTC)


DMON = "#Date       Time        gpu     fb\n#YYYYMMDD   HH:MM:SS    Idx     MB\n" + "".join(
    f" 20261202   10:00:{s:02d}      0  {30000 + 100 * s}\n" for s in range(0, 50, 5)
)


def test_cli_the_zone_assumption_names_the_sources_without_an_offset(tmp_path):
    """A dmon capture (the machine's wall clock, no offset) beside a log whose every line states its
    offset: the zone applies to dmon's rows, and says so. Beside a stock log (its own times without an
    offset) the assumption is as it always was."""
    b = tmp_path / "b"
    b.mkdir()
    (b / "vllm.log").write_text(SHAPES["docker-timestamps"]())
    (b / "dmon.txt").write_text(DMON)
    s = _cli(b, "--tz", "UTC")["summary"]
    assert _zone(s) == [
        {
            "topic": "zone",
            "scope": "bundle",
            "value": "UTC",
            "source": "--tz; applies to every timestamp without an offset: those of b/dmon.txt",
        }
    ]
    stock = tmp_path / "stock"
    stock.mkdir()
    (stock / "vllm.log").write_text(V1_LOG + "\n")
    (stock / "dmon.txt").write_text(DMON)
    s = _cli(stock, "--tz", "UTC")["summary"]
    assert _zone(s) == [
        {
            "topic": "zone",
            "scope": "bundle",
            "value": "UTC",
            "source": "--tz; applies to every timestamp without an offset",
        }
    ]


def test_cli_a_scrape_separator_without_an_offset_keeps_the_zone_assumption_for_it(tmp_path):
    b = tmp_path / "b"
    b.mkdir()
    (b / "vllm.log").write_text(SHAPES["iso-plus-0200"]())
    page = '# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total{{engine="0"}} {n}\n'
    (b / "scrapes.prom").write_text(
        "".join(f"# scrape 2026-12-02T10:00:{10 * (k + 1)}\n" + page.format(n=float(k)) for k in range(3))
    )
    (b / "zoned.prom").write_text("# scrape 2026-12-02T10:00:45Z\n" + page.format(n=2.0))
    s = _cli(b, "--tz", "UTC")["summary"]
    assert [a["source"] for a in _zone(s)] == [
        "--tz; applies to every timestamp without an offset: those of b/scrapes.prom"
    ]
