"""A reset checkpoint (deleted, and a new query started on the same path) with the `kafka-eos`
sink: the new query writes every one of its records (nothing is skipped as "already
committed"), and the old query's open transaction is fenced at once by the new query's first
tasks (the default transactionalIdPrefix derives from the checkpoint path), instead of holding
read_committed readers at the last stable offset until the transaction timeout."""

from __future__ import annotations

import collections
import shutil

import pytest
from confluent_kafka import KafkaException, Producer

from connectors.core.options import Options
from connectors.local.kafka_oracle import committed, read_partition
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.processes import run_pipeline
from sinks.kafka.ids import default_prefix, transactional_id
from sinks.two_phase_commit import SinkSettings

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"
PARTITIONS, PER_PARTITION = 3, 60


def test_a_reset_checkpoint_writes_everything_and_fences_the_old_query(bootstrap, tmp_path):
    out = unique_topic("kreset-out")
    create_topic(bootstrap, out, PARTITIONS)
    checkpoint = str(tmp_path / "ckpt")
    log_path = str(tmp_path / "pipeline.log")

    def run(start_index: int):
        topic = unique_topic("kreset-in")
        create_topic(bootstrap, topic, PARTITIONS)
        records = produce(bootstrap, topic, PARTITIONS, PER_PARTITION, start_index=start_index)
        run_pipeline(PIPELINE, "--bootstrap", bootstrap, "--topic", topic, "--checkpoint",
                     checkpoint, "--out-topic", out, log_path=log_path)
        return records

    old_records = run(0)
    # The old query left a transaction open (a task of its last run that never finished),
    # under the id its partition 0, attempt 0 uses.
    settings = SinkSettings.from_options("kafka-eos", Options({"checkpointLocation": checkpoint}))
    prefix = default_prefix(settings.checkpoint_location, bootstrap, out)
    zombie = Producer({"bootstrap.servers": bootstrap,
                       "transactional.id": transactional_id(prefix, 0, 0)})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    for i in range(5):
        zombie.produce(out, key=b"old-query", value=f"o{i}".encode(), partition=0)
    zombie.flush(10)
    assert read_partition(bootstrap, out, 0).open, "the old query's transaction should be open"

    shutil.rmtree(checkpoint)  # the reset
    new_records = run(1_000)

    got = collections.Counter((r.key, r.value) for r in committed(bootstrap, out))
    want = collections.Counter((r.key, r.value) for r in old_records + new_records)
    missing = sorted(set(want) - set(got))
    assert not missing, f"{len(missing)} records of the new query skipped, e.g. {missing[:3]}"
    assert got == want  # each once; none of the old query's open transaction
    for p in range(PARTITIONS):
        assert read_partition(bootstrap, out, p).open == [], f"a transaction still open in {out}-{p}"
    with pytest.raises(KafkaException):
        zombie.commit_transaction(10)  # fenced
