"""The human summary, for stderr: the answer first, then what to change, then the rest.

Two parts (``summary_lines``): the *head* (the headline, which says how many and why in vLLM's
words, and the top change) and the *rest*. On a terminal ``preemptlog analyze`` shows the head
before the table (at the top of the paged text when the table is paged) and the rest after it;
elsewhere both follow the data on stderr. By default the rest is short (where the count comes
from, the cost, the filter, the warnings, and one line saying what ``-v`` adds); ``-v`` gives every
note. Notes of one kind (the same sentence about other files or numbers) are one line with a
count. Every line is wrapped at word boundaries to the width (the terminal's, 80 in a pipe) with
a hanging indent, so no line is wider than the screen.
"""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING, Any

from ..engines import metric_owners, noun, possessive
from ..events.pressure import running_words
from ..outputs.console import text_console
from ..outputs.safe import neutralise
from .summary import GATE_WORDS, _pressure_words, fix_line, top_fix
from .view import filtered_headline

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from ..model.result import Analysis

PIPE_WIDTH = 80  # the width of the summary off a terminal
MAX_WARNINGS = 3  # kinds of warning shown without -v


def wrap(value: str, width: int, *, indent: int = 0, hang: int = 2) -> list[str]:
    """``value`` (control characters made visible) cut at word boundaries into lines of at most
    ``width`` characters: the first indented by ``indent``, the others by ``indent + hang``. A word
    longer than a line (a long path) is cut; hyphens never are (``G1-kv-space`` stays whole)."""
    width = max(width, 20)
    return textwrap.wrap(
        " ".join(neutralise(value).split()),
        width=width,
        initial_indent=" " * indent,
        subsequent_indent=" " * (indent + hang),
        break_on_hyphens=False,
        break_long_words=True,
    ) or [" " * indent]


def _lines(value: str, width: int, *, indent: int = 0, style: str | None = None, lead: tuple[str, str] | None = None):
    """Wrapped rich Text lines; ``style`` for all of it, ``lead`` (prefix, style) styles the prefix."""
    from rich.text import Text

    out = []
    for i, ln in enumerate(wrap(value, width, indent=indent)):
        t = Text(ln, style=style or "")
        if i == 0 and lead and ln.lstrip().startswith(lead[0]):
            start = len(ln) - len(ln.lstrip())
            t.stylize(lead[1], start, start + len(lead[0]))
        out.append(t)
    return out


def kind_of(note: str) -> str:
    """A note's kind: its words with numbers, times and file names taken out (two notes that say the
    same of other files or counts are of one kind)."""
    s = re.sub(r"\S*[/\\]\S*", "<file>", note)
    return re.sub(r"\d+(?:[.:,]\d+)*", "#", s)


def collapse(notes: list[str]) -> list[tuple[str, int]]:
    """Notes of one kind (kind_of) as (the first of them, how many), in the order of their first."""
    order: list[str] = []
    groups: dict[str, list[str]] = {}
    for n in notes:
        k = kind_of(n)
        if k not in groups:
            order.append(k)
            groups[k] = []
        groups[k].append(n)
    return [(groups[k][0], len(groups[k])) for k in order]


def _times(text: str, n: int) -> str:
    return text if n == 1 else f"{text} (and {n - 1} more like it)"


def headline_text(s: dict[str, Any]) -> str:
    """The headline as a person reads it: the summary's own, except that a filtered view says how
    many it shows of how many first and drops the figures of the whole bundle (view.filtered_headline;
    the rate per received request)."""
    h = filtered_headline(s)
    if s.get("filters") and s.get("preemption_rate") is not None:
        h = re.sub(r" \(\d+\.\d+ per received request\)", "", h, count=1)
    return h


