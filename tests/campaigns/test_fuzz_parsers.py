"""Property tests for every parser (issue 7), bounded for CI; bench/fuzz runs the long campaign.

Seeds: each source module's ``SAMPLES``, the fixtures and (when present) the real-log corpus.
Properties: no exception on random and mutated input; the declared schemas hold; noise lines
interleaved change nothing but line numbers; rotated parts of a log read as the whole log; the
command line maps any input to a documented exit code with one line per error.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import random
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preemptlog import AnalyzeOptions, analyze
from preemptlog.engines.vllm import hooks
from preemptlog.errors import ExitCode, PreemptlogError
from preemptlog.pipeline.bundle import InputFile
from preemptlog.sources import TimeContext, blocktable, dmon, kvevents, prometheus, vllm_log

from ..conftest import FIXTURES, ROOT, corpus_dir

FAST = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
FEW = settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def _load_fuzz():
    loader = importlib.machinery.SourceFileLoader("preemptlog_bench_fuzz", str(ROOT / "bench" / "fuzz"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


FUZZ = _load_fuzz()
SEEDS = FUZZ.seeds()
MARKERS = [m for m, _ in vllm_log.all_markers()]


@st.composite
def mutated(draw, pool: list[bytes]) -> bytes:
    """A seed with a few hypothesis-chosen edits (insertions of interesting bytes, numbers, times,
    deletions, repeats, truncation) or plain random bytes."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=200))
    s = draw(st.sampled_from(pool))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.integers(0, 5))
        i = draw(st.integers(0, len(s)))
        if op == 0:
            s = s[:i] + draw(st.sampled_from(FUZZ.INTERESTING_BYTES)) + s[i:]
        elif op == 1:
            s = s[:i] + draw(st.sampled_from(FUZZ.INTERESTING_NUMBERS + FUZZ.INTERESTING_TIMES)) + s[i:]
        elif op == 2:
            s = s[:i] + s[i + draw(st.integers(1, 40)) :]
        elif op == 3:
            s = s[:i] + s[i : i + draw(st.integers(1, 16))] * draw(st.integers(2, 300)) + s[i:]
        elif op == 4:
            s = s[:i]
        else:
            s = s[:i] + draw(st.binary(min_size=1, max_size=12)) + s[i:]
    return s


noise = (
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz .,-", min_size=0, max_size=60)
    .map(lambda t: "zz " + t)
    .filter(lambda t: not any(m in t for m in MARKERS))
)


