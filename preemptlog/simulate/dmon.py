"""``nvidia-smi dmon`` output, in the layout of the corpus captures.

Layout (``/work/shared/corpus/dmon-*.txt``, driver 530+ style as in
``dmon-kde-530-jpg-ofa-ccpm.txt`` and ``dmon-fullbot-s-u-jpg-ofa.txt``): two
header rows ``# gpu`` / ``# Idx`` then one row per GPU per sample, every
column right-aligned in 7 characters after a 5-character ``gpu`` column, a
trailing space on every line, ``-`` where a value is not available (mtemp).
With ``-o DT`` the rows start with ``YYYYMMDD   HH:MM:SS`` and the headers
with ``#Date       Time        gpu`` / ``#YYYYMMDD   HH:MM:SS    Idx``, as in
``dmon-notes-pucet-DT-ecc-pci.txt`` (the gpu column is then 7 wide). The two
header rows are repeated every ``header_every`` samples.

Column groups by ``-s`` letter, in the driver's order (p, u, c, m):
p = pwr gtemp mtemp (W C C); u = sm mem enc dec jpg ofa (%);
c = mclk pclk (MHz); m = fb bar1 ccpm (MB).

dmon lists every GPU of the machine: at least two, the first
``tensor_parallel_size`` of them running vLLM, the others idle.

The *values* are invented by the simulator (documented here, not measured):
sm% follows the last step's token load; mem% is ~0.55 of sm; power and
temperature follow the load; **fb (MB) follows KV-cache use** (used blocks x
MB per block, which real vLLM preallocates, so a real fb is flat) plus 6 MB
per free region (fragmentation) plus a 300-1200 MB transient for one sample
after a preemption -- the "fb jump at the event time" that the field guide
(4.1) looks for.
"""

from __future__ import annotations

import random

GROUPS: dict[str, list[tuple[str, str]]] = {
    "p": [("pwr", "W"), ("gtemp", "C"), ("mtemp", "C")],
    "u": [("sm", "%"), ("mem", "%"), ("enc", "%"), ("dec", "%"), ("jpg", "%"), ("ofa", "%")],
    "c": [("mclk", "MHz"), ("pclk", "MHz")],
    "m": [("fb", "MB"), ("bar1", "MB"), ("ccpm", "MB")],
}
ORDER = "pucm"
SELECTS = ("u", "m", "pucm", "um", "pu", "p", "c", "pm", "cm", "ucm", "pum")


def columns(select: str) -> list[tuple[str, str]]:
    bad = set(select) - set(ORDER)
    if not select or bad:
        raise ValueError(f"dmon -s {select!r}: letters must come from {ORDER!r}")
    out: list[tuple[str, str]] = []
    for letter in ORDER:
        if letter in select:
            out.extend(GROUPS[letter])
    return out


class Dmon:
    """Renders dmon rows; one instance per file."""

    def __init__(
        self,
        select: str,
        dates: bool,
        gpus: int,
        header_every: int,
        seed: int,
        fb_total_mb: int = 46068,
        active: int | None = None,
    ):
        self.cols = columns(select)
        self.dates = dates
        self.gpus = max(1, gpus)
        self.active = self.gpus if active is None else max(1, min(active, self.gpus))  # GPUs vLLM runs on
        self.header_every = max(1, header_every)
        self.samples = 0
        self.rng = random.Random(f"{seed}:dmon")
        self.temp = [34.0 + i for i in range(self.gpus)]
        self.fb_total_mb = fb_total_mb

    def headers(self) -> list[str]:
        names = "".join(f"{n:>7}" for n, _ in self.cols)
        units = "".join(f"{u:>7}" for _, u in self.cols)
        if self.dates:
            return [f"#Date       Time        gpu{names} ", f"#YYYYMMDD   HH:MM:SS    Idx{units} "]
        return [f"# gpu{names} ", f"# Idx{units} "]

    def sample(self, date: str, time: str, state: dict) -> list[str]:
        """Rows for one sample. ``state``: load (0-1), used_mb, regions, spike (bool), base_mb."""
        out: list[str] = []
        if self.samples % self.header_every == 0:
            out.extend(self.headers())
        self.samples += 1
        for g in range(self.gpus):
            load = state["load"] if g < self.active else 0.0
            jitter = self.rng.uniform(-0.04, 0.04)
            busy = load > 0
            sm = max(0, min(100, round((load * 92 + jitter * 100) if busy else 0)))
            mem = max(0, min(100, round(sm * 0.55)))
            self.temp[g] += ((38 + 40 * load) - self.temp[g]) * 0.05
            vals: dict[str, str] = {
                "pwr": str(round(58 + 215 * load + self.rng.uniform(-3, 3))),
                "gtemp": str(round(self.temp[g])),
                "mtemp": "-",
                "sm": str(sm),
                "mem": str(mem),
                "enc": "0",
                "dec": "0",
                "jpg": "0",
                "ofa": "0",
                "mclk": "9001" if busy else "405",
                "pclk": str(2520 if busy else 210),
                "fb": str(self._fb(state, g) if g < self.active else 1 + g),
                "bar1": "5",
                "ccpm": "0",
            }
            cells = "".join(f"{vals[n]:>7}" for n, _ in self.cols)
            if self.dates:
                out.append(f" {date}   {time}{g:>7}{cells} ")
            else:
                out.append(f"{g:>5}{cells} ")
        return out

    def _fb(self, state: dict, g: int) -> int:
        fb = state["base_mb"] + state["used_mb"] + 6 * state["regions"]
        if state.get("spike"):
            fb += self.rng.randint(300, 1200)
        fb += self.rng.randint(0, 3) + g
        return int(min(self.fb_total_mb, fb))
