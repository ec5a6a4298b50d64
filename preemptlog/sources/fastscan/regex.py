"""The polars pass's regexes as programs for the compiled pass's backtracking matcher (``_scan.c``).

The records' regexes (the vLLM header, the leading dates, the process and compose prefixes, the
request fields) are written once, in Python (``sources/vllm_log.py``), and run by polars' regex
engine (Rust's ``regex`` crate: leftmost-first, Unicode classes). The compiled pass runs the
*same strings*: :func:`compile_regex` parses one with Python's own regex parser (the syntax these
patterns use is common to both engines) and emits a small program for the C matcher, whose
backtracking order is leftmost-first, so it finds the match the regex crate finds, with the same
groups.

Unicode: the C matcher reads UTF-8 by characters. A class knows what it does with a non-ASCII
character when that is decidable from a small table (``\\s`` and its negation: Unicode White_Space,
a dozen code points; literal ASCII sets and their negations); when it is not (``\\d``, ``\\w``,
``\\W``: thousands of code points), a non-ASCII character reaching that class makes the matcher
answer *unsure*, and the line is left to the polars pass. A construct this compiler does not know
(look-around, back-references, ``\\b``, flags) raises :class:`Unsupported`: the compiled pass then
stays off for the whole run (the polars pass reads every file), and the tests say so.
"""

from __future__ import annotations

import re._constants as C
import re._parser as P
import struct
from dataclasses import dataclass, field

# Instruction codes (keep equal to _scan.c's OP_*).
OP_MATCH, OP_CHAR, OP_SET, OP_SPLIT, OP_JMP, OP_SAVE, OP_BOL, OP_EOL, OP_RUN, OP_LIT = range(10)
# What a set does with a non-ASCII character (keep equal to _scan.c's NA_*).
NA_NEVER, NA_ALWAYS, NA_SPACE, NA_NOT_SPACE, NA_UNSURE = range(5)

_ASCII_CATEGORY: dict[object, set[int]] = {
    C.CATEGORY_DIGIT: set(range(48, 58)),
    C.CATEGORY_SPACE: {9, 10, 11, 12, 13, 32},
    C.CATEGORY_WORD: set(range(48, 58)) | set(range(65, 91)) | set(range(97, 123)) | {95},
}
_NEGATED = {
    C.CATEGORY_NOT_DIGIT: C.CATEGORY_DIGIT,
    C.CATEGORY_NOT_SPACE: C.CATEGORY_SPACE,
    C.CATEGORY_NOT_WORD: C.CATEGORY_WORD,
}


class Unsupported(ValueError):
    """A regex construct the compiled matcher does not run (the polars pass then reads every file)."""


@dataclass
class Program:
    """One compiled regex: instructions (op, a, b), sets (128-bit ASCII maps and a non-ASCII mode)."""

    pattern: str
    code: list[tuple[int, int, int]] = field(default_factory=list)
    sets: list[tuple[bytes, int]] = field(default_factory=list)
    groups: dict[str, int] = field(default_factory=dict)  # name -> group number
    ngroups: int = 0
    anchored: bool = False
    first: bytes | None = None  # 32-byte map of the bytes a match can start with; None: any
    lits: bytes = b""  # the literal pool of OP_LIT (a run of literal bytes, one instruction)

    def pack(self) -> tuple[bytes, bytes, int, int, bytes, bytes]:
        """(code, sets, nslots, anchored, first, lits) as _scan.Config takes them."""
        code = b"".join(struct.pack("<iii", *ins) for ins in self.code)
        sets = b"".join(bits + bytes([mode]) for bits, mode in self.sets)
        return code, sets, 2 * (self.ngroups + 1), int(self.anchored), self.first or b"", self.lits

    def group(self, name: str | int) -> int:
        return name if isinstance(name, int) else self.groups[name]


def _set_of(items: list[tuple[object, object]]) -> tuple[bytes, int]:
    negate = False
    ascii_bits: set[int] = set()
    space = not_space = unsure = False
    for op, av in items:
        if op is C.NEGATE:
            negate = True
        elif op is C.LITERAL:
            assert isinstance(av, int)
            if av < 128:
                ascii_bits.add(av)
            else:
                unsure = True
        elif op is C.RANGE:
            assert isinstance(av, tuple)
            lo, hi = av
            ascii_bits |= {c for c in range(lo, hi + 1) if c < 128}
            if hi >= 128:
                unsure = True
        elif op is C.CATEGORY:
            if av in _ASCII_CATEGORY:
                ascii_bits |= _ASCII_CATEGORY[av]
                if av is C.CATEGORY_SPACE:
                    space = True
                else:
                    unsure = True
            elif av in _NEGATED:
                base = _ASCII_CATEGORY[_NEGATED[av]]
                ascii_bits |= set(range(128)) - base
                if av is C.CATEGORY_NOT_SPACE:
                    not_space = True
                else:
                    unsure = True
            else:
                raise Unsupported(f"class category {av}")
        else:
            raise Unsupported(f"class item {op}")
    if negate:
        ascii_bits = set(range(128)) - ascii_bits
    if unsure:
        mode = NA_UNSURE
    else:
        if space and not_space:
            mode = NA_ALWAYS
        elif space:
            mode = NA_SPACE
        elif not_space:
            mode = NA_NOT_SPACE
        else:
            mode = NA_NEVER
        if negate:
            mode = {NA_NEVER: NA_ALWAYS, NA_ALWAYS: NA_NEVER, NA_SPACE: NA_NOT_SPACE, NA_NOT_SPACE: NA_SPACE}[mode]
    bits = bytearray(16)
    for c in ascii_bits:
        bits[c >> 3] |= 1 << (c & 7)
    return bytes(bits), mode


