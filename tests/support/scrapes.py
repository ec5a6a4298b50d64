"""Hand-written vLLM /metrics pages (tests of the counter's readings: stdin, resets)."""

from __future__ import annotations


def page(engines: dict[str, tuple[float, float | None]], openmetrics: bool = False, gauges: bool = True) -> str:
    """One /metrics page: per engine label, (counter value, its _created or None), with the gauges
    vLLM exposes beside them; OpenMetrics names the counter family without ``_total`` and ends in
    ``# EOF``. Without ``gauges``: the waiting gauge alone (no running count, no KV usage)."""
    if not gauges:
        out = [
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            *(f'vllm:num_requests_waiting{{engine="{e}",model_name="m"}} 3.0' for e in engines),
        ]
        return _counter(out, engines, openmetrics)
    out = [
        "# HELP python_info Python platform information",
        "# TYPE python_info gauge",
        'python_info{implementation="CPython",major="3",minor="11",patchlevel="13",version="3.11.13"} 1.0',
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
    ]
    out += [f'vllm:num_requests_running{{engine="{e}",model_name="m"}} 6.0' for e in engines]
    out += [
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge",
    ]
    out += [f'vllm:num_requests_waiting{{engine="{e}",model_name="m"}} 3.0' for e in engines]
    out += [
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
        "# TYPE vllm:kv_cache_usage_perc gauge",
    ]
    out += [f'vllm:kv_cache_usage_perc{{engine="{e}",model_name="m"}} 0.97' for e in engines]
    return _counter(out, engines, openmetrics)


def _counter(out: list[str], engines: dict[str, tuple[float, float | None]], openmetrics: bool) -> str:
    family = "vllm:num_preemptions" if openmetrics else "vllm:num_preemptions_total"
    out += [f"# HELP {family} Cumulative number of preemption from the engine.", f"# TYPE {family} counter"]
    for e, (value, created) in engines.items():
        out.append(f'vllm:num_preemptions_total{{engine="{e}",model_name="m"}} {value}')
        if openmetrics and created is not None:
            out.append(f'vllm:num_preemptions_created{{engine="{e}",model_name="m"}} {created}')
    if not openmetrics and any(c is not None for _, c in engines.values()):
        out += [
            "# HELP vllm:num_preemptions_created Cumulative number of preemption from the engine.",
            "# TYPE vllm:num_preemptions_created gauge",
        ]
        out += [
            f'vllm:num_preemptions_created{{engine="{e}",model_name="m"}} {c}'
            for e, (_, c) in engines.items()
            if c is not None
        ]
    if openmetrics:
        out.append("# EOF")
    return "\n".join(out) + "\n"


def write_counter_scrapes(folder, at, readings, created) -> None:
    """One bare counter scrape per reading, named ``metrics-<unix time>.prom`` (the scrape's time):
    ``readings`` are (seconds after ``at``, {engine label, or None for a page without one: counter
    value}); each series with its ``_created`` (``created``, a datetime)."""
    from datetime import timedelta

    born = int(created.timestamp())
    for sec, values in readings:
        labels = {e: (f'engine="{e}",model_name="m"' if e is not None else 'model_name="m"') for e in values}
        t = int((at + timedelta(seconds=sec)).timestamp())
        (folder / f"metrics-{t}.prom").write_text(
            "# TYPE vllm:num_preemptions_total counter\n"
            + "".join(f"vllm:num_preemptions_total{{{labels[e]}}} {v}.0\n" for e, v in values.items())
            + "".join(f"vllm:num_preemptions_created{{{labels[e]}}} {born}.0\n" for e in values),
            encoding="utf-8",
        )


def reconciled(bundle) -> tuple[dict, list[dict]]:
    """``analyze BUNDLE --tz UTC`` through the CLI: the json summary's reconciliation and the ndjson events."""
    import json

    from tests.conftest import run_cli

    out = run_cli("analyze", str(bundle), "--tz", "UTC", "-f", "json")
    assert out.returncode == 0, out.stderr
    nd = run_cli("analyze", str(bundle), "--tz", "UTC", "-f", "ndjson")
    assert nd.returncode == 0, nd.stderr
    return json.loads(out.stdout)["summary"]["reconciliation"], [json.loads(x) for x in nd.stdout.splitlines() if x]
