"""A bundle of a vLLM and an SGLang server analysed as one: each engine's configuration is its own.

Both engines' configuration rows are in one frame, under one key space (``max_model_len``,
``kv_cache_tokens``, ``total_gpu_memory_gib``, ``kv_cache_memory_gib``... each engine writes them), so
the value "in force" of a key was the later one, whichever engine's it was: vLLM's capacity levers
sized from SGLang's pool, SGLang's --mem-fraction-static from vLLM's GPU memory line, vLLM's block size
derived from SGLang's token count, an event's configuration evidence from the other server's log.

The rule: every row says whose it is (``engine_kind``: engines.config_engines, by the record of its
``source:line``; another source's rows and a default by the engine that gives them), and every stage
of an engine reads its own rows (engines.config_of / own_view): its fixes, the capacity finding of the
lever engine, the what-if's replayed engine, the joiner's evidence per event. Checked on hand-written
logs (tests/support/two_servers.py) in several shapes: two files in a folder, the same in a tar.gz
archive, one docker compose file of both containers; the start-up lines of either engine later.
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import pytest

from preemptlog.analysis import AnalyzeOptions, analyze

from ..support.two_servers import (
    SGLANG,
    SGLANG_NO_WEIGHTS,
    SGLANG_TOKENS_LATER,
    VLLM_V0_BLOCKS,
    VLLM_V0_MEMORY,
    VLLM_V1,
    interleaved,
    write_lines,
)

OPTS = AnalyzeOptions(tz="UTC", year=2026)
CONFIG_ENGINE = "engine_kind"  # the configuration frame's column of whose a row is (engines.CONFIG_ENGINE; JSON too)
CITE = re.compile(r"([^\s(),]+):(\d+)\b")


class Owners:
    """Whose line a ``file:line`` citation is: a file of one engine by its name, a file of both engines'
    containers by the prefix of the line itself."""

    def __init__(self, files: dict[str, str], containers: dict[str, str] | None = None, root: Path | None = None):
        self.files = files  # basename -> engine
        self.containers = containers or {}  # container -> engine (a file of both)
        self.root = root

    def __call__(self, cite: str) -> str | None:
        m = CITE.fullmatch(cite.strip())
        if not m:
            return None
        name, line = Path(m.group(1)).name, int(m.group(2))
        if name in self.files:
            return self.files[name]
        if self.containers and self.root is not None:
            text = (self.root / name).read_text().splitlines()[line - 1]
            return next(e for c, e in self.containers.items() if text.startswith(c))
        return None


def _cites(text: str) -> list[str]:
    return [m.group(0) for m in CITE.finditer(text or "") if not m.group(1).startswith(("http", "vllm/", "sglang/"))]


def _check_own(a, owner: Owners) -> None:
    """Every configuration row, fix, capacity input and event's configuration evidence cites its own engine."""
    changes = a.fixes["changes"]
    assert {x.get("engine_kind", "vllm") for x in changes} == {"vllm", "sglang"}
    for x in changes:
        mine = x.get("engine_kind", "vllm")
        said = " ".join([*(x.get("inputs") or []), str(x.get("current_from") or ""), str(x.get("text") or "")])
        for c in _cites(said):
            assert owner(c) == mine, (x["id"], c)
    pool = a.findings.capacity["pool"]
    for c in _cites(" ".join(pool["inputs"]) if pool else ""):
        assert owner(c) == "vllm", c
    for e in a.evidence.join(a.events.select("event_id", "engine_kind"), on="event_id").iter_rows(named=True):
        for k, v in e.items():
            if k.startswith("cfg_") and k.endswith("_src") and v:
                assert owner(v) == (e["engine_kind"] or "vllm"), (e["event_id"], k, v)
    cfg = a.config
    assert CONFIG_ENGINE in cfg.columns and cfg.get_column(CONFIG_ENGINE).null_count() == 0
    for r in cfg.filter(cfg["source"].is_not_null()).iter_rows(named=True):
        assert owner(f"{r['source']}:{r['line']}") == r[CONFIG_ENGINE], r