class _Compiler:
    def __init__(self, prog: Program) -> None:
        self.p = prog

    def emit(self, op: int, a: int = 0, b: int = 0) -> int:
        self.p.code.append((op, a, b))
        return len(self.p.code) - 1

    def patch(self, at: int, a: int | None = None, b: int | None = None) -> None:
        op, a0, b0 = self.p.code[at]
        self.p.code[at] = (op, a0 if a is None else a, b0 if b is None else b)

    def set(self, items: list[tuple[object, object]]) -> None:
        entry = _set_of(items)
        if entry in self.p.sets:
            idx = self.p.sets.index(entry)
        else:
            self.p.sets.append(entry)
            idx = len(self.p.sets) - 1
        self.emit(OP_SET, idx)

    def seq(self, data: list[tuple[object, object]]) -> None:
        for op, av in data:
            self.node(op, av)

    def node(self, op: object, av: object) -> None:
        if op is C.LITERAL:
            assert isinstance(av, int)
            for b in chr(av).encode("utf-8"):
                self.emit(OP_CHAR, b)
        elif op is C.NOT_LITERAL:
            assert isinstance(av, int)
            self.set([(C.NEGATE, None), (C.LITERAL, av)])
        elif op is C.ANY:
            self.set([(C.NEGATE, None), (C.LITERAL, 10)])  # any character but \n
        elif op is C.IN:
            assert isinstance(av, list)
            self.set(av)
        elif op is C.AT:
            if av in (C.AT_BEGINNING, C.AT_BEGINNING_STRING):
                self.emit(OP_BOL)
            elif av in (C.AT_END, C.AT_END_STRING):
                self.emit(OP_EOL)  # the regex crate's $ without (?m): the end of the text only
            else:
                raise Unsupported(f"assertion {av}")
        elif op is C.SUBPATTERN:
            assert isinstance(av, tuple)
            group, add_flags, del_flags, sub = av
            if add_flags or del_flags:
                raise Unsupported("inline flags")
            if group is None:
                self.seq(sub.data if hasattr(sub, "data") else sub)
            else:
                self.emit(OP_SAVE, 2 * group)
                self.seq(sub.data if hasattr(sub, "data") else sub)
                self.emit(OP_SAVE, 2 * group + 1)
        elif op is C.BRANCH:
            assert isinstance(av, tuple)
            alts = av[1]
            jumps = []
            for i, alt in enumerate(alts):
                if i < len(alts) - 1:
                    split = self.emit(OP_SPLIT)
                    self.patch(split, a=split + 1)
                    self.seq(alt.data if hasattr(alt, "data") else alt)
                    jumps.append(self.emit(OP_JMP))
                    self.patch(split, b=len(self.p.code))
                else:
                    self.seq(alt.data if hasattr(alt, "data") else alt)
            for j in jumps:
                self.patch(j, a=len(self.p.code))
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT):
            assert isinstance(av, tuple)
            lo, hi, sub = av
            body = sub.data if hasattr(sub, "data") else sub
            greedy = op is C.MAX_REPEAT
            if _min_width(body) == 0:
                raise Unsupported("a repeat of a body that can match empty")
            if (
                hi is C.MAXREPEAT
                and greedy
                and len(body) == 1
                and body[0][0] in (C.IN, C.LITERAL, C.NOT_LITERAL, C.ANY)
            ):
                # a greedy run of one class: one instruction that takes the longest run and gives
                # characters back one at a time on backtracking (same order as the loop below)
                op1, av1 = body[0]
                if op1 is C.LITERAL and isinstance(av1, int) and av1 >= 128:
                    pass  # a multi-byte literal: the general loop
                else:
                    items: list[tuple[object, object]]
                    if op1 is C.IN:
                        assert isinstance(av1, list)
                        items = av1
                    elif op1 is C.LITERAL:
                        items = [(C.LITERAL, av1)]
                    elif op1 is C.NOT_LITERAL:
                        items = [(C.NEGATE, None), (C.LITERAL, av1)]
                    else:
                        items = [(C.NEGATE, None), (C.LITERAL, 10)]
                    self.set(items)
                    at = len(self.p.code) - 1
                    self.p.code[at] = (OP_RUN, self.p.code[at][1], lo)
                    return
            for _ in range(lo):
                self.seq(body)
            if hi is C.MAXREPEAT:
                loop = self.emit(OP_SPLIT)
                self.seq(body)
                self.emit(OP_JMP, loop)
                out = len(self.p.code)
                self.patch(loop, a=loop + 1, b=out) if greedy else self.patch(loop, a=out, b=loop + 1)
            else:
                if hi - lo > 64:
                    raise Unsupported("a counted repeat above 64")
                splits = []
                for _ in range(hi - lo):
                    splits.append(self.emit(OP_SPLIT))
                    self.seq(body)
                out = len(self.p.code)
                for s in splits:
                    self.patch(s, a=s + 1, b=out) if greedy else self.patch(s, a=out, b=s + 1)
        else:
            raise Unsupported(f"regex construct {op}")


