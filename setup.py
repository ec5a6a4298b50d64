"""The compiled log pass (preemptlog/sources/fastscan, GitHub issue 36): a plain C extension.

Everything else is declared in pyproject.toml. ``optional=True``: on a machine without a C
compiler (or Python headers) the install still succeeds, and the polars pass reads the logs
(``preemptlog analyze -v`` says which pass ran).
"""

import compileall
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildExtAndBytecode(build_ext):
    """An editable install (``pip install -e``, the README's test command) builds the extension in
    place and, unlike a wheel install, compiles no bytecode: with ``PYTHONDONTWRITEBYTECODE=1`` set
    (CI runners, containers) every ``preemptlog`` process then compiled its ~200 modules from source,
    ~0.23 s of start-up (0.26 -> 0.49 s for the imports of ``analyze``: docs/performance.md). So the
    in-place build writes the package's bytecode too, as pip does for a wheel; a failure there never
    fails the install (Python compiles what it lacks at import)."""

    def run(self) -> None:
        super().run()
        if self.inplace:
            try:
                here = os.path.dirname(os.path.abspath(__file__))
                compileall.compile_dir(os.path.join(here, "preemptlog"), quiet=2)
            except Exception as exc:  # bytecode is an optimisation, never a failure
                print(f"preemptlog: bytecode not compiled ({exc}); imports compile it", flush=True)


setup(
    cmdclass={"build_ext": BuildExtAndBytecode},
    ext_modules=[
        Extension(
            "preemptlog.sources.fastscan._scan",
            sources=["preemptlog/sources/fastscan/_scan.c", "preemptlog/sources/fastscan/scan_core.c"],
            depends=["preemptlog/sources/fastscan/scan_core.h"],
            extra_compile_args=["-O2", "-std=gnu11", "-pthread", "-fvisibility=hidden"],
            extra_link_args=["-pthread"],
            optional=True,
        )
    ],
)
