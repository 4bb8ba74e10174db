"""Each format's name is said once in the package (`FORMAT_NAME` in connectors/core/kafka/format.py,
sinks/delta/options.py, sinks/postgres/options.py) and imported everywhere else, so that a
rename cannot leave a message or a handle's kind behind. Typing's `Literal[...]` must spell it
out, and docstrings show users' code: both may."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_architecture import ROOT, _wheel_files

NAMES = {"kafka-eos", "delta-eos", "postgres-eos"}
#: Where each name is defined.
DEFINED = {"connectors/core/kafka/format.py": {"kafka-eos"},
           "sinks/delta/options.py": {"delta-eos"},
           "sinks/postgres/options.py": {"postgres-eos"}}
#: "kafka-eos" as the project's name, not a format's: the command, its cache, its clients.
PROJECT_NAME = {"connectors/cli.py", "connectors/local/apache_kafka.py",
                "connectors/local/spark.py"}


def spelt_out(source: str) -> list[tuple[int, str]]:
    """(line, name) of every string constant that is a format's name, outside docstrings and
    `Literal[...]`."""
    tree = ast.parse(source)
    skip: set[int] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                and node.value.id == "Literal"):
            skip |= {id(n) for n in ast.walk(node.slice)}
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.body and isinstance(node.body[0], ast.Expr):
                skip.add(id(node.body[0].value))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in NAMES and id(node) not in skip]


def test_names_are_found_outside_literals_and_docstrings_only():
    source = ('"""format("kafka-eos")"""\nA = "kafka-eos"\nB: Literal["delta-eos"]\n'
              'def f():\n    """delta-eos"""\n    return g("postgres-eos")\n')
    assert spelt_out(source) == [(2, "kafka-eos"), (6, "postgres-eos")]


def test_each_format_name_is_spelt_out_once():
    found = {}
    for path in _wheel_files():
        name = path.relative_to(ROOT).as_posix()
        allowed = DEFINED.get(name, set()) | (NAMES if name in PROJECT_NAME else set())
        extra = [f"line {line}: {value}" for line, value in spelt_out(path.read_text())
                 if value not in allowed]
        if extra:
            found[name] = extra
    assert found == {}, "import FORMAT_NAME instead of spelling it out"
    for name, values in DEFINED.items():
        assert [v for _, v in spelt_out((ROOT / name).read_text())] == sorted(values)


def test_kafka_eos_is_its_two_halves_joined_without_either_overriding_the_other():
    """docs/architecture.md: the reading half (sources/) and the writing half (sinks/kafka/)
    share only a cooperative `__init__` and `name()`; every other method is one half's."""
    from pyspark.sql.datasource import DataSource

    from connectors.formats import KafkaEosDataSource
    from sinks.kafka.data_source import KafkaSinkDataSource
    from sources.data_source import KafkaEosDataSource as ReadingHalf

    def own(cls: type) -> set[str]:
        return {n for c in cls.__mro__ if c not in (DataSource, object) for n in vars(c)
                if n == "__init__" or not (n.startswith("__") or n == "_abc_impl")}

    assert own(ReadingHalf) & own(KafkaSinkDataSource) == {"__init__", "name"}
    assert own(KafkaEosDataSource) == own(ReadingHalf) | own(KafkaSinkDataSource)
    # the joined class adds nothing of its own
    assert not {n for n in vars(KafkaEosDataSource)
                if not n.startswith("__") and n != "_abc_impl"}
    options = {"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "t"}
    joined = KafkaEosDataSource(dict(options))
    assert joined.name() == ReadingHalf.name() == KafkaSinkDataSource.name() == "kafka-eos"
    assert joined._raw == options
