"""The package configures no logging of its own; an application opts in to its structured lines
with `connectors.enable_structured_logs()`, in its process and in the Spark Python workers it
starts afterwards (connectors/core/logs.py)."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from connectors import enable_structured_logs
from connectors.core import logs
from connectors.core.options import Options
from sinks.two_phase_commit import SinkSettings, TwoPhaseCommitSink, TwoPhaseCommitWriter
from sources import batch_metrics

ROOT = Path(__file__).resolve().parents[1]
LOGGERS = ("kafka_eos", "kafka_eos.sink", "kafka_eos.source")


class _NoStore(TwoPhaseCommitSink):
    """A sink with nothing to commit: enough for the template's driver side to log a batch."""

    def beginTransaction(self, context): ...
    def invoke(self, txn, batch): ...
    def preCommit(self, txn): return {}
    def commit(self, batchId, handles): ...
    def abort(self, handles): ...


@pytest.fixture
def clean_loggers(monkeypatch):
    """No opt-in in this process (the suite's conftest opts in for its Spark sessions); what
    a test opts in to is undone after it."""
    monkeypatch.setenv(logs.LEVEL_ENV, "")  # recorded, so that teardown restores it
    monkeypatch.delenv(logs.LEVEL_ENV)
    saved = {name: (list(logging.getLogger(name).handlers), logging.getLogger(name).level,
                    logging.getLogger(name).propagate) for name in LOGGERS}
    for name in LOGGERS:
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).setLevel(logging.NOTSET)
    yield
    for name, (handlers, level, propagate) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:], logger.propagate = handlers, propagate
        logger.setLevel(level)


def _log_a_batch_each() -> None:
    writer = TwoPhaseCommitWriter(_NoStore(SinkSettings.from_options(
        "mine", Options({"deliveryGuarantee": "none"}))))
    writer.commit([], 0)
    batch_metrics.emit({"source": "kafka-eos subscribe=['t']", "batch": 0, "rows": 1},
                       {"slowest": {}})


def test_the_package_adds_no_handler_and_its_lines_reach_the_applications(clean_loggers, caplog):
    caplog.set_level(logging.INFO)  # the application's own logging (here pytest's)
    _log_a_batch_each()
    for name in LOGGERS:
        logger = logging.getLogger(name)
        assert logger.handlers == [] and logger.propagate, name
        assert logger.level == logging.NOTSET, name
    lines = [(r.name, r.getMessage().split(" {", 1)[0]) for r in caplog.records]
    assert ("kafka_eos.sink", "batch committed") in lines
    assert ("kafka_eos.source", "batch read") in lines


def test_opting_in_writes_the_lines_with_level_and_logger_to_the_stream(clean_loggers):
    out = io.StringIO()
    enable_structured_logs("debug", stream=out)
    enable_structured_logs("debug", stream=out)  # twice: still one handler
    _log_a_batch_each()
    handlers = logging.getLogger("kafka_eos").handlers
    assert len(handlers) == 1
    text = out.getvalue()
    assert " INFO kafka_eos.sink: batch committed {" in text
    assert " INFO kafka_eos.source: batch read {" in text
    assert " DEBUG kafka_eos.source: batch read detail {" in text  # DEBUG: the detail too


def test_a_worker_started_after_opting_in_logs_the_lines_itself(clean_loggers):
    """What a Spark Python worker does: it inherits the environment of the process that opted
    in, and configures itself the first time the package logs there."""
    enable_structured_logs(stream=io.StringIO())
    code = ("from sources import batch_metrics\n"
            "batch_metrics.emit({'source': 's', 'batch': 7, 'rows': 2})\n")
    worker = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, cwd=ROOT)
    assert worker.returncode == 0, worker.stderr
    assert ' INFO kafka_eos.source: batch read {"source": "s", "batch": 7' in worker.stderr


def test_a_worker_of_an_application_that_did_not_opt_in_stays_silent(clean_loggers):
    code = ("from sources import batch_metrics\n"
            "batch_metrics.emit({'source': 's', 'batch': 7, 'rows': 2})\n")
    worker = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, cwd=ROOT)
    assert worker.returncode == 0 and "batch read" not in worker.stderr, worker.stderr


def test_a_level_that_is_not_one_is_refused_naming_the_levels(clean_loggers):
    with pytest.raises(ValueError, match=r"level must be one of DEBUG, INFO, WARNING, ERROR, "
                                         r"not 'loud'"):
        enable_structured_logs("loud")


def test_a_bad_level_in_the_environment_is_told_and_info_used(clean_loggers, monkeypatch,
                                                              caplog):
    monkeypatch.setenv(logs.LEVEL_ENV, "loud")
    logs.from_environment()
    logs.from_environment()
    assert [r.getMessage() for r in caplog.records] == [
        "KAFKA_EOS_LOG_LEVEL='loud' is not a level (DEBUG, INFO, WARNING, ERROR): logging at INFO"]
    assert logging.getLogger("kafka_eos").level == logging.INFO
