"""The fleet run on Apache Spark (local[2]) writes the same rows as the process pool.

Slow (a JVM starts: ~10 s on two cores). In CI (CI=true) a Spark that cannot start fails the
test instead of skipping it: .ci/run installs a Java runtime when `java` is absent, and the dev
extra installs pyspark[sql].
"""

from __future__ import annotations

import os
import shutil

import pytest

from preemptlog.analysis import AnalyzeOptions
from preemptlog.fleet import schema

from ..support.fleet_shapes import make_fleet
from .test_fleet import cli, rows

pytestmark = pytest.mark.slow


def same(df):
    """Rows to compare: an archive's members are extracted anew by each run, and the year
    assumption names the extracted file's mtime, so the assumptions text is not compared."""
    return df.drop("assumptions", strict=False)


def _no_spark(why: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"Spark cannot start in CI: {why}")
    pytest.skip(f"Spark cannot start here: {why}")


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark")
    return root, make_fleet(root / "bundles")


def test_spark_writes_the_same_rows_as_the_process_pool(shapes):
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        _no_spark(f"pyspark is not installed ({exc})")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        _no_spark("no Java runtime (java on PATH or JAVA_HOME)")
    root, found = shapes
    paths = [str(p) for p in found.values()]
    pool, spark_out = root / "pool", root / "spark"
    assert cli("fleet", "run", *paths, "--out", str(pool), "--tz", "UTC", "-j", "2").returncode == 5
    r = cli("fleet", "run", *paths, "--out", str(spark_out), "--tz", "UTC", "--engine", "spark", "--master", "local[2]")
    if r.returncode not in (0, 5) and "Spark did not start" in r.stderr:
        _no_spark(r.stderr.strip().splitlines()[-1])
    assert r.returncode == 5, r.stderr[-3000:]
    assert "11 bundle(s) analysed on Spark (local[2]), 2 failed or damaged" in r.stderr
    for t in schema.TABLES:
        a, b = same(rows(pool, t)), same(rows(spark_out, t))
        assert a.height and a.equals(b), t
    import pyarrow.parquet as pq

    for f in spark_out.rglob("*.parquet"):  # Spark's writer kept the layout's rules
        s = pq.read_schema(f)
        assert "day" not in s.names and f.parent.name.startswith("day=")
        for field in s:
            if str(field.type).startswith("timestamp"):
                assert str(field.type) == "timestamp[us, tz=UTC]", (f, field)

    # The library call on a session of ours: a forced re-run of two bundles replaces their rows and
    # keeps every other bundle's rows of the same days (dynamic partition overwrite, unioned).
    from preemptlog.fleet import spark as fleet_spark

    try:
        with fleet_spark.session("local[2]") as spark:
            stats = fleet_spark.run(
                spark, [paths[0], paths[4]], str(spark_out), options=AnalyzeOptions(tz="UTC"), skip=frozenset()
            )
    except Exception as exc:  # pragma: no cover - reported, not hidden
        _no_spark(str(exc).splitlines()[0])
    assert stats["analysed"] == 2 and stats["skipped"] == 0
    for t in schema.TABLES:
        assert same(rows(pool, t)).equals(same(rows(spark_out, t))), t
