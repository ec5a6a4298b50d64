"""One incident, several evidence paths: the answer must not depend on the path.

Hand-written incidents in the shapes an on-call engineer brings (a vLLM V1 0.10.2 log as vLLM
writes it to a file, colour codes included; a V0 0.6.3 log with its sampled preemption warnings; a
0.11.1 log of a build that prints ``Preemptions: N``; ``/metrics`` scrapes), each presented along
paths that carry the same evidence: a folder, a .tar.gz, a .zip, files renamed, the log gzipped,
CRLF line ends, the scrapes in every accepted shape, the log alone beside log + scrapes. The
answer is compared through the CLI (``-f json``): headline, count and its quality, the fixes,
the per-event gate and mechanism, the exit code. Paths in the text (``file:line``) are the only
difference allowed where a file's name differs. tests/campaigns/test_metamorphic.py holds the
relations on single logs.
"""

from __future__ import annotations

import gzip
import json
import re
import tarfile
import zipfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ..conftest import run_cli

T0 = datetime(2025, 10, 14, 10, 0, 0, tzinfo=UTC)
EPOCH = T0.timestamp()
MODEL = "Qwen/Qwen2.5-7B-Instruct"


def _hdr(t: datetime) -> str:
    return t.strftime("%m-%d %H:%M:%S")


def v1_log(version: str = "0.10.2", *, ansi: bool = True, preemptions: dict[int, int] | None = None) -> str:
    """A V1 server log: banner, args, engine config, KV cache size, requests, stats every 10 s.

    ``ansi``: the ``(APIServer pid=N)`` prefix coloured, as vLLM 0.4.3-0.11.2 write it into a file.
    ``preemptions``: stats line index -> its ``Preemptions: N`` part (a build with PR #38452's fix).
    """

    def pfx(name: str, pid: int) -> str:
        return f"\x1b[1;36m({name} pid={pid})\x1b[0;0m " if ansi else f"({name} pid={pid}) "

    api, core = pfx("APIServer", 4394), pfx("EngineCore_DP0", 4500)
    out = [
        f"{api}INFO {_hdr(T0)} [api_server.py:1896] vLLM API server version {version}",
        f"{api}INFO {_hdr(T0)} [utils.py:328] non-default args: {{'model': '{MODEL}', 'max_num_seqs': 64, "
        "'max_model_len': 8192}",
        f"{core}INFO {_hdr(T0 + timedelta(seconds=5))} [core.py:76] Initializing a V1 LLM engine (v{version}) with "
        f"config: model='{MODEL}', speculative_config=None, tokenizer='{MODEL}', dtype=torch.bfloat16, "
        "max_seq_len=8192, tensor_parallel_size=1, enable_prefix_caching=True, chunked_prefill_enabled=True",
        f"{core}INFO {_hdr(T0 + timedelta(seconds=15))} [kv_cache_utils.py:864] GPU KV cache size: 18,400 tokens",
        f"{core}INFO {_hdr(T0 + timedelta(seconds=15))} [kv_cache_utils.py:868] Maximum concurrency for 8,192 "
        "tokens per request: 2.25x",
    ]
    rows = [(0, 0, 0.0), (12, 0, 30.2), (40, 6, 81.0), (58, 21, 99.1), (47, 30, 100.0), (44, 26, 99.6)]
    rows += [(50, 9, 97.5), (30, 0, 60.2), (4, 0, 8.0), (0, 0, 0.0)]
    for i, (run, wait, kv) in enumerate(rows):
        t = T0 + timedelta(seconds=30 + 10 * i)
        if i in (1, 2, 3):
            for k in range(3):
                out.append(
                    f"{api}INFO {_hdr(t - timedelta(seconds=5))} [logger.py:43] Received request chatcmpl-{i}{k}aa: "
                    "params: SamplingParams(n=1, temperature=0.7, max_tokens=1024), prompt_token_ids: None, "
                    "lora_request: None."
                )
        pre = f"Preemptions: {preemptions[i]}, " if preemptions and i in preemptions else ""
        out.append(
            f"{api}INFO {_hdr(t)} [loggers.py:123] Engine 000: Avg prompt throughput: {100.0 * run:.1f} tokens/s, "
            f"Avg generation throughput: {10.0 * run:.1f} tokens/s, Running: {run} reqs, Waiting: {wait} reqs, "
            f"{pre}GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: 12.5%"
        )
    return "\n".join(out) + "\n"


# (seconds after T0, counter, KV usage 0-1, waiting, running): the scrapes of incident A
SCRAPES = [(25, 0, 0.0, 0, 0), (65, 12, 0.99, 21, 58), (95, 30, 0.975, 9, 50), (125, 30, 0.0, 0, 0)]
LABELS = f'{{engine="0",model_name="{MODEL}"}}'


