"""The fleet run on Apache Spark (``pip install 'preemptlog[spark]'``): the same dataset as the
process pool, the per-bundle analysis distributed with ``mapInArrow``.

``run(spark, paths, out)``:

1. the bundle paths become a DataFrame, one partition per bundle; ``mapInArrow`` runs
   work.analyse_bundle on the executors (Arrow record batches in and out, no pandas in the data
   path) and yields, per table and day, the rows as one Arrow IPC payload (the analysis runs
   once; the result is persisted);
2. each table is decoded from its payloads (a second ``mapInArrow``, into the table's declared
   schema: schema.spark_ddl), unioned with the rows already in the dataset on the same days
   (other bundles'), and written with ``partitionBy("day")`` in dynamic partition-overwrite mode:
   only the days this run touches are replaced, and a re-run replaces a bundle's rows instead
   of adding copies; ``bundles`` is written last, so a bundle counts as done once it is there.

Bundles are read where the executors see them (local paths, or a filesystem every executor
mounts). The executors' Python must have preemptlog installed: :func:`session` sets
``spark.pyspark.python`` to this interpreter for local masters; on a cluster set
``PYSPARK_PYTHON`` (and ``PYSPARK_DRIVER_PYTHON``) to the venv's python, e.g.
``PYSPARK_PYTHON=/opt/venv/bin/python``. Settings the dataset needs (set by :func:`session`,
and by :func:`run` on a session of yours for the run's duration):
``spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS`` (else INT96, read back as
nanoseconds), ``spark.sql.sources.partitionOverwriteMode=dynamic`` (else an overwrite replaces
every day), ``spark.sql.session.timeZone=UTC``.

Spark's own writer names its files ``part-<n>-<uuid>.c000.zstd.parquet`` (one file per day
and table) and writes no key-value metadata of ours: the schema version is in the
``schema_version`` column of ``bundles`` and in ``_preemptlog.json``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import UsageError
from ..model.result import AnalyzeOptions
from . import dataset, schema
from .dataset import arrow_schema, to_arrow
from .work import analyse_bundle

if TYPE_CHECKING:
    from ..model.result import AnalyzeOptions

ENVELOPE = "table string, bundle_id string, day date, outcome string, exit_code int, path string, message string, payload binary"
SETTINGS = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.compression.codec": "zstd",
}


def _pyspark() -> Any:
    try:
        import pyspark
    except ImportError:
        raise UsageError(
            "--engine spark needs pyspark",
            hint="pip install 'preemptlog[spark]' (pyspark with its sql extra) and a Java 17+ runtime",
        ) from None
    return pyspark


@contextlib.contextmanager
def session(master: str = "local[2]", *, app_name: str = "preemptlog-fleet") -> Iterator[Any]:
    """A SparkSession with the dataset's settings; stopped on exit."""
    _pyspark()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in SETTINGS.items():
        builder = builder.config(k, v)
    builder = builder.config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    if master.startswith("local") and not os.environ.get("PYSPARK_PYTHON"):
        builder = builder.config("spark.pyspark.python", sys.executable)  # the workers run this venv's python
    try:
        spark = builder.getOrCreate()
    except Exception as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(
            f"Spark did not start ({master}): {detail}", hint="a Java 17+ runtime (java on PATH or JAVA_HOME)"
        ) from None
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()


@contextlib.contextmanager
def _settings(spark: Any) -> Iterator[None]:
    old = {k: spark.conf.get(k, None) for k in SETTINGS}
    for k, v in SETTINGS.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def _envelope_schema() -> Any:
    return pa.schema(
        [
            ("table", pa.string()),
            ("bundle_id", pa.string()),
            ("day", pa.date32()),
            ("outcome", pa.string()),
            ("exit_code", pa.int32()),
            ("path", pa.string()),
            ("message", pa.string()),
            ("payload", pa.binary()),
        ]
    )


def analyse_batches(batches: Iterator[Any], options: AnalyzeOptions, skip: frozenset[str]) -> Iterator[Any]:
    """mapInArrow's function on the executors: bundle paths in, one envelope row per table and
    day out (the rows as an Arrow IPC stream in ``payload``), and one ``_bundle`` row per bundle."""

    env = _envelope_schema()
    for batch in batches:
        for path in batch.column("bundle").to_pylist():
            r = analyse_bundle(path, options, skip)
            rows: list[dict[str, Any]] = [
                {
                    "table": "_bundle",
                    "bundle_id": r.bundle_id,
                    "day": None,
                    "outcome": r.outcome,
                    "exit_code": r.exit_code,
                    "path": path,
                    "message": r.message,
                    "payload": None,
                }
            ]
            for table, df in r.tables.items():
                if not df.height:
                    continue
                for (day,), part in df.partition_by(schema.PARTITION, as_dict=True, maintain_order=True).items():
                    sink = pa.BufferOutputStream()
                    data = to_arrow(table, part)
                    with pa.ipc.new_stream(sink, data.schema) as w:
                        w.write_table(data)
                    rows.append(
                        {
                            "table": table,
                            "bundle_id": r.bundle_id,
                            "day": day,
                            "outcome": r.outcome,
                            "exit_code": r.exit_code,
                            "path": path,
                            "message": None,
                            "payload": sink.getvalue().to_pybytes(),
                        }
                    )
            yield pa.RecordBatch.from_pylist(rows, schema=env)


