"""What a serving engine's own scheduler code can and cannot do: the one declared table.

Each row is a fact read from the engine's released source (the file is cited, with the lines of
the version named): a way a preemption (vLLM) or retraction (SGLang) can be triggered, the
versions and scheduling policy it holds for, how the victim is chosen, and what it settles for an
event of a stock (upstream) build: the gate, its sub-kind and the mechanism. The facts are
evidence like a log line (docs/engine-facts.md): an event from a stock upstream log
whose engine, version and policy the bundle shows gets its cause from here, unless the bundle
shows another trigger the table names.

The field guide's four gates describe a patched scheduler; a gate no row of an engine settles
cannot trigger a preemption in that engine's upstream code (``not_in_upstream``).

Rows are data (no logic per row); :func:`applicable` picks the rows that hold for an engine,
generation, version and policy; tests/engines/test_engine_facts.py checks the table's shape.
"""

from __future__ import annotations

from dataclasses import dataclass

VLLM = "vllm"
SGLANG = "sglang"

Version = tuple[int, ...]


@dataclass(frozen=True)
class CodeFact:
    """One trigger of a preemption in one engine's upstream code."""

    id: str
    engine: str  # VLLM | SGLANG
    generation: str | None  # "V0" | "V1" (vLLM's engines); None where the engine has one
    since: Version | None  # first release with the behaviour (None: every release read)
    until: Version | None  # last release with it (None: up to the newest read)
    policy: str | None  # the scheduling policy it needs ("fcfs", "priority"); None: any
    trigger: str  # what triggers it, in the engine's words
    victim: str  # how the victim is chosen
    gate: str  # the gate it settles for an event it explains
    sub_kind: str | None
    mechanism: str  # the mechanism name (rules/default.toml [[mechanism]] vocabulary)
    kv_pressure: bool  # is it KV-space pressure (a failed allocation) or something else
    shows_as: str  # what a bundle shows when this trigger (not the default one) happened
    source: str  # the engine's source file, with the version and lines read
    # a regex of a block-table preempt record's ``reason`` that names this trigger (the vLLM plugin's words,
    # vLLM's own reason names, a hand-written record's); None: no record names it (joiner/reset.py)
    record_reason: str | None = None
    # a behaviour one release changed (the rows before and after it split the versions): the row holds
    # only where the bundle shows a version in its range, never for a version the bundle does not show
    needs_version: bool = False

    def holds(self, engine: str, generation: str | None, version: Version | None, policy: str | None) -> bool:
        if engine != self.engine:
            return False
        if self.generation is not None and generation is not None and generation != self.generation:
            return False
        if version is None and self.needs_version:
            return False
        if version is not None:
            if self.since is not None and version < self.since:
                return False
            if self.until is not None and version > self.until:
                return False
        return self.policy is None or policy == self.policy


NEWEST_VLLM_READ = (0, 34, 0)
NEWEST_SGLANG_READ = (0, 5, 23)

# vLLM V1's failed allocation under --scheduling-policy priority, per release: the rows of the
# versions the bundle shows come first (default_trigger takes the first that holds); a bundle
# that does not show its version gets the general row below them.
_V1_PRIORITY_TRIGGER = (
    "a KV-block allocation failed for a running request in the running loop "
    "(kv_cache_manager.allocate_slots returned None: more blocks needed than free)"
)

