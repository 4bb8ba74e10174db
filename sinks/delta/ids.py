"""The `delta-eos` sink's app ids, built here only.

The app id keys the sink's Delta `txn` actions (`transaction_version(app_id)` tells whether a
batch is in the table) and names its data files (`file_tag`, for the orphan clean-up):

    delta-eos-<writer identity>   a streaming query: the identity recorded in its checkpoint's
                                  transaction log at its first exactly-once start (the query
                                  id), or for checkpoints of earlier versions a digest of the
                                  checkpoint path (`legacy_identity`)
    delta-eos-batch-<job id>      a batch write: names its files only (no txn action)
    the appId option              when the user gives one
"""

from __future__ import annotations

from connectors.core.digest import short_digest
from sinks.query_identity import recorded_writer_identity
from sinks.txn_log import TransactionLog

APP_ID_HEAD = "delta-eos-"


def streaming_app_id(identity: str) -> str:
    return APP_ID_HEAD + identity


def batch_app_id(job_id: str) -> str:
    return f"{APP_ID_HEAD}batch-{job_id}"


def legacy_identity(origin: str) -> str:
    """The writer identity of versions before it was recorded: derived from the checkpoint
    path (or the table path, without a checkpoint)."""
    return short_digest(origin)


def file_tag(app_id: str) -> str:
    """In every data file's name: whose files they are, for the orphan clean-up."""
    return short_digest(app_id)


def recorded_app_id(txlog: TransactionLog) -> str:
    """The app id a streaming query's sink keys its txn actions on, read from its checkpoint
    without writing to it: the recorded writer identity, else the path-derived one."""
    identity = recorded_writer_identity(txlog)
    return streaming_app_id(identity if identity is not None else legacy_identity(txlog.location))