def _target_schema(table: str) -> Any:

    s = arrow_schema(table).remove_metadata()
    return s.append(pa.field(schema.PARTITION, pa.date32()))


def decode_batches(batches: Iterator[Any], table: str) -> Iterator[Any]:
    """mapInArrow's function of the write: the payloads of one table back into its rows."""
    target = _target_schema(table)
    for batch in batches:
        days = batch.column("day").to_pylist()
        for day, payload in zip(days, batch.column("payload").to_pylist(), strict=True):
            data = pa.ipc.open_stream(payload).read_all()
            data = data.append_column(schema.PARTITION, pa.array([day] * data.num_rows, pa.date32()))
            yield from data.cast(target).to_batches()


def _exists(spark: Any, path: str) -> bool:
    if "://" not in path:
        return os.path.isdir(path)
    jvm = spark._jvm
    p = jvm.org.apache.hadoop.fs.Path(path)
    return bool(p.getFileSystem(spark._jsc.hadoopConfiguration()).exists(p))


def _known(spark: Any, out: str) -> frozenset[str]:
    base = f"{out.rstrip('/')}/bundles"
    if not _exists(spark, base):
        return frozenset()
    df = spark.read.schema(schema.spark_ddl("bundles")).parquet(base)
    return frozenset(r[0] for r in df.select("bundle_id").distinct().collect())


def run(
    spark: Any,
    paths: list[str],
    out: str,
    *,
    options: AnalyzeOptions | None = None,
    skip: frozenset[str] | None = None,
) -> dict[str, Any]:
    """Analyse ``paths`` on Spark and write the fleet dataset into ``out`` (see the module
    docstring). ``skip``: bundle ids not to analyse again (default: those already in ``out``).
    Returns counts: analysed, skipped, failed, rows per table, seconds."""
    _pyspark()
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    started = time.monotonic()
    options = options or AnalyzeOptions()
    if "://" not in out:
        dataset.check_dataset(out)
        dataset.write_marker(out)
    with _settings(spark):
        known = _known(spark, out) if skip is None else skip
        if not paths:
            return {"analysed": 0, "skipped": 0, "failed": 0, "rows": {}, "seconds": 0.0}
        n = min(len(paths), 10_000)
        src = spark.createDataFrame([(p,) for p in paths], "bundle string").repartition(n)
        opts, sk = options, frozenset(known)
        env = src.mapInArrow(lambda it: analyse_batches(it, opts, sk), ENVELOPE).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            meta = env.select("table", "bundle_id", "day", "outcome").collect()  # runs the analysis
            bundles = {r["bundle_id"]: r["outcome"] for r in meta if r["table"] == "_bundle"}
            analysed = sorted(b for b, o in bundles.items() if o != "skipped")
            rows: dict[str, int] = {}
            # the analysis ran one bundle per task; the decode and the writes need no more tasks than cores
            cached = env.coalesce(max(1, spark.sparkContext.defaultParallelism))
            for table in schema.TABLES:  # bundles last
                touched = sorted({r["day"] for r in meta if r["table"] == table})
                base = f"{out.rstrip('/')}/{table}"
                ddl = schema.spark_ddl(table)
                new = (
                    cached.filter(F.col("table") == table)
                    .select("day", "payload")
                    .mapInArrow(lambda it, t=table: decode_batches(it, t), ddl)
                )
                rows[table] = sum(1 for r in meta if r["table"] == table)
                union = new
                if _exists(spark, base) and analysed:
                    old = spark.read.schema(ddl).parquet(base)
                    again = old.filter(F.col("bundle_id").isin(analysed)).select("day").distinct().collect()
                    touched = sorted(set(touched) | {r["day"] for r in again})
                    if touched:
                        keep = old.filter(F.col(schema.PARTITION).isin(touched) & ~F.col("bundle_id").isin(analysed))
                        union = new.unionByName(keep)
                if not touched:
                    continue
                (
                    union.repartition(len(touched), schema.PARTITION)  # one file per day: parts coalesced per day
                    .write.mode("overwrite")
                    .partitionBy(schema.PARTITION)
                    .parquet(base)
                )
        finally:
            env.unpersist()
    failed = sum(1 for o in bundles.values() if o in ("error", "partial"))
    return {
        "analysed": len(analysed),
        "skipped": sum(1 for o in bundles.values() if o == "skipped"),
        "failed": failed,
        "rows": rows,
        "seconds": time.monotonic() - started,
    }
