"""Every source kind and record family declares samples on the registry (sources.samples),
and every sample is read: one parametrised test over the registry, so a new kind without
samples fails here. The field-by-field checks of each module's own shape of ``expect`` are in
its tests (test_vllm_samples, test_hooks, test_blocktable, test_dmon, test_prometheus...)."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from preemptlog import sources
from preemptlog.analysis import AnalyzeOptions, analyze
from preemptlog.sources import vllm_log

NAMES = list(sources.kinds()) + list(sources.families())
OPTS = AnalyzeOptions(tz="UTC", year=2026, rules=False)


def _write(path, text: str):
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    return path


def _has_row(df: pl.DataFrame, fields: dict[str, Any]) -> bool:
    cond = pl.lit(True)
    for k, v in fields.items():
        if k not in df.columns:
            return False
        cond = cond & (pl.col(k) == v) if v is not None else cond & pl.col(k).is_null()
    return df.filter(cond).height > 0


def test_every_builtin_is_covered():
    assert set(NAMES) >= {"vllm-log", "blocktable", "kvevents", "dmon", "prometheus", "capture", "hooks", "bt_text"}


@pytest.mark.parametrize("name", NAMES)
def test_declares_samples(name):
    declared = sources.samples(name)
    assert any(s.good for s in declared), f"{name}: no sample it reads (register_samples)"
    assert all(s.kind == name and s.text.strip() for s in declared)


@pytest.mark.parametrize("name", NAMES)
def test_samples_are_read(name, tmp_path):
    good = [s for s in sources.samples(name) if s.good]
    if name in sources.kinds() and name != vllm_log.KIND:
        for i, s in enumerate(good):
            assert sources.sniff(s.text)[0] == name, (i, s.text[:200])
            p = _write(tmp_path / f"s{i}", s.text)
            a = analyze([str(p)], OPTS)
            assert [f.kind for f in a.bundle.files] == [name]
            exp = s.expect if isinstance(s.expect, dict) else {}
            if "frame" in exp:
                fields = {k: v for k, v in exp.items() if k != "frame" and not k.startswith("_")}
                assert _has_row(a.frames[exp["frame"]], fields), (i, exp, a.frames[exp["frame"]])
            if "_events" in exp:
                assert a.events.height == exp["_events"], (i, a.events)
            if isinstance(s.expect, list):  # one row per expected sample (dmon)
                assert a.frames[name].height == len(s.expect), (i, a.frames[name])
        return
    # The vLLM log and the record families inside it: every line is one record of its kind.
    p = _write(tmp_path / "vllm.log", "\n".join(s.text for s in good))
    a = analyze([str(p)], OPTS)
    assert [f.kind for f in a.bundle.files] == [vllm_log.KIND]
    expected = {s.expect["kind"] for s in good if isinstance(s.expect, dict) and "kind" in s.expect}
    assert expected and expected <= set(a.records.get_column("kind").to_list())
