"""Peak memory of ``-f json`` against ``-f ndjson`` as the event count grows (issue 19, item 7).

    python bench/json_memory.py [COUNT ...]        # default: 40000 400000 9x100000

Each case is one 356-byte V0 warning whose ``total_num_cumulative_preemption`` is COUNT, so the
run reconstructs COUNT - 1 events (at most 100 000 from one count: preemptions.MAX_EVENTS_PER_COUNT); the analysis runs in a fresh process and its peak resident
set size (``ru_maxrss`` of the child) is printed per format. Not a test: numbers depend on the
machine. ``KxSTEP`` writes K warnings whose counter grows by STEP each (``9x100000``: 900 000
events). The json document is streamed row by row, so its peak should track ndjson's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

LINE = (
    "WARNING 05-01 10:00:00 scheduler.py:1057] Sequence group 7 is preempted by PreemptionMode.RECOMPUTE "
    "mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase "
    "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
    "total_num_cumulative_preemption={n}\n"
)


def peak_rss_mb(args: list[str]) -> tuple[float, int]:
    """(peak RSS in MB, exit code) of ``python -m preemptlog ARGS`` in a child process."""
    code = (
        "import resource, runpy, sys; sys.argv = ['preemptlog'] + sys.argv[1:]\n"
        "try:\n    runpy.run_module('preemptlog', run_name='__main__')\n"
        "finally:\n    sys.stderr.write('\\nRSS %d\\n' % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    rss_kb = int(p.stderr.rsplit("RSS ", 1)[1].split()[0])
    return rss_kb / 1024, p.returncode


def log_text(case: str) -> str:
    if "x" in case:
        k, step = (int(v) for v in case.split("x"))
        return "".join(LINE.replace("10:00:00", f"10:{i:02d}:00").format(n=1 + step * i) for i in range(k))
    return LINE.format(n=int(case))


def main(counts: list[str]) -> None:
    print("| cumulative | events | -f ndjson peak RSS | -f json peak RSS | json output |")
    print("|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            log = os.path.join(tmp, f"v0-{n}.log")
            with open(log, "w") as fh:
                fh.write(log_text(n))
            row = []
            for fmt in ("ndjson", "json"):
                out = os.path.join(tmp, f"out.{fmt}")
                rss, rc = peak_rss_mb(["analyze", "--year", "2025", "--tz", "UTC", "-f", fmt, "-o", out, log])
                if rc not in (0, 5):
                    raise SystemExit(f"{fmt}: exit {rc}")
                row.append(rss)
                size = os.path.getsize(out)
                if fmt == "ndjson":
                    with open(out, "rb") as fh:
                        events = sum(1 for _ in fh)
            print(f"| {n} | {events} | {row[0]:.0f} MB | {row[1]:.0f} MB | {size / 1e6:.0f} MB |")


if __name__ == "__main__":
    main(sys.argv[1:] or ["40000", "400000", "9x100000"])