def _file(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _input(p: Path, kind: str) -> InputFile:
    return InputFile(0, p, p.name, kind, None, p.stat().st_size, p.stat().st_mtime, None, stream=0)


def _ctx() -> TimeContext:
    ref = (datetime(2026, 11, 30, 5, 0, tzinfo=UTC), datetime(2026, 11, 30, 6, 0, tzinfo=UTC))
    return TimeContext(tz="UTC", anchors=[(ref[0], "test")], reference=ref)


def _analyze(paths, **kw):
    try:
        return analyze([str(p) for p in paths], AnalyzeOptions(tz="UTC", **kw))
    except PreemptlogError:
        return None


def _interleave(lines: list[str], noise_lines: list[str], positions: list[int]) -> tuple[list[str], dict[int, int]]:
    """lines with noise inserted before the given positions; map new line number -> old."""
    out: list[str] = []
    mapping: dict[int, int] = {}
    extra = sorted(zip(positions, noise_lines))
    k = 0
    for i, ln in enumerate(lines):
        while k < len(extra) and extra[k][0] <= i:
            out.append(extra[k][1])
            k += 1
        out.append(ln)
        mapping[len(out)] = i + 1
    out.extend(t for _, t in extra[k:])
    return out, mapping


# ---------------------------------------------------------------- vLLM log (and its record families)


@FAST
@given(st.lists(mutated(SEEDS["vllm-log"]), min_size=1, max_size=30))
def test_vllm_log_survives_mutations(tmp_path_factory, lines):
    p = _file(tmp_path_factory.mktemp("v"), "vllm.log", b"\n".join(lines) + b"\n")
    rec = vllm_log.read(str(p), 0)
    assert {k: str(v) for k, v in rec.schema.items()} == vllm_log.RECORD_SCHEMA
    assert rec.get_column("n").max() is None or rec.get_column("n").max() <= len(b"\n".join(lines).split(b"\n"))
    a = _analyze([p], kinds=[f"{p}=vllm-log"])  # timebase, events, hooks, reconcile, joiner, rules
    if a is not None:
        assert a.events.get_column("event_id").n_unique() == a.events.height


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    st.lists(
        st.sampled_from([s for s, e in vllm_log.SAMPLES + hooks.SAMPLES if not e.get("_dropped")]),
        min_size=1,
        max_size=12,
    ),
    st.lists(noise, min_size=1, max_size=12),
    st.data(),
)
def test_vllm_noise_lines_change_nothing(tmp_path_factory, good, noise_lines, data):
    positions = [data.draw(st.integers(0, len(good))) for _ in noise_lines]
    d = tmp_path_factory.mktemp("n")
    clean = vllm_log.read(str(_file(d, "a.log", ("\n".join(good) + "\n").encode())), 0)
    mixed, mapping = _interleave(good, noise_lines, positions)
    noisy = vllm_log.read(str(_file(d, "b.log", ("\n".join(mixed) + "\n").encode())), 0)
    noisy = noisy.with_columns(pl.col("n").replace_strict(mapping, return_dtype=pl.UInt32))
    assert clean.equals(noisy)
    # and at the level of events and hook frames
    a = _analyze([d / "a.log"], year=2026, rules=False)
    b = _analyze([d / "b.log"], year=2026, rules=False)
    cols = ["time", "kind", "request_id", "mode", "cumulative"]
    assert a.events.select(cols).equals(b.events.select(cols))
    for name in ("hook_steps", "hook_pending", "hook_batch", "bt_text"):
        if name in a.frames:
            keep = [c for c in a.frames[name].columns if c not in ("line", "seq", "source")]
            assert a.frames[name].select(keep).equals(b.frames[name].select(keep)), name


ROTATABLE = [
    FIXTURES / "golden" / "v0-unbracketed-0.6.log",
    FIXTURES / "golden" / "v1-patched-0.14.log",
    FIXTURES / "golden" / "docker-compose-rfc3339.log",
]


@FEW
@given(st.sampled_from(ROTATABLE), st.lists(st.floats(0.05, 0.95), min_size=1, max_size=3, unique=True), st.booleans())
def test_rotated_parts_read_as_the_whole(tmp_path_factory, src, cuts, compress):
    """vllm.log.N ... vllm.log.1, vllm.log (some gzipped) give the events of the unrotated log."""
    import gzip

    lines = src.read_bytes().splitlines(keepends=True)
    idx = sorted({max(1, min(len(lines) - 1, int(c * len(lines)))) for c in cuts})
    parts = [lines[a:b] for a, b in zip([0] + idx, idx + [len(lines)])]
    d = tmp_path_factory.mktemp("rot")
    for k, part in enumerate(parts):
        n = len(parts) - 1 - k
        name = "vllm.log" if n == 0 else f"vllm.log.{n}"
        data = b"".join(part)
        if compress and n % 2 == 1:
            (d / (name + ".gz")).write_bytes(gzip.compress(data))
        else:
            (d / name).write_bytes(data)
    whole = _analyze([src], year=2025, rules=False)
    rot = _analyze([d], year=2025, rules=False)
    cols = ["time", "time_precision", "kind", "request_id", "mode", "engine", "cumulative"]
    assert rot.events.select(cols).equals(whole.events.select(cols))
    assert rot.stats.select("time", "running", "waiting", "kv_usage").equals(
        whole.stats.select("time", "running", "waiting", "kv_usage")
    )


# ---------------------------------------------------------------- JSON lines sources


@FAST
@given(st.lists(mutated(SEEDS["blocktable"]), min_size=1, max_size=30))
def test_blocktable_survives_mutations(tmp_path_factory, lines):
    p = _file(tmp_path_factory.mktemp("bt"), "bt.jsonl", b"\n".join(lines) + b"\n")
    df, bad = blocktable.read_file(str(p))
    parsed = blocktable.BlockTableParsed([_input(p, "blocktable")])
    parsed.anchors()
    out = parsed.resolve(_ctx())
    for name, schema in (("bt_steps", blocktable.BT_STEPS_SCHEMA), ("bt_events", blocktable.BT_EVENTS_SCHEMA)):
        if name in out.frames:
            assert {k: str(v) for k, v in out.frames[name].schema.items()} == schema