def _min_width(data: list[tuple[object, object]]) -> int:
    lo, _hi = P.SubPattern(P.State(), data).getwidth()
    return int(lo)


def _first_bytes(prog: Program) -> bytes | None:
    """The bytes a match can start with (a map of 256 bits), or None when any byte can (or the
    empty string matches)."""
    seen: set[int] = set()
    stack = [0]
    bits = bytearray(32)
    while stack:
        pc = stack.pop()
        if pc in seen:
            continue
        seen.add(pc)
        op, a, b = prog.code[pc]
        if op in (OP_MATCH, OP_EOL):
            return None
        if op == OP_CHAR:
            bits[a >> 3] |= 1 << (a & 7)
        elif op == OP_LIT:
            c = prog.lits[a]
            bits[c >> 3] |= 1 << (c & 7)
        elif op == OP_RUN and b == 0:
            return None  # may match empty: any byte may follow (kept simple)
        elif op in (OP_SET, OP_RUN):
            ascii_map, mode = prog.sets[a]
            for i in range(16):
                bits[i] |= ascii_map[i]
            if mode != NA_NEVER:
                for c in range(0xC2, 0xF5):  # lead bytes of every non-ASCII character
                    bits[c >> 3] |= 1 << (c & 7)
        elif op == OP_SPLIT:
            stack += [a, b]
        elif op == OP_JMP:
            stack.append(a)
        elif op in (OP_SAVE, OP_BOL):
            stack.append(pc + 1)
    return bytes(bits)


def _merge_literals(prog: Program) -> None:
    """Runs of two or more OP_CHAR that no jump enters in the middle become one OP_LIT."""
    targets = set()
    for op, a, b in prog.code:
        if op == OP_SPLIT:
            targets |= {a, b}
        elif op == OP_JMP:
            targets.add(a)
    new: list[tuple[int, int, int]] = []
    where: dict[int, int] = {}
    pool = bytearray()
    i = 0
    while i < len(prog.code):
        j = i
        while j < len(prog.code) and prog.code[j][0] == OP_CHAR and (j == i or j not in targets):
            j += 1
        where[i] = len(new)
        if j - i >= 2:
            new.append((OP_LIT, len(pool), j - i))
            pool += bytes(prog.code[k][1] for k in range(i, j))
            i = j
        else:
            new.append(prog.code[i])
            i += 1
    where[len(prog.code)] = len(new)
    out = []
    for op, a, b in new:
        if op == OP_SPLIT:
            a, b = where[a], where[b]
        elif op == OP_JMP:
            a = where[a]
        out.append((op, a, b))
    prog.code = out
    prog.lits = bytes(pool)


def compile_regex(pattern: str) -> Program:
    """Compile one of the records' regexes (see the module docstring); raises Unsupported."""
    try:
        tree = P.parse(pattern)
    except Exception as exc:  # a pattern Python's parser refuses (Rust-only syntax)
        raise Unsupported(f"{pattern!r}: {exc}") from exc
    if tree.state.flags & ~(C.SRE_FLAG_UNICODE):
        raise Unsupported("flags")
    prog = Program(pattern, ngroups=tree.state.groups - 1, groups=dict(tree.state.groupdict))
    comp = _Compiler(prog)
    comp.seq(tree.data)
    comp.emit(OP_MATCH)
    _merge_literals(prog)
    prog.anchored = bool(prog.code) and prog.code[0][0] == OP_BOL
    prog.first = _first_bytes(prog)
    if len(prog.sets) > 255:
        raise Unsupported("more than 255 classes")
    return prog