def _fixes(a, engine: str) -> set[tuple]:
    return {
        (x["id"], str(x.get("current")), str(x.get("suggested")), bool(x.get("missing")))
        for x in [*a.fixes["changes"], *a.fixes["to_know_more"]]
        if x.get("engine_kind", "vllm") == engine and "id" in x
    }


def _alone(tmp_path: Path, name: str, lines: list[str]):
    return analyze([str(write_lines(tmp_path / "alone" / name, lines))], OPTS)


def _same_as_alone(a, tmp_path: Path, vllm: list[str], sglang: list[str]) -> None:
    """Each engine's changes, and the vLLM pool, are those of its own log analysed alone."""
    v, s = _alone(tmp_path, "vllm.log", vllm), _alone(tmp_path, "sglang.log", sglang)
    assert _fixes(a, "vllm") == _fixes(v, "vllm")
    assert _fixes(a, "sglang") == _fixes(s, "sglang")
    pool, alone = a.findings.capacity["pool"], v.findings.capacity["pool"]
    assert (pool or {}).get("tokens") == (alone or {}).get("tokens")
    assert (pool or {}).get("block_size") == (alone or {}).get("block_size")


def _folder(tmp_path: Path, vllm: list[str], sglang: list[str]) -> Path:
    d = tmp_path / "bundle"
    write_lines(d / "vllm.log", vllm)
    write_lines(d / "sglang.log", sglang)
    return d