TABLE: tuple[CodeFact, ...] = (
    CodeFact(
        id="vllm-v1-alloc-failed-priority-0.33",
        engine=VLLM,
        generation="V1",
        since=(0, 33, 0),
        until=None,
        policy="priority",
        trigger=_V1_PRIORITY_TRIGGER,
        victim="the running request with the largest (priority, arrival_time); when that is the request being "
        "scheduled, it preempts itself and the running loop goes on with the requests after it (of higher "
        "priority, they may still fit in the blocks it freed), where up to 0.32 the loop stopped",
        gate="G1-kv-space",
        sub_kind="capacity",
        mechanism="kv-capacity",
        kv_pressure=True,
        shows_as="KV cache usage at the ceiling with requests waiting; a step goes on after a lowest-priority request "
        "preempted itself, so a workload preempts more often than on 0.32 (273 against 258 on one workload)",
        source="vllm/v1/core/sched/scheduler.py Scheduler.schedule (0.33.0 lines 912-994, the self-preemption's "
        "continue 982-992; 0.34.0 lines 928-1010, the continue 998-1008), vllm/v1/core/kv_cache_manager.py "
        "allocate_slots",
        needs_version=True,
    ),
    CodeFact(
        id="vllm-v1-alloc-failed-priority-0.32",
        engine=VLLM,
        generation="V1",
        since=(0, 9, 2),
        until=(0, 32, 0),
        policy="priority",
        trigger=_V1_PRIORITY_TRIGGER,
        victim="the running request with the largest (priority, arrival_time); when that is the request being "
        "scheduled, it preempts itself and the running loop stops: the requests after it are not scheduled in "
        "that step",
        gate="G1-kv-space",
        sub_kind="capacity",
        mechanism="kv-capacity",
        kv_pressure=True,
        shows_as="KV cache usage at the ceiling with requests waiting",
        source="vllm/v1/core/sched/scheduler.py Scheduler.schedule (0.32.0 lines 776-848, the stop 846-848; "
        "0.9.2 lines 248-283), vllm/v1/core/kv_cache_manager.py allocate_slots",
        needs_version=True,
    ),
    CodeFact(
        id="vllm-v1-alloc-failed",
        engine=VLLM,
        generation="V1",
        since=(0, 6, 4),
        until=None,
        policy=None,
        trigger="a KV-block allocation failed for a running request in the running loop "
        "(kv_cache_manager.allocate_slots returned None: more blocks needed than free)",
        victim="the last running request (FCFS: self.running.pop()); under --scheduling-policy priority "
        "(0.9.2+) the running request with the largest (priority, arrival_time)",
        gate="G1-kv-space",
        sub_kind="capacity",
        mechanism="kv-capacity",
        kv_pressure=True,
        shows_as="KV cache usage at the ceiling with requests waiting",
        source="vllm/v1/core/sched/scheduler.py Scheduler.schedule (0.9.2 lines 248-283, 0.33.0 lines 912-990), "
        "vllm/v1/core/kv_cache_manager.py allocate_slots (0.9.2 line 264)",
    ),
    CodeFact(
        id="vllm-v1-reset-prefix-cache",
        engine=VLLM,
        generation="V1",
        since=(0, 12, 0),
        until=None,
        policy=None,
        trigger="reset_prefix_cache(reset_running_requests=True) preempts every running request "
        "(e.g. an RL weight sync)",
        victim="every running request",
        gate="G4-prefix-conflict",
        sub_kind="cache-reset",
        mechanism="prefix-cache-reset",
        kv_pressure=False,
        shows_as="every running request preempted in one step without a failed allocation (preempt records; the "
        "plugin's 'preempted outside schedule()'), the engine's 'Successfully reset prefix cache' line "
        "(vllm/v1/core/block_pool.py) or the KV events' AllBlocksCleared at that moment",
        source="vllm/v1/core/sched/scheduler.py reset_prefix_cache and _preempt_request (0.32.0 lines 2840-2875, "
        "0.33.0 lines 1799-1843 and 3184-3210); vllm/v1/core/block_pool.py reset_prefix_cache (0.32.0 line 861)",
        # vLLM's own names (reset_prefix_cache, prefix_cache_reset: vllm PR #58037), and the plugin's observation: in
        # 0.12-0.34 _preempt_request is called outside schedule() only by reset_prefix_cache.
        record_reason=r"(?i)^\s*(?:reset_prefix_cache|prefix[_ ]cache[_ ]reset)\b|^\s*preempted outside schedule\(\)",
    ),
    CodeFact(
        id="vllm-v0-can-append-slots",
        engine=VLLM,
        generation="V0",
        since=(0, 4, 0),
        until=(0, 10, 2),
        policy=None,
        trigger="_can_append_slots failed for a running sequence group: not enough free KV blocks for its "
        "next tokens ('because there is not enough KV cache space')",
        victim="the last, lowest-priority running group (running_queue.pop()); the group itself if none is left",
        gate="G1-kv-space",
        sub_kind="capacity",
        mechanism="kv-capacity",
        kv_pressure=True,
        shows_as="the V0 warning 'is preempted by PreemptionMode... because there is not enough KV cache space'",
        source="vllm/core/scheduler.py _schedule_running (0.10.2 lines 640-760, the loop at 729), _preempt (lines 1750-1793)",
    ),
    CodeFact(
        id="vllm-v0-priority-preemption",
        engine=VLLM,
        generation="V0",
        since=(0, 6, 3),
        until=(0, 10, 2),
        policy="priority",
        trigger="_schedule_priority_preemption: the head waiting group cannot be allocated, or the budget "
        "(tokens, max_num_seqs) cannot fit it, so lower-priority running groups are preempted "
        "(non-chunked path only)",
        victim="running groups of lower priority than the head waiting group, lowest first",
        gate="G3-queue-overflow",
        sub_kind=None,
        mechanism="priority-churn",
        kv_pressure=False,
        shows_as="--scheduling-policy priority with chunked prefill off, requests waiting",
        source="vllm/core/scheduler.py _schedule_priority_preemption (0.10.2 lines 959-1025)",
    ),
    # SGLang (issue 29): a retraction is SGLang's preemption (the policy row first: default_trigger takes the
    # first that holds). Read in the released wheels 0.2.0, 0.3.6,
    # 0.4.6, 0.4.10, 0.5.5, 0.5.10, 0.5.15 and 0.5.23 (sglang-facts.md lists 0.1.14 too).
    CodeFact(
        id="sglang-retract-priority-policy",
        engine=SGLANG,
        generation=None,
        since=(0, 5, 23),  # absent in 0.5.15; the releases between were not read
        until=None,
        policy="priority",
        trigger="the same failed check_decode_mem, under --retraction-policy priority (needs "
        "--enable-priority-scheduling)",
        victim="the lowest-priority running request first (the direction of --schedule-low-priority-values-first), "
        "then the length order",
        gate="G1-kv-space",
        sub_kind="capacity",
        mechanism="kv-capacity",
        kv_pressure=True,
        shows_as="retraction_policy='priority' in the server_args line",
        source="python/sglang/srt/managers/schedule_batch.py _get_decode_retraction_order (0.5.23: 3542-3580); "
        "arg_groups/fields/schedule.py retraction_policy (0.5.23: 126)",
    ),
    CodeFact(
        id="sglang-retract-decode-mem",
        engine=SGLANG,
        generation=None,
        since=None,
        until=None,
        policy=None,
        trigger="check_decode_mem failed in update_running_batch: after evicting the radix cache, the KV pool "
        "cannot hold the next decode step of the running batch ('KV cache pool is full. Retract requests.'; "
        "'Decode out of memory happened' before 0.4.7)",
        victim="retract_decode sorts the running batch by (len(output_ids), -len(origin_input_ids)) and retracts "
        "from the end until the step fits: the request with the fewest generated tokens first, the longer "
        "prompt on ties (--retraction-policy length, the default); with speculative decoding (0.4.x-0.5.10) no "
        "sort, the batch's last requests; the last request is kept (0.5.10+: aborted if even it cannot fit)",
        gate="G1-kv-space",
        sub_kind="capacity",
        mechanism="kv-capacity",
        kv_pressure=True,
        shows_as="the retraction line itself, every retraction ('Testing retraction.' when SGLANG_TEST_RETRACT forces "
        "one, 0.5.10+)",
        source="python/sglang/srt/managers/scheduler.py update_running_batch (0.3.6: 871-896, log 888; 0.4.6: "
        "1317-1343; 0.4.10: 1608-1637; 0.5.5: 1892-1927; 0.5.10: 2547-2613; 0.5.15: 3041-3119; 0.5.23: "
        "4459-4542, log 4537); schedule_batch.py retract_decode (0.4.6: 1233; 0.5.10: 1950; 0.5.23: 3451, "
        "order 3542); 0.2.0: managers/controller/tp_worker.py forward_decode_batch 535-553, "
        "infer_batch.py retract_decode 433",
    ),
)