def fix_brief(x: dict[str, Any], total: int | None = None) -> str:
    """``option current -> suggested: verified by replay ... ; addresses N event(s)``: the change and
    whether it was checked; the why and the effect are in ``-v`` (summary.fix_line). ``total``: the
    incident's events (a change that addresses them all does not say so)."""

    full = fix_line(x)
    effect = str(x.get("expected_effect") or "")
    what = full.split(f" ({effect}", 1)[0] if effect and f" ({effect}" in full else full
    if x.get("status") == "verified" or x.get("verified"):
        how = str(x.get("verified") or "verified")
    elif x.get("status") == "not verified" and x.get("basis"):  # estimated: how, and that it is not checked
        how = f"{x['basis']}; not verified"
    elif x.get("status") == "not verified":
        how = "not verified (-v says why)"
    else:
        how = ""
    n = x.get("events_addressed")
    tail = "; ".join(p for p in (how, f"addresses {n} event(s)" if n and n != total else "") if p)
    return what + (f": {tail}" if tail else "")


def _count_line(s: dict[str, Any], gates: str | None = None, *, verbose: bool = True) -> str:
    """Where the count comes from: the events by kind (and their ``gates`` when the headline does not
    name them), and the sources the reconciled count is made of."""

    if not s["count_visible"]:
        nv = s.get("not_visible") or {}
        remedy = nv.get("remedy")
        return "count: not visible in this bundle, which is not a count of 0" + (
            f"; to see it, {remedy[0].lower() + remedy[1:]}" if remedy else ""
        )
    k = s["by_kind"]
    if verbose:
        parts = [f"{k[name]} {name}" for name in KIND_WORDS if k[name]]
    else:  # the kinds in words (an interval count, a reconstruction, are this tool's words)
        parts = [KIND_WORDS[name].format(n=k[name]) for name in KIND_WORDS if k[name]]
        srcs = [str(x["source"]) for x in (s.get("reconciliation") or {}).get("sources") or [] if x.get("in_events")]
        if [n for n in KIND_WORDS if k[n]] == ["interval"] and all(x.startswith("prometheus") for x in srcs) and srcs:
            parts = []  # counted by the engine's counter: the source says it (below)
    if gates:
        parts.append(gates)
    detail = f" ({'; '.join(parts)})" if parts else ""
    line = f"{s['events']} {noun(s.get('engine_kinds') or {}, 1)} event(s){detail}"
    f = s.get("filters")
    if f:
        return line + f", the {f['kept']} of {f['total']} kept by the filter ({f['text']})"
    rec = s.get("reconciliation") or {}
    # the sources the count is made of: their events, or the log's events that stand for what they counted
    used = [x for x in rec.get("sources") or [] if x.get("in_events") or x.get("same_as_log")]
    if rec.get("total") is not None and used:
        kinds = s.get("engine_kinds") or {}
        names = [
            source_name(x)
            if verbose
            # whose counter: the engines of the counters it read (their metric names), else the bundle's
            else SOURCE_WORDS.get(str(x["source"]), str(x["source"])).format(
                whose=possessive(metric_owners(x["metrics"]) if x.get("metrics") else kinds)
            )
            for x in used
        ]
        names = list(dict.fromkeys(names))  # one name per kind of source (two engines' single readings)
        if verbose:
            line += f"; counted {rec['total']} ({rec['quality']}) from " + ", ".join(names)
        else:
            how = "at least " if "lower bound" in (rec["quality"], rec.get("count_quality")) else ""
            line += (
                f"; {how}{rec['total']} counted by "
                + ", ".join(names)
                + (" (exact)" if rec["quality"] == "exact" else "")
                + (
                    f" (capped: {s['events']} of them are events, a reconstruction of part of the count)"
                    if rec["quality"] == "capped"
                    else ""
                )
            )
    return line


# The event kinds and the count's sources in words (the short summary's; -v and the JSON keep the names).
KIND_WORDS = {
    "logged": "{n} logged",
    "reconstructed": "{n} between the logged ones, from total_num_cumulative_preemption",
    "interval": "{n} counted per interval, not one by one",
    "marker": "{n} PREEMPTED lines",
    "record": "{n} plugin records",
}


def source_name(x: dict[str, Any]) -> str:
    """A count source's name as -v shows it: the JSON's key, the counter's own metric names in place of the
    key's vLLM one where the source read others (SGLang's retraction counter is not vllm:num_preemptions_total)."""
    name = str(x["source"])
    metrics = x.get("metrics") or []
    if metrics and name.startswith("prometheus counter (") and name.endswith(")"):
        return f"prometheus counter ({', '.join(str(m) for m in metrics)})"
    return name