@FAST
@given(st.lists(mutated(SEEDS["kvevents"]), min_size=1, max_size=30))
def test_kvevents_survives_mutations(tmp_path_factory, lines):
    p = _file(tmp_path_factory.mktemp("kv"), "kv.jsonl", b"\n".join(lines) + b"\n")
    kvevents.read_file(str(p))
    parsed = kvevents.KvEventsParsed([_input(p, "kvevents")])
    parsed.anchors()
    out = parsed.resolve(_ctx())
    if "kv_events" in out.frames:
        assert {k: str(v) for k, v in out.frames["kv_events"].schema.items()} == kvevents.KV_EVENTS_SCHEMA


@FAST
@given(st.sampled_from(["blocktable", "kvevents"]), st.lists(noise, min_size=1, max_size=10), st.data())
def test_jsonl_noise_lines_are_counted_not_read(tmp_path_factory, kind, noise_lines, data):
    mod = blocktable if kind == "blocktable" else kvevents
    good = [s for s, e in mod.SAMPLES if not e.get("_bad")]
    positions = [data.draw(st.integers(0, len(good))) for _ in noise_lines]
    d = tmp_path_factory.mktemp("jn")
    clean = mod.read_file(str(_file(d, "a.jsonl", ("\n".join(good) + "\n").encode())))
    mixed, _ = _interleave(good, noise_lines, positions)
    noisy = mod.read_file(str(_file(d, "b.jsonl", ("\n".join(mixed) + "\n").encode())))
    assert clean[0].drop("n").equals(noisy[0].drop("n"))
    bad = (lambda r: r[1]) if kind == "blocktable" else (lambda r: r[1]["bad_lines"])
    assert bad(noisy) == bad(clean) + len(noise_lines)


# ---------------------------------------------------------------- dmon, Prometheus


@FAST
@given(st.lists(st.sampled_from(SEEDS["dmon"]), min_size=1, max_size=3), st.data())
def test_dmon_survives_mutations(tmp_path_factory, docs, data):
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    body = b"".join(FUZZ.mutate_doc(rng, d, SEEDS["dmon"]) for d in docs)
    p = _file(tmp_path_factory.mktemp("dm"), "dmon.txt", body)
    dmon.read_file(str(p), "dmon.txt")
    parsed = dmon.DmonParsed([_input(p, "dmon")])
    parsed.anchors()
    out = parsed.resolve(_ctx())
    if "dmon" in out.frames:
        sch = {k: str(v) for k, v in out.frames["dmon"].schema.items()}
        assert sch["gpu"] == "Int32" and sch["line"] == "UInt32"


@FAST
@given(st.sampled_from([s for s, _ in dmon.SAMPLES]), st.lists(noise, min_size=1, max_size=6), st.data())
def test_dmon_noise_lines_change_no_sample(tmp_path_factory, text, noise_lines, data):
    lines = text.splitlines()
    positions = [data.draw(st.integers(1, len(lines))) for _ in noise_lines]  # after the first header
    d = tmp_path_factory.mktemp("dn")
    mixed, _ = _interleave(lines, noise_lines, positions)
    frames = []
    for name, body in (("a.txt", text), ("b.txt", "\n".join(mixed) + "\n")):
        out = dmon.DmonParsed([_input(_file(d, name, body.encode()), "dmon")]).resolve(_ctx())
        frames.append(out.frames["dmon"].drop("line", "source"))
    assert frames[0].equals(frames[1])


@FAST
@given(st.lists(st.sampled_from(SEEDS["prometheus"]), min_size=1, max_size=3), st.data())
def test_prometheus_survives_mutations(tmp_path_factory, docs, data):
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    body = b"".join(FUZZ.mutate_doc(rng, d, SEEDS["prometheus"]) for d in docs)
    p = _file(tmp_path_factory.mktemp("pr"), f"metrics-{rng.randint(1_700_000_000, 1_800_000_000)}.prom", body)
    parsed = prometheus.parse([_input(p, "prometheus")])
    parsed.anchors()
    out = parsed.resolve(_ctx())
    for name in ("prom_samples", "prom_series", "prom_preemptions"):
        if name in out.frames and out.frames[name].height:
            assert "time" in out.frames[name].columns or name == "prom_preemptions"


