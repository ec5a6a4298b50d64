"""The report's findings section (issue 15): recompute over time, the thrash table, stalls,
mechanisms and the capacity arithmetic. Inline SVG only (no request, no script); every string
goes through page.e."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..findings import as_dict
from ..model.findings import recompute_words
from ..render.summary import fix_line
from .escape import e

if TYPE_CHECKING:
    from ..analysis import Analysis

W, H, PAD = 720, 160, 30


def _bars(rows: list[dict[str, Any]]) -> str:
    """One bar per minute: tokens recomputed (hatched where only a lower bound is known); the
    tokens processed in that minute as a tick above, when the stats lines give them."""

    vals = [r for r in rows if r.get("tokens") is not None or r.get("processed_tokens") is not None]
    if not vals:
        return '<p class="muted">No minute with known recomputed tokens.</p>'
    top = max(max(r.get("tokens") or 0, r.get("processed_tokens") or 0) for r in vals) or 1
    n = len(rows)
    bw = max(2.0, (W - 2 * PAD) / max(n, 1) - 2)
    out = [
        (
            f'<svg id="recompute-chart" width="{W}" height="{H + 24}" viewBox="0 0 {W} {H + 24}" role="img" '
            'aria-label="tokens recomputed per minute">'
        ),
        (
            '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
            '<rect width="3" height="6" fill="#c0504d"/></pattern></defs>'
        ),
        f'<line x1="{PAD}" y1="{H}" x2="{W - PAD}" y2="{H}" stroke="#999"/>',
    ]
    for i, r in enumerate(rows):
        x = PAD + i * (bw + 2)
        tok = r.get("tokens")
        if tok is not None:
            h = (H - 10) * tok / top
            fill = "url(#hatch)" if r.get("tokens_are_lower_bound") else "#c0504d"
            share = f", {r['share']:.0%} of the tokens computed" if r.get("share") is not None else ""
            least = "at least " if r.get("tokens_are_lower_bound") else ""
            out.append(
                f'<rect x="{x:.1f}" y="{H - h:.1f}" width="{bw:.1f}" height="{h:.1f}" fill="{fill}">'
                f"<title>{e(r['minute'])}: {least}{e(tok)} tokens recomputed by {e(r['preemptions'])} "
                f"preemption(s){e(share)}</title></rect>"
            )
        proc = r.get("processed_tokens")
        if proc is not None:
            y = H - (H - 10) * proc / top
            out.append(
                f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x + bw:.1f}" y2="{y:.1f}" stroke="#1d2330" '
                f'stroke-width="2"><title>{e(r["minute"])}: {e(round(proc))} tokens processed</title></line>'
            )
    if rows:
        out.append(f'<text x="{PAD}" y="{H + 16}" font-size="11" fill="#5b6475">{e(rows[0]["minute"])}</text>')
        out.append(
            f'<text x="{W - PAD}" y="{H + 16}" font-size="11" fill="#5b6475" text-anchor="end">'
            f"{e(rows[-1]['minute'])}</text>"
        )
    out.append(f'<text x="{PAD}" y="12" font-size="11" fill="#5b6475">max {e(round(top))} tokens per minute</text>')
    out.append("</svg>")
    return "".join(out)


def section(a: Analysis) -> str:
    """``<section id="findings">`` or empty when the analysis has no findings."""

    f = getattr(a, "findings", None)
    if f is None:
        return ""
    d = as_dict(f, a.tz)
    rc, th, st, cap = d["recompute"], d["thrash"], d["stall"], d["capacity"]
    out = ['<section id="findings"><h2>Findings beyond the gates</h2>']
    if d["headline"]:
        out.append(f'<p class="headline">{e(d["headline"])}</p>')
    # Recompute over time.
    out.append("<h3>Recompute cost over time</h3>")
    if rc.get("evaluable"):
        least = "at least " if rc.get("tokens_is_lower_bound") else ""
        share = (
            f" ({rc['share_of_processed']:.1%} of the tokens computed: {round(rc['processed_tokens'])} processed in "
            "the same stats intervals, plus the recomputed ones)"
            if rc.get("share_of_processed") is not None
            else ""
        )
        what = f"{least}{rc['tokens']} tokens recomputed{share}"
        if rc.get("tokens_recomputed_at_most"):  # prefix caching on, no resume record: the lost tokens
            what = recompute_words(rc)
        if rc.get("tokens_is_upper_bound"):  # an engine's own counters (SGLang's): the incident's total
            what = f"at most {rc['tokens']} tokens recomputed ({rc.get('tokens_basis')})"
        out.append(
            f"<p>{e(what)}: {e(rc['preemptions_exact'])} exact, "
            f"{e(rc['preemptions_lower_bound'])} lower bound(s), {e(rc['preemptions_unknown'])} unknown.</p>"
        )
        ps = rc.get("preempted_seconds") or {}
        if ps.get("measured"):
            out.append(
                f'<p class="muted">Time preempted (preempt to next allocation, {e(ps["measured"])} '
                f"victim(s)): median {e(round(ps['median'], 3))} s, max {e(round(ps['max'], 3))} s.</p>"
            )
        out.append(f'<div class="scroll">{_bars(rc.get("per_minute") or [])}</div>')
        out.append(
            '<p class="muted">Bars: tokens recomputed per minute (hatched: at least). Dark ticks: tokens '
            "processed in that minute (throughput x interval of the stats lines).</p>"
        )
    else:
        out.append(f'<p class="muted">Not evaluable: {e(rc.get("not_evaluable"))}.</p>')
    # Thrash.
    out.append("<h3>Requests preempted more than once</h3>")
    if th.get("evaluable"):
        dist = th["distribution"]
        ref = th["reference"]
        share = th.get("requests_preempted_share")
        once = th.get("preempted_once_share")
        cells = "".join(f'<td class="num">{e(dist[k])}</td>' for k in ("1", "2", "3-5", "6+"))
        share_s = f"{share:.1%}" if share is not None else "unknown"
        once_s = f"{once:.0%}" if once is not None else ""
        ref_share = f"{ref['requests_preempted_share']:.1%}"
        ref_once = f"{ref['preempted_once_share']:.0%}"
        out.append(
            "<table><tr><th></th><th>1</th><th>2</th><th>3-5</th><th>6+</th><th>preempted share</th>"
            "<th>once share</th><th>max</th></tr>"
            f"<tr><td>this bundle</td>{cells}"
            f'<td class="num">{e(share_s)}</td><td class="num">{e(once_s)}</td>'
            f'<td class="num">{e(th["max_preemptions_per_request"])}</td></tr>'
            f'<tr class="muted"><td>reference</td><td colspan="4">{e(ref["source"])}</td>'
            f'<td class="num">{e(ref_share)}</td><td class="num">{e(ref_once)}</td>'
            f'<td class="num">{e(ref["max_preemptions_per_request"])}</td></tr></table>'
        )
        rows = th.get("ranking") or []
        if rows:
            out.append(
                '<table id="thrash-table"><tr><th>request</th><th>preemptions</th><th>tokens recomputed</th>'
                "<th>first</th><th>last</th><th>finished</th><th>first line</th></tr>"
            )
            for r in rows[:50]:
                tok = r["tokens_recomputed"]
                tok_s = "unknown" if tok is None else (f">= {tok}" if r["tokens_is_lower_bound"] else str(tok))
                out.append(
                    f'<tr><td class="mono">{e(r["request_id"])}</td><td class="num">{e(r["preemptions"])}</td>'
                    f'<td class="num">{e(tok_s)}</td><td class="mono t">{e(r["first"])}</td>'
                    f'<td class="mono t">{e(r["last"])}</td><td>{e(r["finished"])}</td>'
                    f'<td class="mono">{e(r["first_src"])}</td></tr>'
                )
            out.append("</table>")
        else:
            out.append('<p class="muted">No request was preempted more than once.</p>')
    else:
        out.append(f'<p class="muted">Not evaluable per request: {e(th.get("not_evaluable"))}.</p>')
    hist = th.get("histogram") or {}
    if hist.get("distribution"):
        dist = hist["distribution"]
        out.append(
            f"<p>vLLM's own histogram {e(hist['metric'])} ({e(hist['window'])}, {e(hist['first_line'])} .. "
            f"{e(hist['last_line'])}): {e(hist['requests_finished'])} finished request(s); preempted 0-1 times: "
            f"{e(dist['0-1'])}, 2: {e(dist['2'])}, 3-5: {e(dist['3-5'])}, 6+: {e(dist['6+'])}; at most "
            f"{e(hist['max_preemptions_per_request_at_most'])} times.</p>"
        )
    elif hist.get("buckets"):  # a deployment's own bucket bounds (--custom-histogram-buckets): its ranges
        ranges = ", ".join(f"{k}: {v}" for k, v in hist["buckets"].items())
        at_most = hist.get("max_preemptions_per_request_at_most")
        out.append(
            f"<p>vLLM's own histogram {e(hist['metric'])} ({e(hist['window'])}, {e(hist['first_line'])} .. "
            f"{e(hist['last_line'])}; the deployment's bucket bounds {e(', '.join(hist.get('bounds') or []))}): "
            f"{e(hist['requests_finished'])} finished request(s) by times preempted: {e(ranges)}"
            + (f"; at most {e(at_most)} times" if at_most is not None else "")
            + ".</p>"
        )
    # Stall.
    out.append("<h3>Stall, not preemption</h3>")
    if st.get("evaluable"):
        spans = st.get("spans") or []
        if spans:
            out.append(
                "<table><tr><th>engine</th><th>start</th><th>end</th><th>seconds</th><th>stats lines</th>"
                "<th>max waiting</th><th>lines</th></tr>"
            )
            for s in spans:
                out.append(
                    f'<tr><td>{e(s["engine"])}</td><td class="mono t">{e(s["start"])}</td>'
                    f'<td class="mono t">{e(s["end"])}</td><td class="num">{e(s["seconds"])}</td>'
                    f'<td class="num">{e(s["stats_lines"])}</td><td class="num">{e(s["max_waiting"])}</td>'
                    f'<td class="mono">{e(s["first_line"])} .. {e(s["last_line"])}</td></tr>'
                )
            out.append("</table>")
        else:
            out.append(
                "<p>No stall: no two stats lines in a row with requests waiting, no generation and Running 0 "
                "or flat.</p>"
            )
    else:
        out.append(f'<p class="muted">Not evaluable: {e(st.get("not_evaluable"))}.</p>')
    nf = st.get("never_fits") or {}
    for item in nf.get("items") or []:
        out.append(f'<p class="warn">{e(item["text"])} ({e("; ".join(item["inputs"]))})</p>')
    # Mechanisms.
    if d["mechanisms"]:
        out.append("<h3>vLLM's own mechanism</h3><table><tr><th>mechanism</th><th>events</th></tr>")
        for m, n in d["mechanisms"].items():
            out.append(f'<tr><td>{e(m)}</td><td class="num">{e(n)}</td></tr>')
        out.append("</table>")
    # Capacity.
    out.append("<h3>Capacity arithmetic</h3>")
    pool = cap.get("pool")
    if pool:
        peak = cap.get("peak_demand")
        out.append(
            f"<p>KV pool: {e(pool['tokens'])} tokens"
            + (f" ({e(pool['blocks'])} blocks of {e(pool['block_size'])})" if pool.get("blocks") else "")
            + f" — {e('; '.join(pool['inputs']))}.</p>"
        )
        out.append(
            f"<p>Peak demand: {e(peak['text'])}.</p>"
            if peak
            else f'<p class="muted">Peak demand not evaluable: {e(cap.get("peak_not_evaluable"))}.</p>'
        )
        fixes = cap.get("fixes") or []
        if fixes:
            out.append(
                "<ol>"
                + "".join(
                    f'<li>{e(fix_line(x))}<br><span class="muted">{e(x["text"])}; inputs: '
                    f"{e('; '.join(x['inputs']))}</span></li>"
                    for x in fixes
                )
                + "</ol>"
            )
    else:
        out.append(f'<p class="muted">Not evaluable: {e(cap.get("not_evaluable"))}.</p>')
    out.append("</section>")
    return "\n".join(out)
