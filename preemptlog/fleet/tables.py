"""The fleet report as text tables (``fleet report -f table``), one per section."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, BinaryIO

import polars as pl

from ..outputs.console import binary_console
from ..outputs.safe import text
from .report import headline

TITLES = {
    "servers": "Servers ranked by preemptions and tokens recomputed",
    "by": "Causes and mechanisms by {by}",
    "trend": "Per day",
    "fixes": "Fixes that address most events fleet-wide",
    "not_visible": "Servers whose counts are not visible (and what to add)",
    "errors": "Bundles that failed or were damaged",
}
MAX_ROWS = 50


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(v, date):
        return v.isoformat()
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def write_tables(sections: dict[str, pl.DataFrame], out: BinaryIO, *, by: str) -> None:
    from rich.table import Table

    with binary_console(out) as console:
        console.print(text(headline(sections)))
        for name, title in TITLES.items():
            df = sections[name]
            if not df.height:
                continue
            table = Table(title=title.format(by=by), title_justify="left", header_style="bold", expand=False)
            for c in df.columns:
                table.add_column(c, overflow="fold")
            for r in df.head(MAX_ROWS).iter_rows():
                table.add_row(*[text(_cell(v)) for v in r])  # type: ignore[arg-type]  # rich Text cells
            console.print(table)
            if df.height > MAX_ROWS:
                console.print(f"  ... and {df.height - MAX_ROWS} more row(s) (-f json or csv lists them all)")
