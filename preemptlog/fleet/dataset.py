"""Writing and reading the fleet dataset (layout: schema.py, docs/fleet.md).

``<out>/<table>/day=YYYY-MM-DD/part-<bundle_id>.parquet``: one part per table, day and bundle
(every server of the bundle in it: parts are coalesced per day, never one per server), written
to a hidden temporary name and renamed into place, so a reader never sees half a file and a
re-run replaces a bundle's parts instead of adding copies. The ``bundles`` row is written last:
a bundle is in the dataset once its ``bundles`` part exists, which is what a re-run skips.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
from collections.abc import Iterable
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import OutputError
from . import schema

_ARROW = {"String": pa.string(), "Int64": pa.int64(), "Float64": pa.float64(), "Boolean": pa.bool_()}


def arrow_schema(table: str) -> pa.Schema:
    """The table's columns as Arrow types (plain ``string``, ``timestamp[us, tz=UTC]``), with its
    key-value metadata (``preemptlog.schema_version``)."""
    fields = [
        pa.field(c, pa.timestamp("us", tz="UTC") if t.startswith("Datetime") else _ARROW[t])
        for c, t in schema.COLUMNS[table].items()
    ]
    return pa.schema(fields, metadata=schema.file_metadata(table))


def to_arrow(table: str, df: pl.DataFrame) -> pa.Table:
    """The rows (without ``day``) as an Arrow table of the declared schema."""
    cols = schema.conform(table, df).drop(schema.PARTITION, strict=False)
    return cols.to_arrow().cast(arrow_schema(table))


def part_name(bundle_id: str) -> str:
    return f"part-{bundle_id}.parquet"


def _write_atomic(path: Path, data: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.tmp"  # '.': every reader skips it
    try:
        pq.write_table(data, tmp, compression="zstd")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise OutputError(f"{path}: cannot write ({exc.strerror or exc})") from None


def write_table_parts(out: str | os.PathLike[str], table: str, bundle_id: str, df: pl.DataFrame) -> list[Path]:
    """This bundle's rows of one table, one part per day; its parts in other days are removed."""
    base = Path(out) / table
    written: list[Path] = []
    if df.height:
        for (day,), part in df.partition_by(schema.PARTITION, as_dict=True, maintain_order=True).items():
            path = base / f"{schema.PARTITION}={day.isoformat()}" / part_name(bundle_id)
            _write_atomic(path, to_arrow(table, part))
            written.append(path)
    for old in glob.glob(str(base / f"{schema.PARTITION}=*" / part_name(bundle_id))):
        if Path(old) not in written:
            with contextlib.suppress(OSError):
                os.unlink(old)
    return written


def write_bundle(out: str | os.PathLike[str], bundle_id: str, tables: dict[str, pl.DataFrame]) -> None:
    """Every table of one bundle; ``bundles`` last (the bundle counts as done once it is there)."""
    for table in schema.TABLES:
        if table != "bundles":
            write_table_parts(out, table, bundle_id, tables.get(table, schema.empty(table)))
    write_table_parts(out, "bundles", bundle_id, tables["bundles"])


def write_marker(out: str | os.PathLike[str]) -> None:
    """``_preemptlog.json`` at the dataset's root: the schema version and every table's columns."""
    path = Path(out) / schema.MARKER
    text = json.dumps(schema.describe(), indent=2) + "\n"
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
        if path.exists() and path.read_text() == text:
            return
        tmp = path.parent / f".{path.name}.{os.getpid()}.tmp"
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"{out}: cannot write the dataset there ({exc.strerror or exc})") from None


def check_dataset(out: str | os.PathLike[str]) -> None:
    """A folder that holds something else than a fleet dataset is refused (never written into)."""
    root = Path(out)
    if not root.exists():
        return
    if not root.is_dir():
        raise OutputError(f"--out {out}: is not a folder")
    marker = root / schema.MARKER
    if marker.exists():
        try:
            version = json.loads(marker.read_text()).get("schema_version")
        except (OSError, ValueError):
            version = None
        if version != schema.SCHEMA_VERSION:
            raise OutputError(
                f"--out {out}: holds a fleet dataset of schema {version}, this preemptlog writes {schema.SCHEMA_VERSION}",
                hint="write a new dataset (another --out)",
            )
        return
    if any(not p.name.startswith(".") for p in root.iterdir()):
        raise OutputError(
            f"--out {out}: the folder is not empty and holds no fleet dataset ({schema.MARKER})",
            hint="give a new or empty folder",
        )


def files(out: str | os.PathLike[str], table: str) -> list[str]:
    return sorted(glob.glob(str(Path(out) / table / f"{schema.PARTITION}=*" / "*.parquet")))


def scan(out: str | os.PathLike[str], table: str) -> pl.LazyFrame:
    """A table as a polars LazyFrame (hive partitioning: ``day`` from the folder names), or an
    empty frame of the table's schema when it has no part yet."""
    if not files(out, table):
        return schema.empty(table).lazy()
    return pl.scan_parquet(
        str(Path(out) / table / "**" / "*.parquet"),
        hive_partitioning=True,
        hive_schema={schema.PARTITION: pl.Date},
        missing_columns="insert",
        extra_columns="ignore",
        schema=schema.polars_schema(table),
    )


def known_ids(out: str | os.PathLike[str], *, outcomes: Iterable[str] | None = None) -> set[str]:
    """The bundles already in the dataset (optionally only those of these outcomes)."""
    lf = scan(out, "bundles")
    if outcomes is not None:
        lf = lf.filter(pl.col("outcome").is_in(list(outcomes)))
    return set(lf.select("bundle_id").collect().get_column("bundle_id").to_list())
