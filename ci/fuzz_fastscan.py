#!/usr/bin/env python3
"""Coverage-guided fuzzing of the compiled log pass (issue 36), differential against the polars pass.

    python ci/fuzz_fastscan.py                 # 60 s campaign, then the differential step
    python ci/fuzz_fastscan.py --seconds 600   # a longer campaign

1. Builds preemptlog/sources/fastscan/fuzz_target.c + scan_core.c with clang's libFuzzer,
   AddressSanitizer (LeakSanitizer included) and UndefinedBehaviorSanitizer (Debian: clang-14,
   libclang-rt-14-dev; .ci/run installs them).
2. Runs it for ``--seconds`` on a copy of the committed seed corpus (fixtures/fuzz/fastscan/)
   with the markers and regex programs the extension runs (``fastscan.blob_of(vllm_log.fast_spec())``).
   A crash, a sanitizer report or a leak fails the run (the input is kept as ``crash-*`` in the work
   folder and printed).
3. Merges the corpus the campaign grew to a minimal one (``-merge=1``) and reads every input of it
   with both passes (``vllm_log.read`` compiled and ``PREEMPTLOG_SCANNER=polars``): any difference
   fails the run and the input is written next to the crashes.

Exit status 0: no crash, no leak, every input identical. tests/sources/test_fastscan_fuzz.py runs it (a slow
test, so CI runs it); ``PREEMPTLOG_FUZZ_SECONDS`` sets the campaign's length there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "preemptlog" / "sources" / "fastscan"
SEEDS = ROOT / "fixtures" / "fuzz" / "fastscan"


def clang() -> str | None:
    for name in ("clang", "clang-14", "clang-15", "clang-16", "clang-13"):
        path = shutil.which(name)
        if path:
            return path
    return None


def build(work: Path) -> Path:
    cc = clang()
    if cc is None:
        raise SystemExit("fuzz_fastscan: no clang (apt-get install clang-14 libclang-rt-14-dev)")
    out = work / "fastscan_fuzz"
    cmd = [
        cc,
        "-g",
        "-O1",
        "-fno-omit-frame-pointer",
        "-fsanitize=fuzzer,address,undefined",
        "-fno-sanitize-recover=all",
        f"-I{SRC}",
        str(SRC / "fuzz_target.c"),
        str(SRC / "scan_core.c"),
        "-o",
        str(out),
    ]
    subprocess.run(cmd, check=True)
    return out


def config(work: Path) -> Path:
    import preemptlog.engines  # noqa: F401  (registers every engine's record families: their markers)
    from preemptlog.sources import fastscan, vllm_log

    path = work / "config.bin"
    path.write_bytes(fastscan.blob_of(vllm_log.fast_spec()))
    return path


def campaign(exe: Path, cfg: Path, work: Path, seconds: int) -> tuple[int, str]:
    corpus = work / "corpus"
    corpus.mkdir(exist_ok=True)
    for seed in sorted(SEEDS.glob("*")):
        if seed.is_file():
            shutil.copy(seed, corpus / seed.name)
    env = {**os.environ, "FASTSCAN_CONFIG": str(cfg), "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0"}
    p = subprocess.run(
        [
            str(exe),
            str(corpus),
            f"-max_total_time={seconds}",
            "-max_len=65536",
            "-timeout=20",
            # No RSS limit: a child starts with its parent's peak RSS (getrusage's ru_maxrss survives fork and
            # exec), so under a pytest worker that once held 3.5 GB libFuzzer's RSS check fired on the empty
            # input (CI: "out-of-memory (used: 3578Mb; limit: 2048Mb)" before a single slow input). An
            # allocation above 2 GB is still an error (-malloc_limit_mb), leaks are LeakSanitizer's.
            "-rss_limit_mb=0",
            "-malloc_limit_mb=2048",
            "-print_final_stats=1",
            f"-artifact_prefix={work}/",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    return p.returncode, p.stderr


def merged(exe: Path, cfg: Path, work: Path) -> list[Path]:
    small = work / "min"
    small.mkdir(exist_ok=True)
    env = {**os.environ, "FASTSCAN_CONFIG": str(cfg)}
    # the merge's own runs inherit the same peak RSS: no RSS limit there either (see campaign)
    cmd = [str(exe), "-merge=1", "-rss_limit_mb=0", "-malloc_limit_mb=2048", str(small), str(work / "corpus")]
    m = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if m.returncode != 0:  # say why (the merge's own output), never a bare exit status
        raise SystemExit(f"fuzz_fastscan: the corpus merge exited {m.returncode}:\n{m.stderr[-3000:]}")
    return sorted(p for p in small.iterdir() if p.is_file())


def differ(path: Path) -> str | None:
    """None when both passes read ``path`` alike, else what differs."""
    import polars as pl
    from polars.testing import assert_frame_equal

    from preemptlog.sources import vllm_log

    def read(name: str | None) -> pl.DataFrame | Exception:
        old = os.environ.pop("PREEMPTLOG_SCANNER", None)
        if name:
            os.environ["PREEMPTLOG_SCANNER"] = name
        try:
            return vllm_log.read(str(path), 0)
        except pl.exceptions.PolarsError as exc:
            return exc
        finally:
            os.environ.pop("PREEMPTLOG_SCANNER", None)
            if old is not None:
                os.environ["PREEMPTLOG_SCANNER"] = old

    want, got = read("polars"), read(None)
    if isinstance(want, Exception) or isinstance(got, Exception):
        return None if type(want) is type(got) else f"errors differ: {want!r} / {got!r}"
    if got.columns != want.columns:
        return f"columns differ: {got.columns} / {want.columns}"
    for name in want.columns:
        try:
            assert_frame_equal(got.select(name), want.select(name))
        except AssertionError as exc:
            return f"column {name}: {str(exc)[:300]}"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("PREEMPTLOG_FUZZ_SECONDS", "60")))
    ap.add_argument("--work", type=Path, help="work folder (default: a temporary one, removed on success)")
    ap.add_argument("--max-diff", type=int, default=600, help="inputs read by both passes at most")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="fastscan-fuzz-"))
    work.mkdir(parents=True, exist_ok=True)
    exe = build(work)
    cfg = config(work)
    rc, log = campaign(exe, cfg, work, args.seconds)
    stats = [ln for ln in log.splitlines() if ln.startswith(("stat::", "#")) and ("DONE" in ln or "stat::" in ln)]
    print("\n".join(stats[-8:]))
    crashes = sorted(work.glob("crash-*")) + sorted(work.glob("leak-*")) + sorted(work.glob("timeout-*"))
    if rc != 0 or crashes:
        print(log[-6000:], file=sys.stderr)
        print(f"fuzz_fastscan: the campaign failed (exit {rc}); inputs: {[str(c) for c in crashes]}", file=sys.stderr)
        return 1
    inputs = merged(exe, cfg, work)[: args.max_diff]
    bad = []
    for p in inputs:
        why = differ(p)
        if why:
            keep = work / f"differ-{p.name}"
            shutil.copy(p, keep)
            bad.append(f"{keep}: {why}")
    print(f"fuzz_fastscan: {args.seconds} s campaign, {len(inputs)} inputs of the merged corpus read by both passes")
    if bad:
        print("fuzz_fastscan: the passes differ on\n  " + "\n  ".join(bad), file=sys.stderr)
        return 1
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