SOURCE_WORDS = {  # {whose}: the engine's, as registry.possessive names it (SGLang's counter is SGLang's)
    "prometheus counter, single reading": "{whose} counter in one /metrics reading",
    "prometheus counter (vllm:num_preemptions_total)": "{whose} counter in the /metrics scrapes",
    "log 'Preemptions: N' stats fields": "the stats lines' 'Preemptions: N'",
    "log V0 warnings (total_num_cumulative_preemption)": "vLLM V0's warnings",
    "log lines marked PREEMPTED (patched scheduler, hooks)": "the PREEMPTED lines",
    "prometheus histogram (vllm:request_num_preemptions)": "{whose} per-request histogram",
}


def _know_more_brief(items: list[dict[str, Any]], width: int) -> str:
    """``To know more, add: DEBUG logging; the plugin's records``: each addition named by its words before
    their first parenthesis, as many as fit one line of ``width``, then ``+N more (-v)`` (what each
    settles and how to turn it on are -v's)."""
    names = list(dict.fromkeys(str(x["add"]).split(" (", 1)[0].split(", or ", 1)[0] for x in items))
    line = "To know more, add: " + names[0]
    for i, name in enumerate(names[1:], start=1):
        rest = len(names) - i - 1
        tail = f" +{rest} more (-v)" if rest else ""
        if len(line) + 2 + len(name) + len(tail) > width:
            return line + f"; +{len(names) - i} more (-v)"
        line += "; " + name
    return line


def _n(count: int, noun: str) -> str:
    """``1 note``, ``3 notes``."""
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _more_line(s: dict[str, Any], shown_warnings: int, warnings: int) -> str | None:
    """What -v adds, counted and short: ``-v adds: 3 more changes, 1 span, 5 notes, ...``; ``warnings``:
    how many -v prints (the headline's "Not one incident" is not printed again as a warning)."""
    items = []
    fixes = (s.get("fixes") or [])[1:]
    if fixes:
        items.append(_n(len(fixes), "more change"))
    piv = s.get("pressure_intervals") or []
    if piv:
        items.append(_n(len(piv), "span"))
    if s.get("requests_preempted_more_than_once"):
        items.append("repeats")
    rec = s.get("reconciliation") or {}
    if rec.get("sources"):
        items.append("count per source")
    if s.get("assumptions"):
        items.append(_n(len(s["assumptions"]), "assumption"))
    notes = collapse(list(s.get("notes") or []))
    if notes:
        items.append(_n(len(notes), "note"))
    hidden = warnings - shown_warnings
    if hidden > 0:
        items.append(_n(hidden, "more warning"))
    if not items:
        return None
    return "-v adds: " + ", ".join(items)


def first_clause(text: str) -> str:
    """``text`` up to its first ``"; "`` outside parentheses: a headline's count and its cause's first
    words, whole (a count's own words hold "; " inside their parentheses: "at least 7 preemptions
    (counted by vLLM's counter up to 10:00:30; the log runs to 10:05:40: not counted after)")."""
    depth = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif depth == 0 and text.startswith("; ", i):
            return text[:i]
    return text


def unit_line(name: str, unit: Analysis) -> str:
    """One incident of a bundle of several, in one sentence: its name, its count (or that it is not
    visible, and the signs of pressure), its cause's first words and its top change."""

    s = unit.summary()
    said = first_clause(str(s["headline"]))
    if not s["count_visible"]:
        said = said.replace("Preemptions: not visible", "count not visible")
        pw = _pressure_words(s.get("cause") or {})
        if pw:
            said += f"; KV cache at the ceiling ({pw})"
    fixes = s.get("fixes") or []
    if fixes:
        brief = fix_brief(fixes[0]).split(": ", 1)[0]
        said += f"; change: {brief}"
    return f"{name}: {said}"


MAX_UNITS = 12  # incidents listed one line each; the rest counted (--each gives them all)