def scrape(value: float, kv: float, waiting: int, running: int, *, created: bool = True, om: bool = False) -> str:
    """One ``curl -s host:8000/metrics`` page (OpenMetrics with ``om``: its TYPE names and ``# EOF``)."""
    s = [
        "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
        f"# TYPE vllm:num_preemptions{'' if om else '_total'} counter",
        f"vllm:num_preemptions_total{LABELS} {float(value)}",
    ]
    if created:
        s.append(f"vllm:num_preemptions_created{LABELS} {EPOCH + 20.5!r}")
    for name, v in (("kv_cache_usage_perc", kv), ("num_requests_waiting", waiting), ("num_requests_running", running)):
        s += [f"# HELP vllm:{name} {name}.", f"# TYPE vllm:{name} gauge", f"vllm:{name}{LABELS} {float(v)}"]
    return "\n".join(s) + "\n" + ("# EOF\n" if om else "")


def _iso(off: float) -> str:
    return datetime.fromtimestamp(EPOCH + off, UTC).isoformat()


def metrics_shapes(scrapes=SCRAPES, *, created: bool = True) -> dict[str, dict[str, str]]:
    """The same scrapes in every accepted shape (docs/prometheus.md "Accepted inputs")."""
    shapes: dict[str, dict[str, str]] = {}
    shapes["text-per-file"] = {
        f"metrics-{int(EPOCH + o)}.prom": scrape(v, kv, w, r, created=created) for o, v, kv, w, r in scrapes
    }
    shapes["text-concatenated"] = {
        "metrics.prom": "".join(
            f"# scrape {_iso(o)}\n" + scrape(v, kv, w, r, created=created) for o, v, kv, w, r in scrapes
        )
    }
    shapes["text-date-lines"] = {
        "scrapes.txt": "".join(
            f"{int(EPOCH + o)}\n" + scrape(v, kv, w, r, created=created) for o, v, kv, w, r in scrapes
        )
    }
    shapes["openmetrics-per-file"] = {
        f"metrics-{int(EPOCH + o)}.om": scrape(v, kv, w, r, created=created, om=True) for o, v, kv, w, r in scrapes
    }
    lab = {"engine": "0", "model_name": MODEL, "instance": "10.0.0.1:8000", "job": "vllm"}

    def matrix(metric: str, col: int) -> str:
        values = [[EPOCH + s[0], str(float(s[col]))] for s in scrapes]
        res = [{"metric": {"__name__": metric, **lab}, "values": values}]
        return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": res}})

    answers = [matrix("vllm:num_preemptions_total", 1), matrix("vllm:kv_cache_usage_perc", 2)]
    answers += [matrix("vllm:num_requests_waiting", 3), matrix("vllm:num_requests_running", 4)]
    if created:
        res = [{"metric": {"__name__": "vllm:num_preemptions_created", **lab}, "values": []}]
        res[0]["values"] = [[EPOCH + s[0], repr(EPOCH + 20.5)] for s in scrapes]
        answers.append(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": res}}))
    shapes["query-range-json"] = {"prom.json": "\n".join(answers) + "\n"}
    recs = []
    for o, v, kv, w, r in scrapes:
        lb = {"engine": "0", "model_name": MODEL}
        m = {f"vllm:{k}": [{"labels": lb, "value": float(x)}] for k, x in (("num_preemptions_total", v),)}
        m |= {f"vllm:{k}": [{"labels": lb, "value": float(x)}] for k, x in (("kv_cache_usage_perc", kv),)}
        m |= {"vllm:num_requests_waiting": [{"labels": lb, "value": float(w)}]}
        m |= {"vllm:num_requests_running": [{"labels": lb, "value": float(r)}]}
        if created:
            m["vllm:num_preemptions_created"] = [{"labels": lb, "value": EPOCH + 20.5}]
        rec = {"endpoint_url": "http://10.0.0.1:8000/metrics", "timestamp_ns": int((EPOCH + o) * 1e9)}
        recs.append(json.dumps(rec | {"endpoint_latency_ns": 1000000, "metrics": m}))
    shapes["aiperf-jsonl"] = {"server_metrics_export.jsonl": "\n".join(recs) + "\n"}
    return shapes


def bundle(root: Path, files: dict[str, str | bytes]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (root / name).write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return root


def answer(*paths: Path | str) -> dict:
    """The CLI's answer on PATHS (``-f json``), reduced to what must not depend on the path."""
    out = run_cli("analyze", *map(str, paths), "--tz", "UTC", "-f", "json")
    assert out.stdout, out.stderr
    doc = json.loads(out.stdout)
    s = doc["summary"]
    rec = s.get("reconciliation") or {}

    def unpath(text):  # a file:line cited in the text names the file as given
        return re.sub(r"[^\s(),;]*[A-Za-z][^\s(),;]*:(\d+)", r"F:\1", text) if isinstance(text, str) else text

    return {
        "exit": out.returncode,
        "headline": unpath(s["headline"]),
        "total": rec.get("total"),
        "quality": rec.get("quality"),
        "fixes": [(f["option"], f["current"], f["suggested"], f["rank"]) for f in s.get("fixes") or []],
        "verdicts": Counter((e["gate"], e["sub_kind"], e["mechanism"], e["rule"]) for e in doc["events"] or []),
    }


# ---------------------------------------------------------------- containers and file names


def test_a_coloured_log_renamed_to_txt_is_the_log(tmp_path):
    """vLLM 0.4.3-0.11.2 write colour codes into the log file; named ``a.txt`` it is still the log,
    not a document (sniffing.is_document judged the coloured lines as not log-like)."""
    metrics = metrics_shapes()["text-per-file"]
    base = answer(bundle(tmp_path / "named" / "A", {"vllm.log": v1_log(), **metrics}))
    renamed = answer(bundle(tmp_path / "renamed" / "A", {"a.txt": v1_log(), **metrics}))
    assert renamed == base
    assert answer(bundle(tmp_path / "alone", {"a.txt": v1_log()})) == answer(
        bundle(tmp_path / "alone-named", {"vllm.log": v1_log()})
    )


def _variants(tmp_path: Path, files: dict[str, str]) -> dict[str, list[Path]]:
    """The same bundle as a folder, a .tar.gz, a .zip, with the log gzipped, CRLF, without colour."""
    folder = bundle(tmp_path / "folder" / "inc", files)
    out: dict[str, list[Path]] = {"folder": [folder]}
    with tarfile.open(tmp_path / "inc.tar.gz", "w:gz") as tar:
        tar.add(folder, arcname="inc")
    out["tar.gz"] = [tmp_path / "inc.tar.gz"]
    with zipfile.ZipFile(tmp_path / "inc.zip", "w") as z:
        for f in sorted(folder.iterdir()):
            z.write(f, f"inc/{f.name}")
    out["zip"] = [tmp_path / "inc.zip"]
    gz = {
        (n + ".gz" if n.endswith(".log") else n): (gzip.compress(t.encode()) if n.endswith(".log") else t)
        for n, t in files.items()
    }
    out["log.gz"] = [bundle(tmp_path / "gz" / "inc", gz)]
    out["crlf"] = [bundle(tmp_path / "crlf" / "inc", {n: t.replace("\n", "\r\n") for n, t in files.items()})]
    plain = {n: re.sub(r"\x1b\[[0-9;]*m", "", t) for n, t in files.items()}
    out["no-colour"] = [bundle(tmp_path / "plain" / "inc", plain)]
    return out


def _all_equal(answers: dict[str, dict]) -> None:
    first, *rest = answers
    for name in rest:
        assert answers[name] == answers[first], (first, name)


def test_v1_log_and_scrapes_in_every_container(tmp_path):
    files = {"vllm.log": v1_log(), **metrics_shapes()["text-per-file"]}
    answers = {k: answer(*p) for k, p in _variants(tmp_path, files).items()}
    _all_equal(answers)
    assert answers["folder"]["total"] == 30 and answers["folder"]["quality"] == "exact"


def test_v1_log_beside_every_shape_of_its_scrapes(tmp_path):
    """The scrapes as text per file, concatenated (# scrape / date lines), OpenMetrics, query_range
    JSON, AIPerf jsonl: one answer (the counter's 30, exact; the log's stats give the cause)."""
    answers = {k: answer(bundle(tmp_path / k, {"vllm.log": v1_log(), **m})) for k, m in metrics_shapes().items()}
    _all_equal(answers)
    assert answers["text-per-file"]["total"] == 30


def test_a_log_named_like_a_document_is_read_by_its_content(tmp_path):
    """``incident.log`` / ``report.txt`` (names the document rule knows) holding the server's log, in a
    folder, read as that log: the same answer as ``vllm.log`` (it was exit 3, "nothing recognisable")."""
    base = answer(bundle(tmp_path / "named", {"vllm.log": v1_log(), **metrics_shapes()["text-per-file"]}))
    for name in ("incident.log", "report.txt", "timeline.log.gz"):
        data = v1_log().encode()
        files = {name: gzip.compress(data) if name.endswith(".gz") else data, **metrics_shapes()["text-per-file"]}
        assert answer(bundle(tmp_path / name, files)) == base, name
    notes = {"NOTES.txt": "The on-call notes: the server slowed down after the deploy, we restarted it at ten.\n" * 3}
    doc = run_cli("analyze", str(bundle(tmp_path / "notes", {"vllm.log": v1_log(), **notes})), "-f", "json", "-v")
    assert "not read: " in doc.stderr and "NOTES.txt" in doc.stderr  # a document stays one
    # notes quoting an excerpt of the log between their sentences stay notes: the quoted lines are the
    # log's own, and read as a log they would be counted twice
    excerpt = v1_log(ansi=False).splitlines()[-8:]
    quoting = "We saw this at ten, after the deploy of the new model version to the pool:\n" + "\n".join(excerpt)
    quoting += "\nThen we restarted the server and the queue drained within a few minutes of it.\n"
    files = {"vllm.log": v1_log(), "NOTES.txt": quoting, **metrics_shapes()["text-per-file"]}
    assert answer(bundle(tmp_path / "quoting", files)) == base


def test_a_compose_log_saved_as_txt_is_the_log(tmp_path):
    """``docker compose logs > vllm.txt``: every line behind ``vllm-1  | `` is still a log line."""
    compose = "".join(f"vllm-1  | {ln}\n" for ln in v1_log(ansi=False).splitlines())
    assert answer(bundle(tmp_path / "txt", {"vllm.txt": compose})) == answer(
        bundle(tmp_path / "log", {"vllm.log": compose})
    )


def _ut_extra(mtime: float) -> bytes:
    """Info-ZIP's extended timestamp extra field (0x5455): the modification time in UTC seconds."""
    return (0x5455).to_bytes(2, "little") + (5).to_bytes(2, "little") + b"\x01" + int(mtime).to_bytes(4, "little")


def test_an_archive_keeps_its_members_times(tmp_path):
    """Scrapes named ``scrape0.txt`` ... are timed by their mtime, and a year-less log takes its year
    from its mtime: inside a .tar.gz or a .zip, the member's time is that mtime (it was the moment
    the archive was unpacked: the counter's 30 became '30 preemptions by <now>', the log's year this
    year)."""
    import os

    folder = tmp_path / "folder" / "inc"
    files = {"vllm.log": v1_log()} | {f"scrape{i}.txt": scrape(*s[1:]) for i, s in enumerate(SCRAPES)}
    bundle(folder, files)
    times = {"vllm.log": EPOCH + 130} | {f"scrape{i}.txt": EPOCH + s[0] for i, s in enumerate(SCRAPES)}
    for n, t in times.items():
        os.utime(folder / n, (t, t))
    with tarfile.open(tmp_path / "inc.tar.gz", "w:gz") as tar:
        tar.add(folder, arcname="inc")
    with zipfile.ZipFile(tmp_path / "inc.zip", "w") as z:  # Info-ZIP's shape: DOS time and the UTC field
        for n, t in times.items():
            info = zipfile.ZipInfo(f"inc/{n}", datetime.fromtimestamp(t, UTC).timetuple()[:6])
            info.extra = _ut_extra(t)
            z.writestr(info, (folder / n).read_bytes())
    with zipfile.ZipFile(tmp_path / "dos.zip", "w") as z:  # Python's shape: the DOS local time alone
        for n, t in times.items():  # local time of the reading machine: run_cli's TZ=UTC
            z.writestr(zipfile.ZipInfo(f"inc/{n}", datetime.fromtimestamp(t, UTC).timetuple()[:6]), files[n])

    def full(path: Path) -> dict:
        doc = json.loads(run_cli("analyze", str(path), "--tz", "UTC", "-f", "json").stdout)
        return answer(path) | {"first": doc["summary"]["first_event"], "last": doc["summary"]["last_event"]}

    base = full(folder)
    assert base["headline"].startswith("30 preemptions in 67 s") and base["first"].startswith("2025-10-14T10:00:28")
    for archive in ("inc.tar.gz", "inc.zip"):
        assert full(tmp_path / archive) == base, archive
    dos = full(tmp_path / "dos.zip")  # a DOS time has 2-second steps: the odd seconds are a second early
    assert {k: v for k, v in dos.items() if k not in ("first", "last")} == answer(folder)
    assert dos["first"].startswith("2025-10-14T10:00:27")


def v0_log() -> str:
    """A V0 0.6.3 server: args, engine config, GPU blocks, stats every 10 s, two sampled warnings (1, 51)."""
    warn = (
        "Sequence group {rid} is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache "
        "space. This can affect the end-to-end performance. Increase gpu_memory_utilization or "
        "tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption={n}"
    )
    model = "meta-llama/Llama-3.1-8B-Instruct"
    out = [
        f"INFO {_hdr(T0)} api_server.py:528] vLLM API server version 0.6.3.post1",
        f"INFO {_hdr(T0)} api_server.py:529] args: Namespace(host=None, port=8000, model='{model}', "
        "max_model_len=8192, gpu_memory_utilization=0.9, max_num_seqs=256, enable_prefix_caching=False, block_size=16)",
        f"INFO {_hdr(T0 + timedelta(seconds=5))} llm_engine.py:237] Initializing an LLM engine (v0.6.3.post1) with "
        f"config: model='{model}', speculative_config=None, tokenizer='{model}', max_seq_len=8192, "
        "tensor_parallel_size=1, enable_prefix_caching=False, use_v2_block_manager=True, chunked_prefill_enabled=False",
        f"INFO {_hdr(T0 + timedelta(seconds=20))} gpu_executor.py:122] # GPU blocks: 2048, # CPU blocks: 2048",
    ]
    rows = [(0, 0, 0.0), (80, 10, 62.0), (120, 40, 97.5), (110, 60, 99.8), (100, 45, 99.1), (60, 0, 40.0), (0, 0, 0.0)]
    for i, (run, wait, kv) in enumerate(rows):
        t = T0 + timedelta(seconds=30 + 10 * i)
        if i in (1, 2):
            out += [
                f"INFO {_hdr(t - timedelta(seconds=6))} async_llm_engine.py:208] Added request chat-{i}{k}bb."
                for k in range(4)
            ]
        if i in (2, 4):
            msg = warn.format(rid="chat-20bb" if i == 2 else "chat-11bb", n=1 if i == 2 else 51)
            out.append(f"WARNING {_hdr(t - timedelta(seconds=3))} scheduler.py:1439] {msg}")
        out.append(
            f"INFO {_hdr(t)} metrics.py:345] Avg prompt throughput: {50.0 * run:.1f} tokens/s, Avg generation "
            f"throughput: {5.0 * run:.1f} tokens/s, Running: {run} reqs, Swapped: 0 reqs, Pending: {wait} reqs, "
            f"GPU KV cache usage: {kv:.1f}%, CPU KV cache usage: 0.0%."
        )
    return "\n".join(out) + "\n"


def test_v0_log_in_every_container_and_beside_a_reading_that_repeats_it(tmp_path):
    """The V0 warnings' count (51, a lower bound) and its gate, fix and exit code on every path; a
    /metrics reading after the incident that says the same 51 leaves count, gate and fix as they were."""
    answers = {k: answer(*p) for k, p in _variants(tmp_path / "v", {"vllm.log": v0_log()}).items()}
    _all_equal(answers)
    alone = answers["folder"]
    assert alone["total"] == 51 and alone["quality"] == "lower bound"
    page = (
        "# TYPE vllm:num_preemptions_total counter\n"
        'vllm:num_preemptions_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 51.0\n'
    )
    both = answer(bundle(tmp_path / "both", {"vllm.log": v0_log(), f"metrics-{int(EPOCH + 95)}.prom": page}))
    assert {k: both[k] for k in ("total", "fixes", "verdicts", "exit")} == {
        k: alone[k] for k in ("total", "fixes", "verdicts", "exit")
    }


def test_a_gzipped_scrape_is_timed_by_its_gzip_header(tmp_path):
    """``gzip -c scrape0.txt > scrape0.txt.gz``: the header keeps the scrape file's mtime, the .gz's own is
    the moment it was compressed. A scrape timed by its mtime reads the same gzipped (it took the .gz's
    time: '30 preemptions by <now>'), as a gzipped log's year already did (timebase)."""
    import os

    plain, gz = tmp_path / "plain", tmp_path / "gz"
    bundle(plain, {"vllm.log": v1_log()})
    bundle(gz, {"vllm.log": v1_log()})
    for d in (plain, gz):
        os.utime(d / "vllm.log", (EPOCH + 130, EPOCH + 130))
    for i, (o, v, kv, w, r) in enumerate(SCRAPES):
        data = scrape(v, kv, w, r).encode()
        (plain / f"scrape{i}.txt").write_bytes(data)
        os.utime(plain / f"scrape{i}.txt", (EPOCH + o, EPOCH + o))
        (gz / f"scrape{i}.txt.gz").write_bytes(gzip.compress(data, mtime=int(EPOCH + o)))  # its mtime: now
    base = answer(plain)
    assert base["headline"].startswith("30 preemptions in 67 s")
    assert answer(gz) == base
