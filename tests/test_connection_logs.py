"""The commit client leaves kafka-python's logging as the application set it: nothing changes at
import, and only the records of the commit client's own calls (their thread, their duration)
are demoted from ERROR to DEBUG (sinks/kafka/connection_logs.py)."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading

import pytest

from sinks.kafka.connection_logs import NET_LOGGERS, demoted


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[str, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.name, record.levelname, record.getMessage()))


@pytest.fixture
def kept():
    handler = _Kept()
    loggers = [logging.getLogger(n) for n in NET_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    yield handler
    for lg, level in zip(loggers, levels):
        lg.removeHandler(handler)
        lg.setLevel(level)


def test_importing_the_kafka_sink_changes_no_logger_of_kafka_python():
    code = ("import logging, sinks.kafka.commit_client, sinks.kafka.sink\n"
            f"for n in {NET_LOGGERS!r}:\n"
            "    lg = logging.getLogger(n)\n"
            "    print(n, lg.level, len(lg.filters), lg.isEnabledFor(logging.ERROR))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout.split("\n")
    assert [line.split() for line in out if line] == [[n, "0", "0", "True"] for n in NET_LOGGERS]


def test_a_commit_client_calls_records_are_demoted_and_other_threads_pass(kept):
    log = logging.getLogger("kafka.net.connection")
    theirs: list[threading.Thread] = []

    def application_thread() -> None:
        log.error("the application's own connection failed")

    with demoted():
        log.error("the commit client's connection dropped")
        theirs.append(threading.Thread(target=application_thread))
        theirs[0].start()
        theirs[0].join()
    log.error("after the call")
    assert kept.records == [
        ("kafka.net.connection", "DEBUG", "the commit client's connection dropped"),
        ("kafka.net.connection", "ERROR", "the application's own connection failed"),
        ("kafka.net.connection", "ERROR", "after the call"),
    ]
    assert all(not logging.getLogger(n).filters for n in NET_LOGGERS), "the filter stayed"


def test_nested_calls_keep_the_filter_until_the_outer_one_ends(kept):
    log = logging.getLogger("kafka.net.manager")
    with demoted():
        with demoted():
            pass
        log.error("still inside the outer call")
    assert kept.records == [("kafka.net.manager", "DEBUG", "still inside the outer call")]
    assert not logging.getLogger("kafka.net.manager").filters


def test_a_refused_connection_of_the_commit_client_logs_no_error(kept):
    """kafka-python logs a refused connection as ERROR on kafka.net.connection and .manager."""
    from kafka.protocol.metadata.metadata import MetadataRequest

    from sinks.kafka.commit_client import CommitClient, TransientTxnError

    client = CommitClient({"bootstrap.servers": "127.0.0.1:1"})
    with pytest.raises(TransientTxnError, match="cannot connect"):
        client.call(MetadataRequest(topics=[], allow_auto_topic_creation=False, version=4),
                    timeout_s=1.0)
    assert kept.records, "kafka-python logged nothing: the test no longer sees its records"
    assert {level for _, level, _ in kept.records} == {"DEBUG"}, kept.records