def _unit_lines(units: list[tuple[str, Analysis | None]], width: int) -> list[Text]:
    """One line per incident, those with preemptions first, then those with pressure or a change; the
    quiet ones named together, one line per kind of quiet: none counted and no sign of pressure, a
    count not visible (a stock V1 log) and no sign of pressure, not analysed; the incidents past
    ``MAX_UNITS`` named on a line that says they have preemptions, pressure or a change (--each)."""

    def rank(u: tuple[str, Analysis | None]) -> int:
        if u[1] is None:
            return 3
        s = u[1].summary()
        if s["count_visible"] and s["events"]:
            return 0
        return 1 if (s.get("fixes") or (s.get("cause") or {}).get("pressure")) else 2

    def short(name: str) -> str:
        """The fewest trailing parts of a unit's name that no other unit's name ends with (a file's name
        alone, ``b/vllm.log`` beside ``a/vllm.log``)."""
        parts = name.split("/")
        for k in range(1, len(parts) + 1):
            tail = "/".join(parts[-k:])
            if not any(o != name and (o == tail or o.endswith("/" + tail)) for o, _ in units):
                return tail
        return name

    def names(group: list[tuple[str, Analysis | None]]) -> str:
        return ", ".join(short(n) for n, _ in group[:6]) + (f" and {len(group) - 6} more" if len(group) > 6 else "")

    ranked = sorted(units, key=rank)  # stable: the order of their start within a rank
    out: list[Text] = []
    loud = [u for u in ranked if rank(u) < 2]
    for name, unit in loud[:MAX_UNITS]:
        assert unit is not None
        out += _lines(unit_line(name, unit), width, indent=2)
    more = loud[MAX_UNITS:]
    if more:
        out += _lines(
            f"{len(more)} more with preemptions, pressure or a change (--each gives each one's answer): {names(more)}",
            width,
            indent=2,
        )
    quiet = [u for u in ranked if rank(u) == 2]
    counted = [u for u in quiet if u[1] is not None and u[1].summary()["count_visible"]]
    hidden = [u for u in quiet if u not in counted]
    others = " in the others" if loud else ""
    if counted:
        out += _lines(f"no preemption counted and no sign of pressure{others}: {names(counted)}", width, indent=2)
    if hidden:
        # their headline's reason when they share one ("(V1 log: stock builds never print a preemption count)")
        why = {
            first_clause(str(u[1].summary()["headline"])).removeprefix("Preemptions: not visible").strip()
            for u in hidden
            if u[1] is not None
        }
        reason = f" {next(iter(why))}" if len(why) == 1 and next(iter(why)).startswith("(") else ""
        out += _lines(f"count not visible{reason} and no sign of pressure{others}: {names(hidden)}", width, indent=2)
    lost = [u for u in ranked if rank(u) == 3]
    if lost:
        out += _lines(f"not analysed: {names(lost)}", width, indent=2)
    return out