SHAPES = {
    # SGLang's start-up lines (its pool, 200000 tokens, and context_len 163840) come after vLLM's
    "sglang-later": (VLLM_V1, SGLANG),
    # vLLM's memory-profiling line (total_gpu_memory 79.3 GiB, KV 50.1 GiB) after SGLang's start-up, whose own
    # log does not say the memory --mem-fraction-static is a fraction of
    "vllm-memory-later": (VLLM_V0_MEMORY, SGLANG_NO_WEIGHTS),
    # vLLM's pool in blocks only; SGLang's 131072 tokens later (131072 / 4096 blocks would be a block size 32)
    "vllm-blocks-only": (VLLM_V0_BLOCKS, SGLANG_TOKENS_LATER),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_folder_of_two_engines_reads_each_engines_own_config(tmp_path, shape):
    vllm, sglang = SHAPES[shape]
    a = analyze([str(_folder(tmp_path, vllm, sglang))], OPTS)
    _same_as_alone(a, tmp_path, vllm, sglang)
    _check_own(a, Owners({"vllm.log": "vllm", "sglang.log": "sglang"}))


def test_archive_of_two_engines_reads_each_engines_own_config(tmp_path):
    d = _folder(tmp_path, VLLM_V1, SGLANG)
    tgz = tmp_path / "incident.tar.gz"
    with tarfile.open(tgz, "w:gz") as t:
        t.add(d, arcname="incident")
    a = analyze([str(tgz)], OPTS)
    _same_as_alone(a, tmp_path, VLLM_V1, SGLANG)
    _check_own(a, Owners({"vllm.log": "vllm", "sglang.log": "sglang"}))


def test_one_compose_file_of_both_engines_reads_each_engines_own_config(tmp_path):
    """Both engines' lines in one file, behind their docker compose prefixes: a row is the engine's whose line
    it is, not the file's."""
    lines = interleaved({"vllm-1    | ": VLLM_V1, "sglang-1  | ": SGLANG})
    log = write_lines(tmp_path / "compose.log", lines)
    a = analyze([str(log)], OPTS)
    _same_as_alone(a, tmp_path, VLLM_V1, SGLANG)
    _check_own(a, Owners({}, {"vllm-1 ": "vllm", "sglang-1 ": "sglang"}, tmp_path))


def test_the_vllm_pool_and_sglang_memory_are_not_the_other_engines(tmp_path):
    """The figures that went wrong, named: vLLM's pool is its own 131072 tokens (not SGLang's 200000), its
    max_model_len its own; SGLang's --mem-fraction-static is not computed from vLLM's 79.3 GiB; vLLM's block
    size is not derived from SGLang's token count."""
    a = analyze([str(_folder(tmp_path / "a", VLLM_V1, SGLANG))], OPTS)
    assert a.findings.capacity["pool"]["tokens"] == 131072
    dropped = {d["id"]: d["why"] for d in a.findings.capacity["dropped"]}
    assert "max_model_len 8192 " in dropped["capacity_max_model_len"]
    # each event's configuration evidence: its own server's max_model_len; none of another engine's keys
    ev = a.evidence.join(a.events.select("event_id", "engine_kind"), on="event_id")
    per = {k: sorted(set(g.get_column("cfg_max_model_len").to_list())) for (k,), g in ev.group_by("engine_kind")}
    assert per == {"vllm": [8192], "sglang": [163840]}
    assert ev.filter(ev["engine_kind"] == "sglang").get_column("cfg_max_num_seqs").null_count() == 3

    b = analyze([str(_folder(tmp_path / "b", VLLM_V0_MEMORY, SGLANG_NO_WEIGHTS))], OPTS)
    mem = [x for x in b.fixes["changes"] + b.fixes["to_know_more"] if x.get("id") == "sglang_mem_fraction_static"]
    assert not any("79.3" in str(x) for x in mem)
    assert all(x["id"] != "sglang_mem_fraction_static" for x in b.fixes["changes"])

    c = analyze([str(_folder(tmp_path / "c", VLLM_V0_BLOCKS, SGLANG_TOKENS_LATER))], OPTS)
    vllm_rows = c.config.filter((c.config[CONFIG_ENGINE] == "vllm") & (c.config["key"] == "block_size"))
    assert vllm_rows.get_column("status").to_list() == ["default"]  # vLLM 0.8.5's default, said assumed
    assert c.findings.capacity["pool"] is None or c.findings.capacity["pool"].get("tokens") != 131072


def test_each_engines_defaults_and_json_rows_name_their_engine(tmp_path):
    """A default stands only for its own engine's silence, and the JSON configuration rows carry engine_kind."""
    import io
    import json

    from preemptlog.render import OutputFormat, write

    a = analyze([str(_folder(tmp_path, VLLM_V1, SGLANG))], OPTS)
    defaults = a.config.filter(a.config["status"] == "default")
    assert dict(defaults.select("key", CONFIG_ENGINE).iter_rows()) == {
        "scheduling_policy": "vllm",
        "max_num_batched_tokens": "vllm",  # the V1 log does not state it: vLLM's default on its GPU
        "retraction_policy": "sglang",
    }
    buf = io.BytesIO()
    write(a, OutputFormat.json, buf)
    rows = json.loads(buf.getvalue())["config"]
    assert {r["engine_kind"] for r in rows} == {"vllm", "sglang"}


def test_the_whatif_replays_vllm_with_its_own_configuration(tmp_path):
    """The what-if replays vLLM's scheduler: its observed configuration is vLLM's own (the demo incident's
    max_model_len 1024), not an SGLang log's context_len stated later in the same bundle."""
    from preemptlog.whatif.workload import observed_config

    from ..conftest import FIXTURES

    d = tmp_path / "bundle"
    write_lines(d / "vllm.log", (FIXTURES / "demo" / "vllm.log").read_text().splitlines())
    write_lines(
        d / "sglang.log",
        [x.replace("2026-11-20 09:14", "2026-12-02 03:09") for x in SGLANG],  # after the demo's start-up lines
    )
    obs = observed_config(analyze([str(d)], OPTS))
    assert obs.config.max_model_len == 1024
    assert obs.provenance["max_model_len"] == "seen (bundle/vllm.log:44)"
