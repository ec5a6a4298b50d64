"""``nvidia-smi`` snapshots: which GPU the server ran on (its name and total memory).

The shapes an on-call engineer saves beside a log: the default table (``nvidia-smi``), the list
(``nvidia-smi -L``), the query (``nvidia-smi -q``) and the CSV query
(``nvidia-smi --query-gpu=name,memory.total --format=csv``). Each gives the GPUs' names and, but for
``-L``, their total memory. What the analysis gets from them: two configuration rows, ``gpu_name``
and ``gpu_memory_total_gib`` (the first GPU's, with the file and line; when the GPUs differ the name
row says so and is not used), which vLLM's max_num_seqs and max_num_batched_tokens defaults depend
on from 0.8 (engines/vllm/config.py ``_gpu_shown``). A snapshot has no time the analysis places:
the rows carry none. The files hold a few dozen lines: read with Python line by line.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Any

import polars as pl

from ..model.frames import polars_schema
from ..model.schemas import CONFIG_SCHEMA
from .registry import SourceKind, SourceOutput, TimeContext, register, register_samples

if TYPE_CHECKING:
    from ..inputs.files import InputFile

KIND = "nvidia-smi"
NAME_KEY, MEMORY_KEY = "gpu_name", "gpu_memory_total_gib"

# the default table: a GPU's first row, then its memory row
_TABLE_GPU = re.compile(r"^\|\s+(\d+)\s+(.+?)\s+(?:On|Off)\s+\|", re.M)
_TABLE_MEM = re.compile(r"\|\s*(\d+)\s*MiB\s*/\s*(\d+)\s*MiB\s*\|")
_LIST = re.compile(r"^GPU (\d+): (.+?) \(UUID: ")
_Q_NAME = re.compile(r"^\s*Product Name\s*:\s*(.+?)\s*$")
_Q_TOTAL = re.compile(r"^\s*Total\s*:\s*(\d+)\s*MiB\s*$")
_Q_SECTION = re.compile(r"^\s*(\S.*?)\s*$")


def _sniff(head: str) -> int:
    if "NVIDIA-SMI" in head and "Driver Version" in head and _TABLE_GPU.search(head.replace("\r", "")):
        return 90
    lines = head.splitlines()
    if "NVSMI LOG" in head and any(_Q_NAME.match(ln) for ln in lines):
        return 90
    if lines and all(_LIST.match(ln) for ln in lines[:8] if ln.strip()) and any(_LIST.match(ln) for ln in lines):
        return 90
    first = next((ln for ln in lines if ln.strip()), "")
    cols = [c.strip() for c in first.split(",")]
    if "name" in cols and any(c.startswith("memory.total") for c in cols):
        return 80
    return 0


def read(text: str) -> list[dict[str, Any]]:
    """The GPUs a snapshot lists: ``[{"index", "name", "mib", "line"}]`` (``mib`` None when not given;
    ``line`` the 1-based line of the name)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    gpus: list[dict[str, Any]] = []
    if any("NVSMI LOG" in ln for ln in lines[:20]):
        section = ""
        for i, ln in enumerate(lines, 1):
            if m := _Q_NAME.match(ln):
                gpus.append({"index": len(gpus), "name": m.group(1), "mib": None, "line": i})
            elif ln.strip() and not ln.startswith(" " * 8) and ":" not in ln:
                section = ln.strip()
            elif gpus and section.startswith("FB Memory") and (m := _Q_TOTAL.match(ln)) and gpus[-1]["mib"] is None:
                gpus[-1]["mib"] = int(m.group(1))
        return gpus
    for i, ln in enumerate(lines, 1):
        if (m := _LIST.match(ln)) or (m := _TABLE_GPU.match(ln)):
            gpus.append({"index": int(m.group(1)), "name": m.group(2).strip(), "mib": None, "line": i})
        elif gpus and gpus[-1]["mib"] is None and gpus[-1]["line"] == i - 1 and (m := _TABLE_MEM.search(ln)):
            gpus[-1]["mib"] = int(m.group(2))
    if gpus:
        return gpus
    first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if first is None:
        return gpus
    cols = [c.strip() for c in lines[first].split(",")]
    at_name = cols.index("name") if "name" in cols else None
    at_mem = next((k for k, c in enumerate(cols) if c.startswith("memory.total")), None)
    if at_name is None:
        return gpus
    for i, ln in enumerate(lines[first + 1 :], first + 2):
        cells = [c.strip() for c in ln.split(",")]
        if len(cells) != len(cols):
            continue
        mib = re.match(r"(\d+)", cells[at_mem]) if at_mem is not None else None
        gpus.append({"index": len(gpus), "name": cells[at_name], "mib": int(mib.group(1)) if mib else None, "line": i})
    return gpus


class GpuParsed:
    def __init__(self, files: list[InputFile]) -> None:
        self.items: list[tuple[InputFile, list[dict[str, Any]]]] = []
        for f in files:
            with open(f.path, encoding="utf-8", errors="replace") as fh:
                self.items.append((f, read(fh.read(1 << 20))))

    def anchors(self) -> list[tuple[datetime, str]]:
        return []

    def resolve(self, ctx: TimeContext) -> SourceOutput:
        out = SourceOutput()
        rows: list[dict[str, Any]] = []
        for f, gpus in self.items:
            if not gpus:
                out.warnings.append(f"{f.display}: an nvidia-smi snapshot that lists no GPU: skipped")
                continue
            names = sorted({g["name"] for g in gpus})
            g = gpus[0]
            where = f"nvidia-smi snapshot ({len(gpus)} GPU(s))"
            if len(names) == 1:
                rows.append(_row(NAME_KEY, g["name"], f.display, g["line"], where))
            else:
                out.notes.append(
                    f"{f.display}: GPUs of {len(names)} kinds ({', '.join(names)}): which one the server ran on is "
                    "not known; the GPU is not used to resolve vLLM's defaults"
                )
            mems = {x["mib"] for x in gpus if x["mib"] is not None}
            if len(names) == 1 and len(mems) == 1 and g["mib"] is not None:
                rows.append(
                    _row(MEMORY_KEY, f"{g['mib'] / 1024:.2f}", f.display, g["line"], f"{where}: {g['mib']} MiB")
                )
            out.notes.append(f"{f.display}: {len(gpus)} GPU(s): {', '.join(names)}")
        if rows:
            out.config = pl.DataFrame(rows, schema=polars_schema(CONFIG_SCHEMA))
        out.counters["gpus"] = [{"file": f.display, "gpus": len(g)} for f, g in self.items]
        return out


def _row(key: str, value: str, source: str, line: int, note: str) -> dict[str, Any]:
    return {"key": key, "value": value, "status": "seen", "time": None, "source": source, "line": line, "note": note}


def _parse(files: list[InputFile]) -> GpuParsed:
    return GpuParsed(files)


register(
    SourceKind(
        name=KIND,
        description="nvidia-smi snapshot (the table, -L, -q or --query-gpu=name,memory.total --format=csv): the GPU",
        sniff=_sniff,
        parse=_parse,
    )
)

# expect: the first GPU read (tests/sources/test_gpuinfo.py checks each field)
SAMPLES: list[tuple[str, dict[str, Any]]] = [
    (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5a1f0e2c-7d3b-4c1e-9f0a-1b2c3d4e5f60)",
        {"name": "NVIDIA H100 80GB HBM3"},
    ),
    ("name, memory.total [MiB]\nNVIDIA A100-SXM4-80GB, 81920 MiB", {"name": "NVIDIA A100-SXM4-80GB", "mib": 81920}),
]

register_samples(KIND, SAMPLES)
