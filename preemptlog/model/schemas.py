"""The frames every engine fills: the configuration rows (``CONFIG_SCHEMA``) and the stats rows
(``STATS_SCHEMA``: engines/<engine>/stats parse their own lines into it)."""

from __future__ import annotations

# The configuration frame, long format, one row per value seen: key, value (text as logged),
# status (``seen`` | ``derived`` | ``default``), time, source, line, note, run (the server run of
# the log line; null for other sources and defaults, which are the bundle's). The frame an analysis
# holds has one more column, put on where every engine's rows come together (engines.config_engines):
# ``engine_kind`` (String), the engine whose configuration the row is (CONFIG_OWNER).
CONFIG_SCHEMA = {
    "key": "String",
    "value": "String",
    "status": "String",
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "source": "String",
    "line": "UInt32",
    "note": "String",
    "run": "Int32",
}
CONFIG_OWNER = {"engine_kind": "String"}


# The stats frame: one row per periodic stats line (vLLM's V0/V1 lines, SGLang's batch lines).
STATS_SCHEMA = {
    "time": "Datetime(time_unit='us', time_zone='UTC')",
    "time_precision": "String",
    "stream": "Int32",
    "seq": "UInt32",
    "engine": "String",
    # how many engines the line's figures sum: 1 for one engine's line, N for a line that says it sums
    # N ("N Engines Aggregated"), null for one that sums every engine without saying how many (vLLM's
    # Rust frontend): its running count is one engine's only where the bundle runs one engine
    "engines": "Int64",
    "family": "String",
    "prompt_tput": "Float64",
    "gen_tput": "Float64",
    "running": "Int64",
    "waiting": "Int64",
    "swapped": "Int64",
    "deferred": "Int64",
    "preemptions": "Int64",
    "kv_usage": "Float64",
    "cpu_kv_usage": "Float64",
    "prefix_hit": "Float64",
    "source": "String",
    "line": "UInt32",
}
