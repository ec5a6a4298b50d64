"""A small, safe expression language for rule conditions, compiled to polars.

No ``eval``, no attribute access, no calls except the functions listed in
:data:`FUNCTIONS`. Grammar::

    expr    := or
    or      := and ("or" and)*
    and     := not ("and" not)*
    not     := "not" not | compare
    compare := sum (("<" | "<=" | ">" | ">=" | "==" | "!=") sum)?
             | sum "is" ["not"] "null"
    sum     := product (("+" | "-") product)*
    product := unary (("*" | "/" | "%") unary)*
    unary   := "-" unary | atom
    atom    := NUMBER | STRING | "true" | "false" | "null"
             | NAME                      evidence column or derived value
             | "$" NAME                  threshold
             | FUNC "(" expr ("," expr)* ")"   max min abs coalesce ceil floor
                                                present(x)  if(cond, a, b)
             | "(" expr ")"

Nulls propagate (a missing value makes a comparison null); the rule engine
treats a null condition as "not fired". ``present(x)`` is ``x is not null``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

import polars as pl


class ExprError(ValueError):
    pass


FUNCTIONS: dict[str, tuple[int, int]] = {  # name -> (min args, max args)
    "max": (1, 8),
    "min": (1, 8),
    "abs": (1, 1),
    "coalesce": (1, 8),
    "ceil": (1, 1),
    "floor": (1, 1),
    "present": (1, 1),
    "if": (3, 3),
}

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<str>'[^'\\]*'|\"[^\"\\]*\")|(?P<op><=|>=|==|!=|[<>+\-*/%(),$])"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*))"
)
KEYWORDS = {"and", "or", "not", "is", "null", "true", "false"}


@dataclass(frozen=True)
class Num:
    value: float


@dataclass(frozen=True)
class Str:
    value: str


@dataclass(frozen=True)
class Bool:
    value: bool


@dataclass(frozen=True)
class Null:
    pass


@dataclass(frozen=True)
class Name:
    name: str


@dataclass(frozen=True)
class Threshold:
    name: str


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple[Node, ...]


@dataclass(frozen=True)
class Unary:
    op: str
    operand: Node


@dataclass(frozen=True)
class Binary:
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class IsNull:
    operand: Node
    negate: bool


Node = Num | Str | Bool | Null | Name | Threshold | Call | Unary | Binary | IsNull


def tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExprError(f"unexpected character {text[pos : pos + 1]!r} at position {pos}")
        kind = m.lastgroup
        assert kind is not None
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise ExprError("unexpected end of expression")
        self.i += 1
        return tok

    def accept(self, value: str) -> bool:
        tok = self.peek()
        if tok is not None and tok[1] == value and tok[0] in ("op", "name"):
            self.i += 1
            return True
        return False

    def expect(self, value: str) -> None:
        if not self.accept(value):
            tok = self.peek()
            raise ExprError(f"expected {value!r}, found {tok[1] if tok else 'end of expression'!r}")

    def parse(self) -> Node:
        node = self.or_()
        if self.peek() is not None:
            raise ExprError(f"unexpected {self.peek()[1]!r} after a complete expression")  # type: ignore[index]
        return node

    def or_(self) -> Node:
        node = self.and_()
        while self.accept("or"):
            node = Binary("or", node, self.and_())
        return node

    def and_(self) -> Node:
        node = self.not_()
        while self.accept("and"):
            node = Binary("and", node, self.not_())
        return node

    def not_(self) -> Node:
        if self.accept("not"):
            return Unary("not", self.not_())
        return self.compare()

    def compare(self) -> Node:
        left = self.sum_()
        tok = self.peek()
        if tok is not None and tok[0] == "op" and tok[1] in ("<", "<=", ">", ">=", "==", "!="):
            self.take()
            return Binary(tok[1], left, self.sum_())
        if self.accept("is"):
            negate = self.accept("not")
            self.expect("null")
            return IsNull(left, negate)
        return left

    def sum_(self) -> Node:
        node = self.product()
        while True:
            tok = self.peek()
            if tok is not None and tok[0] == "op" and tok[1] in ("+", "-"):
                self.take()
                node = Binary(tok[1], node, self.product())
            else:
                return node

    def product(self) -> Node:
        node = self.unary()
        while True:
            tok = self.peek()
            if tok is not None and tok[0] == "op" and tok[1] in ("*", "/", "%"):
                self.take()
                node = Binary(tok[1], node, self.unary())
            else:
                return node

    def unary(self) -> Node:
        if self.accept("-"):
            return Unary("-", self.unary())
        return self.atom()

    def atom(self) -> Node:
        kind, value = self.take()
        if kind == "num":
            return Num(float(value))
        if kind == "str":
            return Str(value[1:-1])
        if kind == "op" and value == "(":
            node = self.or_()
            self.expect(")")
            return node
        if kind == "op" and value == "$":
            k, name = self.take()
            if k != "name" or name in KEYWORDS:
                raise ExprError("'$' must be followed by a threshold name")
            return Threshold(name)
        if kind == "name":
            if value == "true":
                return Bool(True)
            if value == "false":
                return Bool(False)
            if value == "null":
                return Null()
            if value in KEYWORDS:
                raise ExprError(f"unexpected keyword {value!r}")
            if self.accept("("):
                if value not in FUNCTIONS:
                    raise ExprError(f"unknown function {value!r}; allowed: {', '.join(sorted(FUNCTIONS))}")
                args = [self.or_()]
                while self.accept(","):
                    args.append(self.or_())
                self.expect(")")
                lo, hi = FUNCTIONS[value]
                if not lo <= len(args) <= hi:
                    raise ExprError(f"{value}() takes {lo} to {hi} arguments, got {len(args)}")
                return Call(value, tuple(args))
            return Name(value)
        raise ExprError(f"unexpected {value!r}")


def parse(text: str) -> Node:
    """The tree of ``text`` (trees are immutable: a text met again is parsed once)."""
    if not isinstance(text, str):
        raise ExprError("empty expression")
    return _parse(text)


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> Node:
    if not text.strip():
        raise ExprError("empty expression")
    if len(text) > 2000:
        raise ExprError("expression longer than 2000 characters")
    return _Parser(text).parse()


def names(node: Node) -> tuple[set[str], set[str]]:
    """(evidence/derived names, threshold names) used by an expression."""
    out: set[str] = set()
    thr: set[str] = set()

    def walk(n: object) -> None:
        if isinstance(n, Name):
            out.add(n.name)
        elif isinstance(n, Threshold):
            thr.add(n.name)
        elif isinstance(n, Call):
            for a in n.args:
                walk(a)
        elif isinstance(n, (Unary, IsNull)):
            walk(n.operand)
        elif isinstance(n, Binary):
            walk(n.left)
            walk(n.right)

    walk(node)
    return out, thr


def compile_expr(node: Node, resolve_name: Callable[[str], pl.Expr], thresholds: dict[str, object]) -> pl.Expr:
    """AST -> polars expression. ``resolve_name`` maps a name to a column/derived expression."""

    def c(n: object) -> pl.Expr:
        if isinstance(n, Num):
            v = n.value
            return pl.lit(int(v) if v.is_integer() else v)
        if isinstance(n, Str):
            return pl.lit(n.value)
        if isinstance(n, Bool):
            return pl.lit(n.value)
        if isinstance(n, Null):
            return pl.lit(None)
        if isinstance(n, Name):
            return resolve_name(n.name)
        if isinstance(n, Threshold):
            if n.name not in thresholds:
                raise ExprError(f"unknown threshold ${n.name}")
            return pl.lit(thresholds[n.name])
        if isinstance(n, IsNull):
            e = c(n.operand)
            return e.is_not_null() if n.negate else e.is_null()
        if isinstance(n, Unary):
            e = c(n.operand)
            return ~e if n.op == "not" else -e
        if isinstance(n, Call):
            args = [c(a) for a in n.args]
            if n.func == "max":
                return pl.max_horizontal(args)
            if n.func == "min":
                return pl.min_horizontal(args)
            if n.func == "coalesce":
                return pl.coalesce(args)
            if n.func == "abs":
                return args[0].abs()
            if n.func == "ceil":
                return args[0].cast(pl.Float64).ceil()
            if n.func == "floor":
                return args[0].cast(pl.Float64).floor()
            if n.func == "present":
                return args[0].is_not_null()
            if n.func == "if":
                return pl.when(args[0].fill_null(False)).then(args[1]).otherwise(args[2])
            raise ExprError(f"unknown function {n.func}")  # pragma: no cover
        if isinstance(n, Binary):
            a, b = c(n.left), c(n.right)
            op = n.op
            if op == "and":
                return a & b
            if op == "or":
                return a | b
            if op == "+":
                return a + b
            if op == "-":
                return a - b
            if op == "*":
                return a * b
            if op == "/":
                return a.cast(pl.Float64) / b
            if op == "%":
                return a % b
            if op == "<":
                return a < b
            if op == "<=":
                return a <= b
            if op == ">":
                return a > b
            if op == ">=":
                return a >= b
            if op == "==":
                return a == b
            if op == "!=":
                return a != b
        raise ExprError(f"cannot compile {n!r}")  # pragma: no cover

    return c(node)