# The field guide's four gates (a gate no row of an engine settles is not in its upstream code).
GUIDE_GATES = ("G1-kv-space", "G2-batch-variance", "G3-queue-overflow", "G4-prefix-conflict")


def rows_of(engine: str) -> tuple[CodeFact, ...]:
    """The table's rows of one engine (its registry record holds them: Engine.code_facts)."""
    return tuple(f for f in TABLE if f.engine == engine)


def applicable(
    engine: str, generation: str | None, version: Version | None, policy: str | None
) -> tuple[CodeFact, ...]:
    """The rows that hold for this engine, generation, version and policy (table order)."""
    return tuple(f for f in TABLE if f.holds(engine, generation, version, policy))


def default_trigger(
    engine: str, generation: str | None, version: Version | None, policy: str | None
) -> CodeFact | None:
    """The trigger an event is put down to when the bundle shows no other: the first KV-pressure row."""
    for f in applicable(engine, generation, version, policy):
        if f.kv_pressure:
            return f
    return None


def gates_settled(engine: str, generation: str | None, version: Version | None, policy: str | None) -> set[str]:
    """The gates some trigger of this engine's upstream code can produce; the others are not in it."""
    return {f.gate for f in applicable(engine, generation, version, policy)}


DOC_BEGIN = "<!-- engine-facts: generated from preemptlog/engine_facts.py (python -m preemptlog.engines.facts) -->"
DOC_END = "<!-- /engine-facts -->"


