"""Block-table records: JSON Lines in preemptlog's own format.

vLLM has no block-table log (facts page section 7), so preemptlog defines one:
``preemptlog/data/blocktable.schema.json`` (documented with an example in
docs/sources.md). One JSON object per line with ``type``:

- ``step``: a scheduler-step snapshot of the KV block pool (``num_free_blocks``
  required; ``free_regions`` as ``[[first_block_id, length], ...]`` or
  ``free_block_ids``; ``block_size``, ``num_total_blocks``, ``running``,
  ``waiting`` optional);
- ``table``: one request's block table at a step (``block_ids``; ``shared``
  blocks with their ``ref_count``; ``num_tokens``, ``prefix_id`` optional);
- ``event``: ``allocate | extend | free | preempt | swap_out | swap_in`` of a
  request's blocks (``blocks_before``, ``blocks_after``, ``blocks_needed``,
  ``reason`` optional; on a ``preempt`` after a failed allocation also the pool
  it asked: ``pool_free_blocks``, ``pool_largest_free_run``, ``watermark_blocks``;
  ``waiting``: the pending queue at the decision).

Format version 2 (``"v": 2``, what preemptlog's vLLM plugin writes; preemptlog/capture) adds
``request`` lifecycle records (``phase`` arrival | scheduled | resume | finish; frame ``bt_requests``) and
optional decision fields: ``largest_free_run`` / ``num_free_regions`` on steps (stated values win
over computed ones), ``num_computed_tokens`` / ``priority`` on tables, and on preempt events
``running``, ``reserved_blocks``, ``blocks_freed``, ``trigger_request_id``, ``policy``,
``num_computed_tokens_lost`` (docs/sources.md documents every field). Version 1 files read as before.

Time is ``time`` (ISO 8601; without an offset it is local time in ``--tz``)
or ``ts`` (epoch seconds, UTC). Extra fields are ignored; ``engine`` may be a
string or a non-negative integer. Lines that are not JSON objects of this format (bad JSON,
wrong types, missing required fields, no time, any other constraint of the schema file:
``minimum``, ``enum``, list shapes; :func:`_valid_expr` reads them from the file) are counted
and reported, never fatal; blank lines are skipped. A last line the file ends in the middle of
(no line end, no whole JSON value: the writer stopped mid-record) is said as a cut last record at
its file:line instead (:func:`cut_last_line`; the kind judges its last line, sniffing says nothing). An identical record (every field read equal)
seen twice in one file is read once, with a note (two files' records are never merged: two
servers' records can be alike).

Reading: every line is decoded by polars with an explicit schema
(``str.json_decode``); only a file where that fails falls back to Python's
``json`` line by line to find and count the bad lines. Both reads keep the same records: what
polars' decoder does not check (a number read as a string's text, a fraction or a bool truncated
into an integer) is found by one regex over the raw lines that may hold it (:func:`read_file`).

Frames: ``bt_steps`` (with the largest contiguous free run and the number of
free regions, computed from ``free_regions`` or, vectorised, from
``free_block_ids``), ``bt_tables``, ``bt_events`` (schemas below). A
``block_size`` on a step record is also a ``seen`` configuration value, and so is the
``vllm_version`` of the plugin's header (the first record of each file).
``preempt`` events are evidence; see reconcile.records_vs_counts for when they are the
preemption events (kind ``record``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import polars as pl

from ..clock.timebase import Assumption, localize_in_order
from ..inputs.textio import scan_lines
from ..model.config import VERSION_SHAPE
from ..model.frames import PolarsType
from .dmon import ends_mid_line
from .meets import MeetsLog
from .registry import SourceKind, SourceOutput, TimeContext, register, register_samples

if TYPE_CHECKING:
    from ..inputs.files import InputFile

KIND = "blocktable"
ACTIONS = ("allocate", "extend", "free", "preempt", "swap_out", "swap_in")
PHASES = ("arrival", "scheduled", "resume", "finish")  # request lifecycle records (format v2)

BT_STEPS_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "time_precision": "String",
    "engine": "String",
    "step": "Int64",
    "block_size": "Int64",
    "num_total_blocks": "Int64",
    "free_blocks": "Int64",
    "largest_free_run": "Int64",
    "free_regions": "Int64",
    "running": "Int64",
    "waiting": "Int64",
    "source": "String",
    "line": "UInt32",
}
BT_TABLES_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "time_precision": "String",
    "engine": "String",
    "step": "Int64",
    "request_id": "String",
    "num_blocks": "Int64",
    "num_tokens": "Int64",
    "shared_blocks": "Int64",  # blocks with ref_count > 1
    "max_ref_count": "Int64",
    "shared_block_ids": "List(Int64)",
    "block_ids": "List(Int64)",
    "prefix_id": "String",
    "num_computed_tokens": "Int64",  # v2: computed tokens (lost when the table is a preemption victim's)
    "priority": "Int64",  # v2
    "source": "String",
    "line": "UInt32",
}
# Text block_table lines inside vLLM logs (engines/vllm/hooks.py reads them into this frame).
BT_TEXT_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "time_precision": "String",
    "stream": "Int32",
    "seq": "UInt32",
    "engine": "String",
    "step": "Int64",
    "request_id": "String",
    "action": "String",
    "blocks_before": "Int64",
    "blocks_after": "Int64",
    "blocks_needed": "Int64",
    "reason": "String",
    "source": "String",
    "line": "UInt32",
}


# The columns of hooks.BT_TEXT_SCHEMA (so text block_table lines and records stack),
# plus what a preempt record after a failed allocation says about the decision.
BT_EVENTS_SCHEMA = {
    **{k: v for k, v in BT_TEXT_SCHEMA.items() if k not in ("source", "line")},
    "pool_free_blocks": "Int64",
    "pool_largest_free_run": "Int64",
    "watermark_blocks": "Int64",
    "waiting": "Int64",
    # v2 (the vLLM plugin's preempt records): the decision's context.
    "running": "Int64",
    "reserved_blocks": "Int64",
    "blocks_freed": "Int64",
    "trigger_request_id": "String",
    "policy": "String",
    "num_computed_tokens_lost": "Int64",
    "source": "String",
    "line": "UInt32",
}
# v2: request lifecycle records (``type`` ``request``), kept for workload and recompute analysis.
BT_REQUESTS_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "time_precision": "String",
    "engine": "String",
    "step": "Int64",
    "request_id": "String",
    "phase": "String",
    "prompt_tokens": "Int64",
    "max_tokens": "Int64",
    "priority": "Int64",
    "num_computed_tokens": "Int64",
    "output_tokens": "Int64",
    "finish_reason": "String",
    "num_preemptions": "Int64",
    "block_hashes": "List(String)",
    "source": "String",
    "line": "UInt32",
}

ISO_RE = r"^\s*(?P<d>\d{4}-\d\d-\d\d)[T ](?P<t>\d\d:\d\d:\d\d)(?:[.,](?P<f>\d{1,9}))?\s*(?P<z>Z|z|[+-]\d\d:?\d\d)?\s*$"


def _record_dtype() -> pl.Struct:
    return pl.Struct(
        {
            "type": pl.String,
            "time": pl.String,
            "ts": pl.Float64,
            "step": pl.Int64,
            "engine": pl.String,
            "block_size": pl.Int64,
            "num_total_blocks": pl.Int64,
            "num_free_blocks": pl.Int64,
            "free_block_ids": pl.List(pl.Int64),
            "free_regions": pl.List(pl.List(pl.Int64)),
            "running": pl.Int64,
            "waiting": pl.Int64,
            "request_id": pl.String,
            "block_ids": pl.List(pl.Int64),
            "num_tokens": pl.Int64,
            "shared": pl.List(pl.Struct({"block_id": pl.Int64, "ref_count": pl.Int64})),
            "prefix_id": pl.String,
            "action": pl.String,
            "blocks_before": pl.Int64,
            "blocks_after": pl.Int64,
            "blocks_needed": pl.Int64,
            "reason": pl.String,
            "pool_free_blocks": pl.Int64,
            "pool_largest_free_run": pl.Int64,
            "watermark_blocks": pl.Int64,
            # v2
            "largest_free_run": pl.Int64,
            "num_free_regions": pl.Int64,
            "num_computed_tokens": pl.Int64,
            "priority": pl.Int64,
            "reserved_blocks": pl.Int64,
            "blocks_freed": pl.Int64,
            "trigger_request_id": pl.String,
            "policy": pl.String,
            "num_computed_tokens_lost": pl.Int64,
            "phase": pl.String,
            "prompt_tokens": pl.Int64,
            "max_tokens": pl.Int64,
            "output_tokens": pl.Int64,
            "finish_reason": pl.String,
            "num_preemptions": pl.Int64,
            "block_hashes": pl.List(pl.String),
            "v": pl.Int64,  # format version: 2 = preemptlog's vLLM plugin (upstream vLLM's scheduler)
            "vllm_version": pl.String,  # the plugin's header: the first record of each file names vLLM's version
            "arrival_time": pl.Float64,  # not read: decoded for its type and its dot (read_file)
        }
    )


# The schema (preemptlog/data/blocktable.schema.json) is what a record must meet: its constraints
# become one polars expression (_valid_expr). JSON types are the decoder's part (read_file): polars'
# JSON decoder errs on a string where a number belongs (the file then takes the Python path, which
# checks every type), but reads a number or a bool into a string field as its text, and truncates a
# fraction or a bool into an integer. The columnar read looks at the raw line again, with one regex
# (_wrong_json_re), only where that may have happened: a string field whose text looks like a number
# or a bool, a line with a ``true``/``false`` or with more dots than its fractional numbers and
# strings hold. ``engine`` may also be a non-negative integer (the schema says so).
NUMBER_TEXT = r"^(?:-?[0-9][0-9.eE+-]*|true|false)$"
PROSE = ("time", "reason", "vllm_version", "prefix_id")  # string fields whose dots are expected
INT_TEXT = r"^[0-9]+$"
STRING_OR_INT = ("engine",)


def _wrong_json_re() -> str:
    """A field of the record with a value of the wrong JSON kind (a schema key inside an extra nested
    object reads as the record's own)."""
    strings, numbers, integers, number_lists, string_lists = [], [], [], [], []
    for f in _record_dtype().fields:
        t = f.dtype
        if t == pl.String and f.name not in STRING_OR_INT:
            strings.append(f.name)
        elif t in (pl.Int64, pl.Float64):
            numbers.append(f.name)
            if t == pl.Int64:
                integers.append(f.name)
        elif isinstance(t, pl.List) and isinstance(t.inner, pl.Struct):  # ``shared``: its objects' integers
            numbers += [g.name for g in t.inner.fields]
            integers += [g.name for g in t.inner.fields]
        elif isinstance(t, pl.List) and t.inner == pl.String:
            string_lists.append(f.name)
        elif isinstance(t, pl.List):
            number_lists.append(f.name)

    def keys(names: list[str]) -> str:
        return '"(?:' + "|".join(sorted(set(names))) + ')"' + r"\s*:\s*"

    quoted = r'"(?:[^"\\]|\\.)*"'
    return "|".join(
        [
            keys(strings) + "[-0-9tf]",  # a number or a bool for a string
            keys(numbers) + "[tf]",  # a bool for a number
            keys(integers) + r"-?[0-9]*\.[0-9]*[1-9][0-9]*[\s,}]",  # a fraction for an integer (3.0 is one)
            keys(list(STRING_OR_INT)) + r"(?:[-tf]|[0-9]+[.eE])",  # engine: a string or a whole number >= 0
            keys(number_lists) + r'\[[^"{}]*?(?:true|false|\.[0-9]*[1-9][0-9]*[\s,\]])',  # a bool or a fraction in them
            keys(string_lists)
            + r"\[\s*(?:"
            + quoted
            + r"\s*,\s*)*[^\s\]"
            + '"'
            + "]",  # a bare item in a list of strings
        ]
    )


@cache
def _schema() -> dict[str, Any]:
    text = resources.files("preemptlog").joinpath("data/blocktable.schema.json").read_text("utf-8")
    out: dict[str, Any] = json.loads(text)
    return out


def _holds(
    expr: pl.Expr, spec: dict[str, Any], dtype: PolarsType, *, required: bool = False, least: Any = ...
) -> pl.Expr:
    """True where the value meets ``spec``: the JSON Schema keywords the schema file uses (enum, const,
    minimum, items, prefixItems, minItems, maxItems, an object's properties and required). A null is
    an absent value (the plugin writes null for what it does not know); ``required``: it must be there.
    ``least``: the smallest value of the column (of a list column's items) when known (_minima), so
    that a minimum every value meets costs nothing per row."""
    parts: list[pl.Expr] = []
    if "enum" in spec:
        parts.append(expr.is_in(spec["enum"]))
    if "const" in spec:
        parts.append(expr == spec["const"])
    if "minimum" in spec and dtype.is_numeric() and (least is ... or (least is not None and least < spec["minimum"])):
        parts.append(expr >= spec["minimum"])
    if isinstance(dtype, pl.List):
        n = expr.list.len()
        if "minItems" in spec:
            parts.append(n >= spec["minItems"])
        if "maxItems" in spec:
            parts.append(n <= spec["maxItems"])
        prefix = spec.get("prefixItems", [])
        for i, sub in enumerate(prefix):
            at = expr.list.get(i, null_on_oob=True)
            parts.append((n <= i) | _holds(at, sub, dtype.inner, required=True))
        if "items" in spec:
            if prefix:  # not used by the schema; items after the prefix would need a slice
                raise ValueError("blocktable schema: items with prefixItems")
            item = _holds(pl.element(), spec["items"], dtype.inner, required=True, least=least)
            parts.append(expr.list.eval(item).list.all())
    if isinstance(dtype, pl.Struct):
        fields = {f.name: f.dtype for f in dtype.fields}
        parts.extend(_object_holds(expr.struct.field, spec, fields))
    if not parts:
        return expr.is_not_null() if required else pl.lit(True)
    ok = pl.all_horizontal(parts)
    return (expr.is_not_null() & ok) if required else (expr.is_null() | ok)


def _object_holds(
    get: Callable[[str], pl.Expr],
    spec: dict[str, Any],
    fields: dict[str, PolarsType],
    least: dict[str, Any] | None = None,
) -> list[pl.Expr]:
    least = least or {}
    out = [get(r).is_not_null() for r in spec.get("required", []) if r in fields]
    for k, sub in spec.get("properties", {}).items():
        if k in fields:
            part = _holds(get(k), sub, fields[k], least=least.get(k, ...))
            if not part.meta.eq(pl.lit(True)):  # nothing to check (a type the decoder checked)
                out.append(part)
    return out


def _minima(df: pl.DataFrame) -> dict[str, Any]:
    """The smallest value of each number column and of each list of numbers' items (None: no value)."""
    exprs = []
    for k, t in df.schema.items():
        if t.is_numeric():
            exprs.append(pl.col(k).min())
        elif isinstance(t, pl.List) and t.inner.is_numeric():
            exprs.append(pl.col(k).list.min().min())
    return df.select(exprs).row(0, named=True) if exprs and df.height else {}


def _sniff(head: str) -> int:
    import re

    lines = [ln for ln in head.splitlines()[:200] if ln.strip()]
    if not lines:
        return 0
    rx = re.compile(r'^\s*\{.*"type"\s*:\s*"(?:step|table|event|request)"')
    keys = re.compile(r'"(?:num_free_blocks|block_ids|action|free_regions|free_block_ids|phase)"\s*:')
    hits = sum(1 for ln in lines if rx.match(ln) and keys.search(ln))
    if hits and hits * 2 >= min(len(lines), 50):
        return 85
    return 40 if hits else 0


def _python_rows(lines: list[tuple[int, str]]) -> tuple[list[dict[str, Any]], int]:
    """The slow path for a damaged file: json.loads per line, wrong types become bad lines."""
    fields = _record_dtype().to_schema()
    out, bad = [], 0
    for n, text in lines:
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: absurdly nested arrays
            bad += 1
            continue
        if not isinstance(obj, dict):
            bad += 1
            continue
        row: dict[str, Any] = {"n": n}
        ok = True
        for name, dtype in fields.items():
            v = obj.get(name)
            if v is None:
                row[name] = None
                continue
            try:
                row[name] = _coerce(v, dtype, name)
            except (TypeError, ValueError, OverflowError):
                ok = False
                break
        if ok:
            out.append(row)
        else:
            bad += 1
    return out, bad


def _coerce(v: Any, dtype: PolarsType, name: str = "") -> Any:
    """``v`` as ``dtype`` when its JSON type is the schema's, else TypeError (the columnar read's rules)."""
    if dtype == pl.String:
        if isinstance(v, str):
            return v
        if name in STRING_OR_INT and isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return str(v)
        raise TypeError
    if dtype == pl.Int64:
        if isinstance(v, float) and v.is_integer():  # JSON Schema: 3.0 is an integer
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or not -(2**63) <= v < 2**63:
            raise TypeError
        return v
    if dtype == pl.Float64:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError
        return float(v)
    if isinstance(dtype, pl.List):
        if not isinstance(v, list):
            raise TypeError
        return [_coerce(x, dtype.inner) for x in v]
    if isinstance(dtype, pl.Struct):
        if not isinstance(v, dict):
            raise TypeError
        return {f.name: (None if v.get(f.name) is None else _coerce(v[f.name], f.dtype)) for f in dtype.fields}
    raise TypeError


def read_file(path: str) -> tuple[pl.DataFrame, int]:
    """Decode one JSONL file: (rows with the record fields and ``n``, bad line count). The bad lines
    here are those whose JSON types are not the schema's; _valid_expr checks the rest."""

    dtype = _record_dtype()
    lf = scan_lines(path).filter(pl.col("line").str.strip_chars() != "")
    line = pl.col("line")
    try:
        df = (
            lf.select(
                "n",
                line.str.json_decode(dtype).alias("r"),
                line.str.count_matches(r"\.|true|false").alias("_marks"),
            )
            .collect()
            .unnest("r")
        )
    except pl.exceptions.PolarsError:
        lines = lf.select("n", "line").collect()
        rows, bad = _python_rows(list(lines.iter_rows()))
        schema = {"n": pl.UInt32, **dtype.to_schema()}
        df = pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
        return df, bad
    fields = {f.name: f.dtype for f in dtype.fields}
    texts = [k for k, t in fields.items() if t == pl.String]
    c = pl.col
    # the dots a line's own values explain: a fractional number (ts, arrival_time), the dots in the
    # strings that hold text; a dot anywhere else, or a true / false, sends the line to the regex
    dots = pl.sum_horizontal(
        *[(c(k) != c(k).floor()).cast(pl.UInt32) for k, t in fields.items() if t == pl.Float64],
        *[c(k).str.count_matches(".", literal=True) for k in PROSE],
    )
    # the text of a number or a bool in a string field (not in an enum's: the enum check rejects it)
    enums = {k for alt in _schema()["oneOf"] for k, sub in alt["properties"].items() if "enum" in sub}
    looks = [
        c(k).str.contains(NUMBER_TEXT) & (~c(k).str.contains(INT_TEXT) if k in STRING_OR_INT else True)
        for k in texts
        if k not in enums | {"type"}
    ]
    looks.append(c("block_hashes").list.eval(pl.element().str.contains(NUMBER_TEXT)).list.any())
    sus = df.filter(pl.any_horizontal(c("_marks") > dots, *looks).fill_null(False)).select("n")
    df = df.drop("_marks")
    if sus.height == 0:
        return df, 0
    hit = lf.join(sus.lazy(), on="n", how="semi").filter(line.str.contains(_wrong_json_re())).select("n").collect()
    return df.filter(~c("n").is_in(hit.get_column("n").implode())), hit.height


def cut_last_line(path: str) -> int | None:
    """The line number of the file's last line when the file ends in the middle of it: no line end
    after it, and its text is no JSON value (a record the writer was stopped in the middle of: a
    whole JSON object ends with its ``}``). None otherwise: a file that ends with a line end, or whose
    last line without one is whole JSON (a record that meets the schema or not: judged as every line).
    A line that does not parse in the middle of the file is a bad line, never cut."""
    if not ends_mid_line(path):
        return None
    last = scan_lines(path).filter(pl.col("n") == pl.col("n").max()).collect()
    if last.height == 0 or not (text := str(last.item(0, "line") or "")).strip():
        return None
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return int(last.item(0, "n"))
    return None


def _valid_expr(least: dict[str, Any] | None = None) -> pl.Expr:
    """The schema's constraints (preemptlog/data/blocktable.schema.json) over the decoded records: the
    type, the time (``anyOf``), the record of its type (``oneOf``), every declared property the reader
    decodes (enum, minimum, list items and shapes, ``shared``'s objects) and the required ones.
    ``least``: the columns' smallest values (_minima), to leave out the minimums every row meets."""
    sch = _schema()
    fields = dict(_record_dtype().to_schema())
    top = _object_holds(pl.col, sch, fields, least)
    any_of = pl.any_horizontal([pl.all_horizontal(_object_holds(pl.col, alt, fields)) for alt in sch["anyOf"]])
    one_of = pl.sum_horizontal(
        [
            pl.all_horizontal(_object_holds(pl.col, alt, fields, least)).fill_null(False).cast(pl.Int32)
            for alt in sch["oneOf"]
        ]
    )
    return pl.all_horizontal([*top, any_of, one_of == 1]).fill_null(False)


def _time_parts(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(iso=pl.col("time").str.extract_groups(ISO_RE)).unnest("iso")


def _exact_time() -> pl.Expr:
    """UTC time for rows whose time is exact (``ts``, or ISO with an offset); null otherwise."""
    naive = pl.concat_str([pl.col("d"), pl.lit(" "), pl.col("t")]).str.to_datetime(
        "%Y-%m-%d %H:%M:%S", time_unit="us", strict=False
    ) + pl.duration(
        microseconds=pl.col("f").str.slice(0, 6).str.pad_end(6, "0").cast(pl.Int64, strict=False).fill_null(0)
    )
    z = pl.col("z").str.to_uppercase()
    sign = pl.when(z.str.starts_with("-")).then(-1).otherwise(1)
    hh = z.str.slice(1, 2).cast(pl.Int64, strict=False)
    mm = z.str.replace(":", "", literal=True).str.slice(3, 2).cast(pl.Int64, strict=False)
    off = pl.when(z == "Z").then(0).otherwise(sign * (hh * 3600 + mm * 60))
    from_iso = (naive - pl.duration(seconds=off)).dt.replace_time_zone("UTC")
    from_ts = pl.from_epoch(
        (pl.col("ts") * 1e6).round().cast(pl.Int64, strict=False), time_unit="us"
    ).dt.replace_time_zone("UTC")
    return pl.when(pl.col("ts").is_not_null()).then(from_ts).when(pl.col("z").is_not_null()).then(from_iso)


def _naive_time() -> pl.Expr:
    return pl.concat_str([pl.col("d"), pl.lit(" "), pl.col("t")]).str.to_datetime(
        "%Y-%m-%d %H:%M:%S", time_unit="us", strict=False
    ) + pl.duration(
        microseconds=pl.col("f").str.slice(0, 6).str.pad_end(6, "0").cast(pl.Int64, strict=False).fill_null(0)
    )


def free_runs(df: pl.DataFrame) -> pl.DataFrame:
    """``largest_free_run`` and ``free_regions`` per step row (needs ``_r``, ``free_regions``, ``free_block_ids``)."""
    lens = pl.col("free_regions").list.eval(pl.element().list.get(1, null_on_oob=True))
    out = df.with_columns(
        _reg_max=lens.list.max(),
        _reg_n=pl.col("free_regions").list.len().cast(pl.Int64),
    )
    ids = (
        out.filter(pl.col("free_regions").is_null() & pl.col("free_block_ids").is_not_null())
        .select("_r", pl.col("free_block_ids").list.unique())
        .explode("free_block_ids")
        .drop_nulls("free_block_ids")
        .sort("_r", "free_block_ids")
    )
    if ids.height:
        runs = (
            ids.with_columns(
                _run=(pl.col("free_block_ids").diff().over("_r") != 1).fill_null(True).cast(pl.Int64).cum_sum()
            )
            .group_by("_r", "_run")
            .len()
            .group_by("_r")
            .agg(pl.col("len").max().cast(pl.Int64).alias("_ids_max"), pl.len().cast(pl.Int64).alias("_ids_n"))
        )
        out = out.join(runs, on="_r", how="left", maintain_order="left")
    else:
        out = out.with_columns(_ids_max=pl.lit(None, pl.Int64), _ids_n=pl.lit(None, pl.Int64))
    empty_ids = pl.col("free_block_ids").list.len() == 0
    return out.with_columns(
        largest_free_run=pl.coalesce(
            "_reg_max", "_ids_max", pl.when(empty_ids | (pl.col("free_regions").list.len() == 0)).then(pl.lit(0))
        ).cast(pl.Int64),
        free_regions_n=pl.coalesce("_reg_n", "_ids_n", pl.when(empty_ids).then(pl.lit(0))).cast(pl.Int64),
    ).drop("_reg_max", "_reg_n", "_ids_max", "_ids_n")


class BlockTableParsed(MeetsLog):
    MEETS_WHAT, MEETS_KIND = "block-table records", KIND
    MEETS_WHY = "their preemptions and pool states lie where the log has no line, and explain none of its own"

    def __init__(self, files: list[InputFile]) -> None:
        self.items: list[tuple[InputFile, pl.DataFrame, int, int]] = []
        self.cut: dict[int, int] = {}  # item -> the line of its last record, cut mid-write (skipped)
        for f in files:
            df, bad = read_file(str(f.path))
            total = df.height + bad
            if bad and (n := cut_last_line(str(f.path))) is not None:
                # not one of the bad lines: the file was cut while its last record was being written
                self.cut[len(self.items)] = n
                bad, total = bad - 1, total - 1
            good = df.filter(_valid_expr(_minima(df)))
            bad += df.height - good.height
            good = _time_parts(good).with_columns(_exact=_exact_time())
            # A time outside 1970-2200 is a bad line (year 0 or 30000 cannot reach Python datetimes).
            sane = pl.coalesce(pl.col("_exact").dt.year(), _naive_time().dt.year()).is_between(1970, 2200)
            # no time that reads (a 'time' that is no ISO 8601 and no 'ts') is no time: a bad line
            sane = sane.fill_null(False) & (pl.col("ts").is_null() | pl.col("ts").is_between(0, 7258118400))
            kept = good.filter(sane)
            bad += good.height - kept.height
            good = kept
            self.items.append((f, good, bad, total))
        self.repeats = self._drop_repeats()

    def _drop_repeats(self) -> dict[int, int]:
        """An identical record (every field equal) read twice in one file (a line written twice, a file
        appended to itself) is one record, as an identical V0 warning line is one event: the first is
        kept. Two files are never merged so: equal records of two files are two servers' (or two
        captures') until something says otherwise. Returns the number dropped per item."""
        keys = list(_record_dtype().to_schema())
        # candidates first (a hash of a few fields: equal records have equal hashes), then every field
        cheap = pl.lit(0, pl.UInt64)
        for seed, k in enumerate(("type", "step", "ts", "time", "request_id", "action", "phase")):
            cheap = cheap ^ pl.col(k).hash(seed)
        hashes = [df.select(cheap).to_series() for _, df, _, _ in self.items]
        every = pl.concat(hashes) if hashes else pl.Series(dtype=pl.UInt64)
        if every.n_unique() == every.len():
            return {}
        twice = every.is_duplicated()
        parts, start = [], 0
        for i, ((_, df, _, _), h) in enumerate(zip(self.items, hashes, strict=True)):
            mask = twice.slice(start, h.len())
            start += h.len()
            if mask.any():
                part = df.select(keys).with_row_index("_r").filter(mask)
                parts.append(part.with_columns(_i=pl.lit(i, pl.Int32)))
        again = pl.concat(parts).filter(~pl.struct([*keys, "_i"]).is_first_distinct())
        out: dict[int, int] = {}
        for i, (f, df, bad, total) in enumerate(self.items):
            drop = again.filter(pl.col("_i") == i).get_column("_r")
            if drop.len():
                df = df.with_row_index("_r").filter(~pl.col("_r").is_in(drop.implode())).drop("_r")
                self.items[i] = (f, df, bad, total)
                out[i] = drop.len()
        return out

    def anchors(self) -> list[tuple[datetime, str]]:
        out = []
        for f, df, _, _ in self.items:
            if df.height == 0:
                continue
            t = df.get_column("_exact").min()
            if t is None:
                naive = df.select(_naive_time().min()).item()
                if naive is None:
                    continue
                t = naive.replace(tzinfo=UTC)  # local read as UTC: enough to choose a year
            out.append((t, f"block-table records in {f.display}"))
        _ = pl
        return out  # type: ignore[return-value]  # polars scalars are typed as every literal

    def _resolve(self, ctx: TimeContext) -> SourceOutput:
        out = SourceOutput()
        self._meets_wall = set()
        steps, tables, events, requests, config = [], [], [], [], []
        counters = []
        for k, (f, df, bad, total) in enumerate(self.items):
            # Format 2 is written by preemptlog's vLLM plugin, from upstream vLLM's own scheduler;
            # other records come from an instrumented scheduler (the field guide's).
            plugin = bool(df.height and df.get_column("v").eq(2).any())
            counters.append({"file": f.display, "records": df.height, "bad_lines": bad, "format": 2 if plugin else 1})
            if self.repeats.get(k):
                out.notes.append(
                    f"{f.display}: {self.repeats[k]} block-table record(s) identical to an earlier one of the file "
                    "(every field equal: a line written twice) were read once"
                )
            if k in self.cut:
                out.warnings.append(
                    f"{f.display}:{self.cut[k]}: the last block-table record is cut (the file ends in the middle of "
                    "it, without a line end: the writer was stopped mid-write, or the file is still being written): "
                    f"skipped; the {df.height} record(s) before it were read"
                )
                out.partial = True
            if bad:
                out.warnings.append(
                    f"{f.display}: {bad} of {total} line(s) are not block-table records (bad JSON, wrong types, "
                    "missing type/step/time or required fields, values the schema excludes): skipped"
                )
                out.partial = True
            if df.height == 0:
                continue
            df = localize_in_order(df, _naive_time(), ctx.tz, "_local")
            df = df.with_columns(
                time=pl.coalesce("_exact", "_local"),
                time_precision=pl.when(pl.col("ts").is_not_null() | pl.col("f").is_not_null())
                .then(pl.lit("us"))
                .otherwise(pl.lit("1s")),
                engine=pl.col("engine").fill_null("0"),
                source=pl.lit(f.display),
                line=pl.col("n").cast(pl.UInt32),
            ).drop("_local")
            if df.filter(pl.col("_exact").is_null()).height:
                self._meets_wall = (self._meets_wall or set()) | {f.display}
                out.assumptions.append(
                    Assumption(
                        "zone", ctx.tz, "block-table 'time' without an offset is local time in --tz", scope=f.display
                    )
                )
            df = df.with_row_index("_r").rename(
                {"largest_free_run": "_rec_largest_free_run", "num_free_regions": "_rec_free_regions"}
            )
            st = free_runs(df.filter(pl.col("type") == "step"))
            # v2 records may state the largest run and the region count (free_regions then lists at
            # most 32 runs, so the stated numbers win over ones computed from the list).
            st = st.with_columns(
                largest_free_run=pl.coalesce("_rec_largest_free_run", "largest_free_run"),
                free_regions_n=pl.coalesce("_rec_free_regions", "free_regions_n"),
            )
            steps.append(
                st.select(
                    "time",
                    "time_precision",
                    "engine",
                    "step",
                    "block_size",
                    "num_total_blocks",
                    pl.col("num_free_blocks").alias("free_blocks"),
                    "largest_free_run",
                    pl.col("free_regions_n").alias("free_regions"),
                    "running",
                    "waiting",
                    "source",
                    "line",
                )
            )
            bs = st.filter(pl.col("block_size").is_not_null()).head(1)
            if bs.height:
                config.append(
                    bs.select(
                        pl.lit("block_size").alias("key"),
                        pl.col("block_size").cast(pl.String).alias("value"),
                        pl.lit("seen").alias("status"),
                        "time",
                        "source",
                        "line",
                        pl.lit("block-table step record").alias("note"),
                    )
                )
            # the version of the vLLM that wrote the records (its scheduler: the what-if): the longest
            # prefix of a version's shape (model.config.VERSION_SHAPE), none when nothing has it
            version = pl.col("vllm_version").str.extract(rf"^v?({VERSION_SHAPE})", 1)
            ver = df.filter(version.is_not_null()).head(1)
            if ver.height:
                config.append(
                    ver.select(
                        pl.lit("vllm_version").alias("key"),
                        version.alias("value"),
                        pl.lit("seen").alias("status"),
                        "time",
                        "source",
                        "line",
                        pl.lit("the records' header (preemptlog's vLLM plugin)").alias("note"),
                    )
                )
            tb = df.filter(pl.col("type") == "table")
            shared_hi = pl.col("shared").list.eval(
                pl.element().filter(pl.element().struct.field("ref_count") > 1).struct.field("block_id")
            )
            tables.append(
                tb.select(
                    "time",
                    "time_precision",
                    "engine",
                    "step",
                    "request_id",
                    pl.col("block_ids").list.len().cast(pl.Int64).alias("num_blocks"),
                    "num_tokens",
                    shared_hi.list.len().cast(pl.Int64).fill_null(0).alias("shared_blocks"),
                    pl.col("shared")
                    .list.eval(pl.element().struct.field("ref_count"))
                    .list.max()
                    .alias("max_ref_count"),
                    shared_hi.fill_null([]).alias("shared_block_ids"),
                    "block_ids",
                    "prefix_id",
                    "num_computed_tokens",
                    "priority",
                    "source",
                    "line",
                )
            )
            ev = df.filter(pl.col("type") == "event")
            events.append(
                ev.select(
                    "time",
                    "time_precision",
                    pl.lit(None, pl.Int32).alias("stream"),
                    pl.lit(None, pl.UInt32).alias("seq"),
                    "engine",
                    "step",
                    "request_id",
                    "action",
                    "blocks_before",
                    "blocks_after",
                    "blocks_needed",
                    "reason",
                    "pool_free_blocks",
                    "pool_largest_free_run",
                    "watermark_blocks",
                    "waiting",
                    "running",
                    "reserved_blocks",
                    "blocks_freed",
                    "trigger_request_id",
                    "policy",
                    "num_computed_tokens_lost",
                    "source",
                    "line",
                )
            )
            requests.append(df.filter(pl.col("type") == "request").select([pl.col(k) for k in BT_REQUESTS_SCHEMA]))
        if steps:
            out.frames["bt_steps"] = pl.concat(steps).sort("time", "engine", "step", maintain_order=True)
            out.frames["bt_tables"] = pl.concat(tables).sort("time", "engine", "step", maintain_order=True)
            out.frames["bt_events"] = pl.concat(events).sort("time", "engine", "step", maintain_order=True)
            out.frames["bt_requests"] = pl.concat(requests).sort("time", "engine", "step", maintain_order=True)
            out.order.update(
                {k: ("time", "engine", "step") for k in ("bt_steps", "bt_tables", "bt_events", "bt_requests")}
            )
        if config:
            out.config = pl.concat(config)
        out.counters["blocktable"] = counters
        return out


def _parse(files: list[InputFile]) -> BlockTableParsed:
    return BlockTableParsed(files)


register(
    SourceKind(
        name=KIND,
        description="block-table records, JSON Lines (preemptlog/data/blocktable.schema.json)",
        sniff=_sniff,
        parse=_parse,
        appends=True,
        # a last record cut mid-write is said at its file:line (cut_last_line): sniffing adds no warning
        judges_last_line=True,
    )
)

# Accepted shapes: (line, expected frame row or {"_bad": True}).
SAMPLES: list[tuple[str, dict[str, Any]]] = [
    (
        '{"type": "step", "time": "2026-11-30T05:10:38.100+00:00", "step": 1200, "block_size": 16, '
        '"num_total_blocks": 2048, "num_free_blocks": 128, "free_regions": [[17, 5], [40, 3]], "running": 31, "waiting": 17}',
        {"frame": "bt_steps", "free_blocks": 128, "largest_free_run": 5, "free_regions": 2, "block_size": 16},
    ),
    (
        '{"type": "step", "ts": 1796015438.1, "step": 7, "num_free_blocks": 6, "free_block_ids": [9, 3, 4, 5, 11, 10]}',
        {"frame": "bt_steps", "free_blocks": 6, "largest_free_run": 3, "free_regions": 2, "engine": "0"},
    ),
    (
        '{"type": "step", "time": "2026-11-30 05:10:38", "step": 8, "engine": 1, "num_free_blocks": 0, "free_block_ids": []}',
        {"frame": "bt_steps", "free_blocks": 0, "largest_free_run": 0, "free_regions": 0, "engine": "1"},
    ),
    (
        '{"type": "table", "time": "2026-11-30T05:10:38.100Z", "step": 1200, "request_id": "req-42", '
        '"block_ids": [3, 4, 9, 10, 11, 12, 30, 31], "num_tokens": 128, "shared": [{"block_id": 3, "ref_count": 2}, '
        '{"block_id": 4, "ref_count": 1}]}',
        {
            "frame": "bt_tables",
            "request_id": "req-42",
            "num_blocks": 8,
            "shared_blocks": 1,
            "shared_block_ids": [3],
            "max_ref_count": 2,
        },
    ),
    (
        '{"type": "event", "ts": 1796015438.2, "step": 1201, "request_id": "req-42", "action": "extend", '
        '"blocks_before": 8, "blocks_after": 12}',
        {"frame": "bt_events", "action": "extend", "blocks_before": 8, "blocks_after": 12},
    ),
    (
        '{"type": "event", "ts": 1796015438.3, "step": 1201, "request_id": "req-42", "action": "preempt", '
        '"blocks_before": 12, "blocks_after": 0, "reason": "no free blocks", "extra": {"x": [1]}}',
        {"frame": "bt_events", "action": "preempt", "reason": "no free blocks"},
    ),
    # v2, as the vLLM plugin writes them (preemptlog/capture): stated run and region counts win
    # (free_regions lists at most 32 runs); lifecycle records go to bt_requests.
    (
        '{"type":"step","ts":1796117811.1,"step":32,"engine":"0","at":"preempt","block_size":16,"num_free_blocks":40,'
        '"num_total_blocks":64,"largest_free_run":9,"num_free_regions":33,"running":7,"waiting":9,"v":2}',
        {"frame": "bt_steps", "free_blocks": 40, "largest_free_run": 9, "free_regions": 33, "running": 7},
    ),
    (
        '{"type":"table","ts":1796117811.1,"step":32,"engine":"0","request_id":"req-6","block_ids":[49,50,51],'
        '"num_tokens":40,"num_computed_tokens":39,"shared":[{"block_id":49,"ref_count":3}],"priority":2,"v":2}',
        {"frame": "bt_tables", "num_blocks": 3, "num_computed_tokens": 39, "priority": 2, "shared_blocks": 1},
    ),
    (
        '{"type":"event","ts":1796117811.1,"step":32,"engine":"0","request_id":"req-6","action":"preempt",'
        '"blocks_before":8,"blocks_after":0,"pool_free_blocks":0,"running":7,"waiting":9,"policy":"fcfs",'
        '"num_computed_tokens_lost":127,"blocks_freed":8,"blocks_needed":1,"watermark_blocks":0,"reserved_blocks":0,'
        '"trigger_request_id":"req-2","reason":"allocation failed: req-2 needed 1 block(s), 0 free","v":2}',
        {
            "frame": "bt_events",
            "action": "preempt",
            "blocks_needed": 1,
            "pool_free_blocks": 0,
            "running": 7,
            "trigger_request_id": "req-2",
            "policy": "fcfs",
            "blocks_freed": 8,
            "num_computed_tokens_lost": 127,
        },
    ),
    (
        '{"type":"request","ts":1796117811.09,"step":0,"engine":"0","request_id":"req-0","phase":"arrival",'
        '"prompt_tokens":100,"max_tokens":60,"priority":0,"arrival_time":1796117811.08,"v":2}',
        {"frame": "bt_requests", "phase": "arrival", "prompt_tokens": 100, "max_tokens": 60},
    ),
    (
        '{"type":"request","ts":1796117811.3,"step":41,"engine":"0","request_id":"req-6","phase":"resume",'
        '"num_computed_tokens":96,"v":2}',
        {"frame": "bt_requests", "phase": "resume", "num_computed_tokens": 96},
    ),
    (
        '{"type":"request","time":"2026-12-01T09:36:51.5Z","step":90,"request_id":"req-0","phase":"finish",'
        '"output_tokens":60,"finish_reason":"length","num_preemptions":2}',
        {
            "frame": "bt_requests",
            "phase": "finish",
            "output_tokens": 60,
            "finish_reason": "length",
            "num_preemptions": 2,
            "engine": "0",
        },
    ),
    ('{"type": "request", "ts": 1.0, "step": 1, "request_id": "r", "phase": "teleported"}', {"_bad": True}),
    ('{"type": "step", "step": 1, "num_free_blocks": 3}', {"_bad": True}),  # no time
    ('{"type": "event", "ts": 1.0, "step": 1, "request_id": "r", "action": "explode"}', {"_bad": True}),
    ('{"type": "step", "ts": 1.0, "step": "one", "num_free_blocks": 3}', {"_bad": True}),
    ("{not json", {"_bad": True}),
]

register_samples(KIND, SAMPLES)
