"""Grafana annotations: one region per incident row (bundle x server x engine).

Grafana's annotation HTTP API (``POST /api/annotations``, still served in Grafana 13): ``time``
and ``timeEnd`` in epoch milliseconds (a region when both), ``tags``, ``text``, and
``dashboardUID``/``panelId`` to pin it to a panel. The default panel is vLLM's own KV-cache
dashboard's "Preemptions / s by engine" (``dashboardUID`` ``vllm-kv-cache``, ``panelId`` 10), the
one an on-call engineer already looks at; ``dashboard_uid=None`` makes org-wide annotations that
show through a tag-filtered annotation query (``tags: preemptlog``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any

import polars as pl

from ...errors import OutputError, UsageError

DASHBOARD_UID = "vllm-kv-cache"
PANEL_ID = 10
TOKEN_ENV = "GRAFANA_TOKEN"


def _ms(t: datetime | None) -> int | None:
    return None if t is None else int(t.timestamp() * 1000)


def make_annotations(
    incidents: pl.DataFrame, *, dashboard_uid: str | None = DASHBOARD_UID, panel_id: int | None = PANEL_ID
) -> list[dict[str, Any]]:
    """One annotation per incident row with a time: the events' span (the log's when the count is
    not visible), the headline (and the top fix) as text, tags ``preemptlog``, ``cause:``,
    ``mechanism:``, ``server:``, ``engine:``, ``model:``."""
    out: list[dict[str, Any]] = []
    engines = incidents.group_by("bundle_id", "server").len() if incidents.height else None
    many = {(r[0], r[1]) for r in engines.filter(pl.col("len") > 1).iter_rows()} if engines is not None else set()
    for r in incidents.sort("server", "engine", "bundle_id").iter_rows(named=True):
        start = r["first_event"] or r["log_first"]
        end = r["last_event"] or r["log_last"] or start
        if start is None:
            continue
        tags = ["preemptlog", f"server:{r['server']}", f"engine:{r['engine']}"]
        if r["count_visible"] is False:
            tags.append("count:not-visible")
        if r["top_cause"]:
            tags.append(f"cause:{r['top_cause']}")
        if r["top_mechanism"]:
            tags.append(f"mechanism:{r['top_mechanism']}")
        if r["model"]:
            tags.append(f"model:{r['model']}")
        text = r["headline"] or ""
        if (r["bundle_id"], r["server"]) in many:
            n = "not visible" if r["preemptions"] is None else f"{r['preemptions']} preemption(s)"
            text = f"engine {r['engine']}: {n}. {text}"
        if r["top_fix"]:
            text += f"\nTop fix: {r['top_fix']}"
        a: dict[str, Any] = {"time": _ms(start), "timeEnd": _ms(end), "tags": tags, "text": f"{r['server']}: {text}"}
        if dashboard_uid:
            a["dashboardUID"] = dashboard_uid
            if panel_id is not None:
                a["panelId"] = panel_id
        out.append(a)
    return out


def left_out(incidents: pl.DataFrame) -> str:
    """``; N incident row(s) left out: ...`` for the rows :func:`make_annotations` cannot place (no
    event and no log line with a time), or ``""``."""
    if not incidents.height:
        return ""
    untimed = incidents.filter(pl.all_horizontal(pl.col(c).is_null() for c in ("first_event", "log_first")))
    if not untimed.height:
        return ""
    servers = ", ".join(str(s) for s in untimed.get_column("server").unique(maintain_order=True).to_list())
    return (
        f"; {untimed.height} incident row(s) left out ({servers}): no time to place them at (neither their "
        "events nor their log lines carry one)"
    )


def post(items: list[dict[str, Any]], url: str, token: str | None, *, timeout: float = 10.0) -> list[int]:
    """POST each annotation to ``<url>/api/annotations`` (Bearer token); the ids Grafana gave."""
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--url {url!r}: not an http(s) URL", hint="e.g. https://grafana.example.com")
    endpoint = url.rstrip("/") + "/api/annotations"
    ids: list[int] = []
    for a in items:
        req = urllib.request.Request(endpoint, data=json.dumps(a).encode("utf-8"), method="POST")
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:200].decode("utf-8", "replace")
            raise OutputError(
                f"{endpoint}: Grafana answered {exc.code} {exc.reason}: {' '.join(detail.split())}",
                hint=f"check the token ({TOKEN_ENV} or --token-env) and its Editor role",
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise OutputError(f"{endpoint}: cannot post ({reason})") from None
        try:
            ids.append(int(json.loads(body or b"{}").get("id")))
        except (ValueError, TypeError, AttributeError):
            pass
    return ids