def _versions(f: CodeFact) -> str:
    def v(t: Version | None) -> str:
        return ".".join(str(x) for x in t) if t else ""

    if f.since and f.until:
        return f"{v(f.since)}-{v(f.until)}"
    if f.since:
        return f"{v(f.since)}+"
    return f"up to {v(f.until)}" if f.until else "all"


def markdown_table() -> str:
    """The docs' table of the facts (docs/engine-facts.md, README.md) (between :data:`DOC_BEGIN` and :data:`DOC_END`)."""
    rows = [
        DOC_BEGIN,
        "| engine | versions | policy | what triggers a preemption | victim | settles | source |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in TABLE:
        eng = {"vllm": "vLLM", "sglang": "SGLang"}.get(f.engine, f.engine) + (
            f" {f.generation}" if f.generation else ""
        )
        settles = f"`{f.gate}`" + (f" / `{f.sub_kind}`" if f.sub_kind else "") + f", mechanism `{f.mechanism}`"
        rows.append(
            f"| {eng} | {_versions(f)} | {f.policy or 'any'} | {f.trigger} | {f.victim} | {settles} | `{f.source}` |"
        )
    rows.append(DOC_END)
    return "\n".join(rows)


def write_docs(path: str = "README.md") -> bool:
    """Rewrite the table between the markers of ``path``; True when the file changed."""
    from pathlib import Path

    p = Path(path)
    text = p.read_text()
    head, _, rest = text.partition(DOC_BEGIN)
    _, _, tail = rest.partition(DOC_END)
    new = head + markdown_table() + tail
    if new != text:
        p.write_text(new)
        return True
    return False


if __name__ == "__main__":
    write_docs()