@FAST
@given(st.lists(noise, min_size=1, max_size=6), st.data())
def test_prometheus_noise_lines_change_no_sample(tmp_path_factory, noise_lines, data):
    src = (FIXTURES / "prometheus" / "concat-two-engines-reset.prom").read_text().splitlines()
    positions = [data.draw(st.integers(0, len(src))) for _ in noise_lines]
    d = tmp_path_factory.mktemp("pn")
    a = prometheus.parse([_input(_file(d, "a.prom", ("\n".join(src) + "\n").encode()), "prometheus")])
    mixed, _ = _interleave(src, noise_lines, positions)
    b = prometheus.parse([_input(_file(d, "b.prom", ("\n".join(mixed) + "\n").encode()), "prometheus")])
    keep = ["scrape", "name", "labels", "value", "ts_us"]
    assert a.files[0].samples.select(keep).equals(b.files[0].samples.select(keep))


# ---------------------------------------------------------------- sniffing, names, corpus


@FAST
@given(st.binary(max_size=3000) | mutated(SEEDS["sniff"]))
def test_sniffing_and_names_never_raise(head):
    FUZZ.run_sniff([head], None, random.Random(0))
    FUZZ.run_names([head[:300]], None, random.Random(0))


def test_corpus_lines_mutated(tmp_path):
    c = corpus_dir()
    if c is None:
        pytest.skip("real-log corpus not found (../shared/corpus; set PREEMPTLOG_CORPUS)")
    rng = random.Random(7)
    pool = [ln for p in sorted(c.glob("vllm-*.log")) for ln in p.read_bytes().splitlines()]
    docs = [p.read_bytes() for p in sorted(c.glob("dmon-*.txt"))]
    assert pool and docs
    for k in range(3):
        FUZZ.run_vllm([FUZZ.mutate(rng, rng.choice(pool), pool) for _ in range(200)], tmp_path, rng)
        FUZZ.run_dmon([FUZZ.mutate_doc(rng, rng.choice(docs), docs) for _ in range(10)], tmp_path, rng)


def test_bench_fuzz_short_campaign(tmp_path):
    """Every bench/fuzz target, a few hundred inputs, in process: no crash, and the counts add up."""
    import argparse

    args = argparse.Namespace(
        seed=12345, target=None, seconds=None, inputs=900, batch=None, timeout=60.0, crashes=str(tmp_path / "crashes")
    )
    res = FUZZ.worker(args)
    assert res["tried"] == 900
    assert res["crashes"] == [], res["crashes"]


# ---------------------------------------------------------------- the command line


@st.composite
def hostile_bundle(draw):
    rng = random.Random(draw(st.integers(0, 2**32)))
    return FUZZ.make_bundle(rng, SEEDS)


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(hostile_bundle(), st.sampled_from(["folder", ".tar.gz", ".zip", "random"]))
def test_cli_fuzz_documented_exit_codes_and_one_line_errors(tmp_path_factory, blob, how):
    d = tmp_path_factory.mktemp("cli")
    rng = random.Random(len(blob))
    if how == "random":
        target = d / "junk.log"
        target.write_bytes(os.urandom(rng.randint(0, 5000)))
    elif how == "folder":
        target = d / "bundle"
        target.mkdir()
        FUZZ.run_bundle  # noqa: B018 - the same unpacking as the campaign
        import io
        import tarfile

        with tarfile.open(fileobj=io.BytesIO(blob)) as tf:
            for m in tf:
                dest = target / m.name
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(tf.extractfile(m).read())
    else:
        target = d / f"bundle{how}"
        FUZZ._repack(blob, target, how, rng)
    p = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(target), "--tz", "UTC", "-q", "-f", "ndjson"],
        capture_output=True,
        timeout=120,
        env=dict(os.environ),
    )
    err = p.stderr.decode("utf-8", "replace")
    assert p.returncode in {ExitCode.OK, ExitCode.INPUT, ExitCode.PARTIAL, ExitCode.FAIL_ON}, (p.returncode, err)
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) <= 1 and all(ln.startswith("preemptlog: ") for ln in lines), lines
