"""The compiled log pass (preemptlog/sources/fastscan, GitHub issue 36): a plain C extension.

Everything else is declared in pyproject.toml. ``optional=True``: on a machine without a C
compiler (or Python headers) the install still succeeds, and the polars pass reads the logs
(``preemptlog analyze -v`` says which pass ran).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "preemptlog.sources.fastscan._scan",
            sources=["preemptlog/sources/fastscan/_scan.c", "preemptlog/sources/fastscan/scan_core.c"],
            depends=["preemptlog/sources/fastscan/scan_core.h"],
            extra_compile_args=["-O2", "-std=gnu11", "-pthread", "-fvisibility=hidden"],
            extra_link_args=["-pthread"],
            optional=True,
        )
    ]
)
