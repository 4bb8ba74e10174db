"""Exactly-once sinks for Spark Structured Streaming, on one two-phase-commit template: this
folder's root holds the template and its log only.

    two_phase_commit.py  TwoPhaseCommitSink: the commit protocol, once (Flink's
                         TwoPhaseCommitSinkFunction for Spark); subclass it for your own store
                         (docs/writing-a-sink.md)
    txn_log.py, recovery_plan.py, query_identity.py, target_identity.py, faults.py
                         what the template keeps under the checkpoint, how a restart recovers,
                         the table a checkpoint commits into, the crash matrix's kill points
    settings.py          SinkSettings: the options every sink takes (re-exported by two_phase_commit)
    task_reports.py      what a task reports to the driver, and the line logged per batch
    kinds.py             the sink kinds: how inspect and resolve describe and settle each
                         sink's handles (every handle records its kind)
    data_source.py       TwoPhaseCommitDataSource: a sink's format, from options to a writer

The template's modules are the only ones at this folder's root; each sink is a package of the
same shape (data_source, options, ids, handles, kind, errors, sink; tests/test_sink_packages.py):

    delta/               delta-eos: Parquet files, then one Delta commit per batch (delta-rs)
    kafka/               kafka-eos: Kafka transactions prepared by tasks, ended by the driver
    postgres/            postgres-eos: PREPARE TRANSACTION / COMMIT PREPARED

`from sinks import TwoPhaseCommitSink` (and TaskInfo, SinkSettings, TransactionLost) is the
template's public spelling. It is resolved on first use: the submodules (sinks.faults,
sinks.txn_log, ...) are imported by every Spark Python worker, which should not pay for the
template's own imports unless it runs a sink.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sinks.two_phase_commit import SinkSettings, TaskInfo, TransactionLost, TwoPhaseCommitSink

_EXPORTS = {
    name: "sinks.two_phase_commit"
    for name in ("TwoPhaseCommitSink", "SinkSettings", "TaskInfo", "TransactionLost")
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sinks' has no attribute {name!r}")
    return getattr(import_module(module), name)
