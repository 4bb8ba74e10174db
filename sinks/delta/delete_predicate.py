"""`applyAsDeletes`: the SQL predicate that marks a change as a delete, e.g. `op = 'd'`.

The sink evaluates it in the tasks, on the Arrow batches Spark hands them, with pyarrow's
compute functions: no SQL engine runs in a Spark Python worker, and the driver's Delta MERGE
then only reads a boolean column. So the predicate is parsed here, once, when the query starts,
and checked against the stream's schema by evaluating it on an empty batch: a predicate that
does not parse, names a column the stream lacks, or compares a column with a literal of
another type fails the query at start, naming the option, never a batch later.

The grammar is the part of Spark SQL a change-type test needs:

    predicate := disjunct (OR disjunct)*
    disjunct  := conjunct (AND conjunct)*
    conjunct  := NOT conjunct | comparison
    comparison:= operand [ (= | == | != | <> | < | <= | > | >=) operand
                         | IS [NOT] NULL | [NOT] IN (literal, ...) ]
    operand   := column | literal | ( predicate )
    column    := name | `quoted name`          (resolved case-insensitively, as Spark does)
    literal   := 'string' ('' inside escapes a quote) | number | TRUE | FALSE | NULL

As in SQL, a row for which the predicate is NULL (an `op` that is null) is not a delete.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from connectors.core.options import OptionError

OPTION = "applyAsDeletes"

_TOKEN = re.compile(
    r"\s*(?:"
    r"(?P<string>'(?:[^']|'')*')"
    r"|(?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
    r"|(?P<quoted>`(?:[^`]|``)+`)"
    r"|(?P<op><=|>=|<>|!=|==|=|<|>|\(|\)|,)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*)"
    r")"
)
_KEYWORDS = {"and", "or", "not", "is", "null", "in", "true", "false"}
_COMPARISONS = {"=": "equal", "==": "equal", "!=": "not_equal", "<>": "not_equal",
                "<": "less", "<=": "less_equal", ">": "greater", ">=": "greater_equal"}


@dataclass(frozen=True)
class Node:
    """One node of the parsed predicate: `kind` is column, literal, compare, is_null, in,
    and, or, not; `args` its operands (a column's name, a literal's value, sub-nodes)."""

    kind: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class DeletePredicate:
    """A parsed `applyAsDeletes` predicate; `mask(batch)` says which rows are deletes."""

    text: str
    tree: Node

    def columns(self) -> set[str]:
        """The column names the predicate reads, as written."""
        found: set[str] = set()

        def walk(node: Any) -> None:
            if isinstance(node, Node):
                if node.kind == "column":
                    found.add(node.args[0])
                else:
                    for a in node.args:
                        walk(a)

        walk(self.tree)
        return found

    def mask(self, data: pa.RecordBatch | pa.Table) -> pa.Array | pa.ChunkedArray:
        """A boolean per row, never null: True where the row is a delete."""
        import pyarrow.compute as pc

        result = _evaluate(self.tree, data, pc)
        if isinstance(result, pa.Scalar):  # a predicate without columns: the same for all rows
            result = pa.array([result.as_py()] * data.num_rows, pa.bool_())
        if not pa.types.is_boolean(result.type):
            raise TypeError(f"the predicate gives {result.type}, not a boolean")
        return pc.fill_null(result, False)

    def check(self, schema: pa.Schema) -> None:
        """At query start: every column exists in the stream and the types fit (evaluated on
        an empty batch of the stream's schema); OptionError naming the option otherwise."""
        try:
            self.mask(schema.empty_table())
        except OptionError:
            raise
        except Exception as e:  # pyarrow's own words: which function, which types
            raise OptionError(OPTION, f"{self.text!r} cannot be evaluated on the stream's "
                                      f"columns: {e}") from None


def parse(text: str) -> DeletePredicate:
    """Parse `applyAsDeletes`, or raise OptionError naming it and where the text goes wrong."""
    tokens = _tokenise(text)
    parser = _Parser(text, tokens)
    tree = parser.predicate()
    if parser.peek() is not None:
        parser.fail(f"unexpected {parser.peek()[1]!r}")
    return DeletePredicate(text, tree)


def _tokenise(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise OptionError(OPTION, f"{text!r} does not parse at {text[pos:].strip()[:20]!r}: "
                                      "expected a column, a literal or an operator")
        kind = m.lastgroup
        assert kind is not None
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    if not tokens:
        raise OptionError(OPTION, "is empty: give a predicate such as op = 'd'")
    return tokens


class _Parser:
    def __init__(self, text: str, tokens: list[tuple[str, str]]) -> None:
        self.text = text
        self.tokens = tokens
        self.i = 0

    def fail(self, what: str) -> None:
        raise OptionError(OPTION, f"{self.text!r} does not parse: {what} (expected e.g. "
                                  "op = 'd', or op IN ('d', 'r') AND NOT deleted IS NULL)")

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def word(self, *words: str) -> bool:
        t = self.peek()
        if t is not None and t[0] == "word" and t[1].lower() in words:
            self.i += 1
            return True
        return False

    def op(self, *ops: str) -> str | None:
        t = self.peek()
        if t is not None and t[0] == "op" and t[1] in ops:
            self.i += 1
            return t[1]
        return None

    def predicate(self) -> Node:
        node = self.conjunction()
        while self.word("or"):
            node = Node("or", (node, self.conjunction()))
        return node

    def conjunction(self) -> Node:
        node = self.negation()
        while self.word("and"):
            node = Node("and", (node, self.negation()))
        return node

    def negation(self) -> Node:
        if self.word("not"):
            return Node("not", (self.negation(),))
        return self.comparison()

    def comparison(self) -> Node:
        left = self.operand()
        op = self.op(*_COMPARISONS)
        if op is not None:
            return Node("compare", (_COMPARISONS[op], left, self.operand()))
        if self.word("is"):
            negated = self.word("not")
            if not self.word("null"):
                self.fail("IS must be followed by NULL or NOT NULL")
            node = Node("is_null", (left,))
            return Node("not", (node,)) if negated else node
        t = self.peek()
        negated = False
        if t is not None and t[0] == "word" and t[1].lower() == "not":
            nxt = self.tokens[self.i + 1] if self.i + 1 < len(self.tokens) else None
            if nxt is not None and nxt[0] == "word" and nxt[1].lower() == "in":
                self.i += 1
                negated = True
        if self.word("in"):
            if not self.op("("):
                self.fail("IN must be followed by a parenthesised list of literals")
            values = [self.literal()]
            while self.op(","):
                values.append(self.literal())
            if not self.op(")"):
                self.fail("the IN list is not closed")
            node = Node("in", (left, tuple(values)))
            return Node("not", (node,)) if negated else node
        return left

    def operand(self) -> Node:
        t = self.peek()
        if t is None:
            self.fail("it ends where a column or a literal was expected")
            raise AssertionError  # unreachable: fail raises
        if self.op("("):
            node = self.predicate()
            if not self.op(")"):
                self.fail("a parenthesis is not closed")
            return node
        kind, value = t
        if kind == "quoted":
            self.i += 1
            return Node("column", (value[1:-1].replace("``", "`"),))
        if kind == "word" and value.lower() not in _KEYWORDS:
            self.i += 1
            return Node("column", (value,))
        return Node("literal", (self.literal(),))

    def literal(self) -> Any:
        t = self.peek()
        if t is None:
            self.fail("it ends where a literal was expected")
            raise AssertionError
        kind, value = t
        self.i += 1
        if kind == "string":
            return value[1:-1].replace("''", "'")
        if kind == "number":
            return float(value) if any(c in value for c in ".eE") else int(value)
        if kind == "word" and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if kind == "word" and value.lower() == "null":
            return None
        self.i -= 1
        self.fail(f"{value!r} is not a literal")


def _column(data: pa.RecordBatch | pa.Table, name: str) -> Any:
    names = data.schema.names
    if name in names:
        return data.column(name)
    lowered = {n.lower(): n for n in names}
    if name.lower() in lowered:
        return data.column(lowered[name.lower()])
    raise OptionError(OPTION, f"names the column {name!r}, which the stream does not have (its "
                              f"columns: {', '.join(names)})")


def _evaluate(node: Node, data: pa.RecordBatch | pa.Table, pc: Any) -> Any:
    kind, args = node.kind, node.args
    if kind == "column":
        return _column(data, args[0])
    if kind == "literal":
        return pa.scalar(args[0])
    if kind == "compare":
        fn: Callable[..., Any] = getattr(pc, args[0])
        left, right = _evaluate(args[1], data, pc), _evaluate(args[2], data, pc)
        return fn(*_align(left, right))
    if kind == "is_null":
        value = _evaluate(args[0], data, pc)
        return pa.scalar(value.as_py() is None) if isinstance(value, pa.Scalar) else pc.is_null(value)
    if kind == "in":
        value = _evaluate(args[0], data, pc)
        choices = [v for v in args[1] if v is not None]
        found = pc.is_in(value, value_set=_values(choices, value.type))
        # SQL: a null IN (...) is null (so NOT IN is null too: not a delete), not false
        return pc.if_else(pc.is_valid(value), found, pa.scalar(None, pa.bool_()))
    if kind == "not":
        return pc.invert(_evaluate(args[0], data, pc))
    if kind in ("and", "or"):
        fn = pc.and_kleene if kind == "and" else pc.or_kleene
        return fn(_evaluate(args[0], data, pc), _evaluate(args[1], data, pc))
    raise AssertionError(kind)


def _align(left: Any, right: Any) -> tuple[Any, Any]:
    """A literal takes the type of the column it is compared with (`seq > 5` on a float
    column, `op = 'd'` on a large_string), as Spark's implicit casts do for these cases."""
    if isinstance(right, pa.Scalar) and not isinstance(left, pa.Scalar):
        return left, _cast_literal(right, left.type)
    if isinstance(left, pa.Scalar) and not isinstance(right, pa.Scalar):
        return _cast_literal(left, right.type), right
    return left, right


def _cast_literal(value: pa.Scalar, target: pa.DataType) -> pa.Scalar:
    if value.as_py() is None:
        return pa.scalar(None, target)
    numeric = pa.types.is_integer(value.type) or pa.types.is_floating(value.type)
    if (numeric and (pa.types.is_integer(target) or pa.types.is_floating(target)
                     or pa.types.is_decimal(target))) or (
            pa.types.is_string(value.type) and (pa.types.is_string(target)
                                                or pa.types.is_large_string(target))):
        try:
            return value.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return value  # e.g. 2.5 against an integer column: compared as it is
    return value


def _values(choices: Sequence[Any], value_type: pa.DataType) -> pa.Array:
    try:
        return pa.array(choices, value_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        raise OptionError(OPTION, f"the IN list {list(choices)} does not fit the column's type "
                                  f"{value_type}: {e}") from None
