"""The serving engines, peers behind one registry (vLLM, SGLang; a third engine is a third folder).

Each engine package registers what it contributes when it is imported: its log source kinds
and record families (into ``sources.registry``, so the single log pass and sniffing see them).
The built-in engines are imported here, by name, in this order (the order decides sniffing ties
between kinds of equal score); nothing outside ``engines/`` imports an engine's own modules.
"""

from __future__ import annotations

import importlib

BUILTIN_ENGINES: list[str] = ["vllm", "sglang"]

for _name in BUILTIN_ENGINES:
    importlib.import_module(f"{__name__}.{_name}")