def summary_lines(
    analysis: Analysis,
    *,
    width: int = PIPE_WIDTH,
    verbose: bool = False,
    units: list[tuple[str, Analysis]] | None = None,
) -> tuple[list[Text], list[Text]]:
    """(head, rest) of the summary as wrapped lines (summary's words; see the module docstring).
    ``units``: the incidents of a bundle of several, each analysed on its own (one line each)."""

    s = analysis.summary()
    head = _lines(headline_text(s), width, style="bold")
    fixes = s.get("fixes") or []
    if s.get("incidents") and units:  # several incidents: one line each, no mixed change
        head += _unit_lines(units, width)
        fixes = []
    elif fixes:
        top = top_fix(s) if verbose else fix_brief(fixes[0], total=s.get("events"))
        head += _lines(f"Top fix: {top}", width, lead=("Top fix:", "bold"))
    rest: list[Text] = []

    def put(value: str, indent: int = 2, **kw: Any) -> None:
        rest.extend(_lines(value, width, indent=indent, **kw))

    several = bool(s.get("incidents") and units)  # each incident's own answer is in the head
    if several:
        pass
    elif verbose and s.get("to_know_more_line"):
        put(s["to_know_more_line"], indent=0)
    elif s.get("to_know_more"):
        put(_know_more_brief(s["to_know_more"], width), indent=0)
    cost = s.get("findings_headline") or ""
    if not verbose:  # "no stall" says nothing to act on: -v's
        cost = "; ".join(p for p in cost.split("; ") if p != "no stall")
    if several:  # a cost of several incidents added together is no one's
        cost = ""
    if cost and not s.get("filters"):  # the cost is the whole bundle's
        put(f"cost: {cost}")
    f = s.get("filters")
    if f:
        put(
            f"filtered ({f['text']}): {f['kept']} of {f['total']} event(s) shown; the cost, the count per source "
            "and the notes are the whole bundle's (-v)"
        )
    if verbose or (s["count_visible"] and not several):  # not visible: the headline says so (once)
        put(_count_line(s, _gates_line(s, head), verbose=verbose))
    warnings = collapse([w for w in s["warnings"] if not (several and "not one incident" in w)])
    shown = warnings if verbose else warnings[:MAX_WARNINGS]
    if not verbose:
        for w, n in shown:
            put(f"warning: {_times(w, n)}", lead=("warning:", "red"))
        more = _more_line(s, len(shown), len(warnings))
        if more:
            put(more, style="dim")
        return head, rest
    for x in fixes[1:5]:
        put(f"fix {x['rank']}: {fix_line(x)}")
    if s["requests_received"]:
        rate = s["preemption_rate"]
        if rate is not None and not f:
            put(f"{s['requests_received']} request(s) received; preemptions per received request: {rate:.4f}")
        else:
            put(f"{s['requests_received']} request(s) received")
    if s["first_event"]:
        put(f"events from {s['first_event']} to {s['last_event']}")
    unplaced = (s.get("cause") or {}).get("unplaced") or 0
    if s["events_without_time"] - unplaced > 0:
        put(f"{s['events_without_time'] - unplaced} event(s) have no timestamp in the log")
    before_log = (s.get("cause") or {}).get("unplaced_before_log") or 0
    if unplaced - before_log:
        whose = possessive(s.get("engine_kinds") or {})
        put(
            f"{unplaced - before_log} event(s) counted by {whose} /metrics counter since the engine started, not "
            "placed in time"
        )
    if before_log:
        put(
            f"{before_log} event(s) counted by the first V0 warning's total_num_cumulative_preemption before the log "
            "began (the warning 50 before it is not in the log), not placed in time"
        )
    rep = s["requests_preempted_more_than_once"]
    if rep:
        top = ", ".join(f"{r['request_id']} x{r['count']}" for r in rep[:5])
        put(f"preempted more than once: {top}" + (f" and {len(rep) - 5} more" if len(rep) > 5 else ""))
    st = s["stats"]
    if st["lines"]:
        kv = "no KV cache usage read" if st["max_kv_usage"] is None else f"max KV cache usage {st['max_kv_usage']}%"
        put(f"{st['lines']} stats line(s); {kv}, max waiting {st['max_waiting']}")
    rec = s.get("reconciliation") or {}
    if len(rec.get("sources") or []) > 1 or any(x["source"].startswith("prometheus") for x in rec.get("sources") or []):
        put(f"reconciled count: {rec['total']} ({rec['quality']}): {rec['rule']}")
        for src in rec["sources"]:
            kept = f", {src['in_events']} in the events" if src.get("in_events") is not None else ""
            put(f"{source_name(src)}: {src['count']}{kept}; {src['note']}", indent=4)
    piv = s.get("pressure_intervals") or []
    if piv:
        put(
            f"{len(piv)} suspected pressure interval(s) (KV cache >= {s['pressure_ceiling']:g}% with requests "
            "waiting; evidence, not counted):",
            lead=(f"{len(piv)} suspected pressure interval(s)", "bold"),
        )
        for r in piv:
            ev = r["evidence"]
            cited = ", ".join(ev[:3]) + (f" (+{len(ev) - 3} more)" if len(ev) > 3 else "")
            counted = (
                f"; {r['counted_events_in_interval']} counted event(s) in it" if r["counted_events_in_interval"] else ""
            )
            running = running_words(r["max_running"], r["min_running"])
            put(
                f"engine {r['engine']} {r['start']} to {r['end']} ({r['series']}): peak KV {r['peak_kv_usage']:.1f}%, "
                f"up to {r['max_waiting']} waiting{', ' + running if running else ''}{counted}; {cited}",
                indent=4,
            )
    for a in s["assumptions"]:
        scope = f" ({a['scope']})" if a["scope"] != "bundle" else ""
        put(f"assumed {a['topic']}{scope}: {a['value']} from {a['source']}")
    docs = [x["file"] for x in s["inputs"] if x["kind"] == "document"]
    if docs:
        more = f" and {len(docs) - 8} more" if len(docs) > 8 else ""
        put(
            f"not read: {', '.join(docs[:8])}{more} (a document, not a log: the lines it quotes add no events; "
            "--file-kind FILE=vllm-log reads one)"
        )
    unknown = [x for x in s["inputs"] if x["kind"] in ("unknown", "binary", "empty", "unreadable")]
    if unknown:
        names = ", ".join(f"{x['file']} ({x['kind']})" for x in unknown[:8])
        more = f" and {len(unknown) - 8} more" if len(unknown) > 8 else ""
        put(f"not recognised: {names}{more}")
    for note, n in collapse(list(s["notes"])):
        put(f"note: {_times(note, n)}", lead=("note:", "yellow"))
    for w, n in shown:
        put(f"warning: {_times(w, n)}", lead=("warning:", "red"))
    said = " ".join(t.plain for t in head + rest)
    if "guide" in said or "debug hook" in said or "debug-hook" in said:
        put(GUIDE, style="dim")  # introduced once, where the words are used
    return head, rest


