"""``--each``: a unit's file keeps what reading it in the whole bundle said of it, and its other names.

A folder of two servers (split by incident) where one log was saved as UTF-16 and the other was copied
beside itself: the whole analysis warns that the first is read through a UTF-8 copy and that the second
was found twice and read once. Each unit is analysed from the path read (the UTF-8 copy, the one copy),
which says neither again: before, the units' summaries had no warning at all. Through the CLI, a real
subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys

WARN = (
    "WARNING 05-09 {t} scheduler.py:1077] Sequence group cmpl-{r}-0 is preempted by PreemptionMode.RECOMPUTE "
    "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption={n}"
)


def _log(hour: str, r: str) -> str:
    return (
        "\n".join(
            [
                f"INFO 05-09 {hour}:00:00 api_server.py:149] vLLM API server version 0.6.3",
                f"INFO 05-09 {hour}:00:33 metrics.py:349] Avg prompt throughput: 0.0 tokens/s, Avg generation "
                "throughput: 7220.5 tokens/s, Running: 30 reqs, Swapped: 0 reqs, Pending: 98 reqs, GPU KV cache "
                "usage: 99.8%, CPU KV cache usage: 0.0%.",
                WARN.format(t=f"{hour}:00:34", r=r, n=1),
            ]
        )
        + "\n"
    )


def test_each_unit_keeps_the_utf8_copy_warning_and_the_copy_it_was_found_as(tmp_path):
    b = tmp_path / "b"
    b.mkdir()
    (b / "node-a.log").write_bytes(_log("00", "aaa").encode("utf-16"))
    (b / "node-b.log").write_text(_log("03", "bbb"), encoding="utf-8")
    (b / "node-b.log.bak").write_bytes((b / "node-b.log").read_bytes())
    out = tmp_path / "each.json"
    r = subprocess.run(
        [sys.executable, "-m", "preemptlog", "analyze", str(b), "--each", "--year", "2026", "--tz", "UTC"]
        + ["-q", "-f", "json", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text(encoding="utf-8"))
    warnings = {s["server"]: s["summary"]["warnings"] for s in doc["servers"]}
    assert len(warnings) == 2, warnings
    a = next(w for name, w in warnings.items() if "node-a" in name)
    other = next(w for name, w in warnings.items() if "node-a" not in name)
    assert any("UTF-16" in w and "read through a UTF-8 copy" in w for w in a), a
    assert any("also found as" in w and "read once" in w for w in other), other
    events = {s["server"]: s["summary"]["events"] for s in doc["servers"]}
    assert sorted(events.values()) == [1, 1]