GUIDE = (
    "the guide: the field guide to vLLM preemptions, whose four gates (G1 KV space, G2 batch variance, G3 "
    "queue overflow, G4 prefix conflict) preemptlog's rules encode; its patched scheduler prints the "
    "debug-hook lines ([SCHEDULER], [BATCH]) its gates are judged on. Upstream vLLM preempts only when a "
    "KV-block allocation fails (G1)."
)


def _gates_line(s: dict[str, Any], head: list[Text]) -> str | None:
    """``G1-kv-space 242 (capacity 242)``: the gates by their ids (the table's and
    ``--gate``'s), when the headline does not already give them."""

    by_gate = {g: n for g, n in (s.get("by_gate") or {}).items() if n}
    said = " ".join(t.plain for t in head)
    if not by_gate or any(f"{g.split('-')[0]} {GATE_WORDS.get(g, g)}" in " ".join(said.split()) for g in by_gate):
        return None
    subs = s.get("g1_sub_kinds") or {}
    parts = []
    for g, n in sorted(by_gate.items(), key=lambda gn: (-gn[1], gn[0])):
        part = f"{g} {n}"
        top = sorted(((v, k) for k, v in subs.items() if k != "None"), reverse=True) if g == "G1-kv-space" else []
        if top:
            part += " (" + ", ".join(f"{k} {v}" for v, k in top) + ")"
        parts.append(part)
    return ", ".join(parts)


def summary_width(console: Console) -> int:
    """The terminal's width on a terminal, 80 elsewhere."""
    return console.width if console.is_terminal else PIPE_WIDTH


def print_lines(lines: list[Text], console: Console) -> None:
    for ln in lines:
        console.print(ln, soft_wrap=True, highlight=False)


def render_lines(lines: list[Text], *, color: bool) -> bytes:
    """The lines as text with ANSI styles when ``color`` (what the pager shows above the table)."""
    import io

    buf = io.StringIO()
    print_lines(lines, text_console(buf, width=10_000, color=color))
    return buf.getvalue().encode("utf-8", "replace")


def print_summary(analysis: Analysis, console: Console, *, verbose: bool = False, head: bool = True) -> None:
    """The summary on ``console``: the head (unless already shown, ``head=False``) and the rest."""
    top, rest = summary_lines(analysis, width=summary_width(console), verbose=verbose)
    print_lines((top if head else []) + rest, console)
