"""The oracle for Kafka output: reads raw record batches with Fetch (read_uncommitted) and
applies the COMMIT/ABORT control markers itself, so it is right on every broker, including the
embedded one, whose read_committed does not hide aborted records (docs/design.md#brokers). A
transactional batch from producer P on a partition counts only if P's next control marker there
is COMMIT; a non-transactional batch counts at once. It is in the wheel for `connectors demo`'s
verdict (connectors/demo/verify.py) and for users checking a `kafka-eos` sink's output on a
broker without read_committed (docs/testing.md): `committed(bootstrap, topic)`; the tests use it
too. Uses kafka-python's client, protocol
layer and record parser, not the product's commit code; only the translation of the `kafka.*`
security options to kafka-python's settings is shared (so that it reads secured clusters too).
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient
from kafka.net.compat import KafkaNetClient
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.record.memory_records import MemoryRecords

from connectors.core.kafka.cloud_tokens import librdkafka_client_conf
from connectors.core.kafka.python_security import kafka_python_config

FETCH_VERSION = 4  # record batches v2, isolation level


@dataclass(frozen=True, order=True)
class OutRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass
class PartitionLog:
    committed: list[OutRecord]
    aborted: list[OutRecord]
    open: list[OutRecord]  # transactional records with no marker yet
    markers: list[tuple[int, int, str]]  # (offset, producer id, "COMMIT"/"ABORT")


def _fetch(client: KafkaNetClient, node_id: int, topic: str, partition: int, offset: int):
    req = FetchRequest(
        replica_id=-1, max_wait_ms=200, min_bytes=1, max_bytes=8 << 20, isolation_level=0,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
            FetchRequest.FetchTopic.FetchPartition(
                partition=partition, fetch_offset=offset, partition_max_bytes=8 << 20)
        ])],
        version=FETCH_VERSION,
    )
    resp = client.send_and_receive(node_id, req, timeout_ms=30_000)
    part = resp.responses[0].partitions[0]
    if part.error_code:
        raise RuntimeError(f"Fetch {topic}-{partition}@{offset}: error {part.error_code}")
    return part.high_watermark, part.records


def _clients(bootstrap: str, options: Mapping[str, str] | None):
    """A metadata client and a fetching client for the cluster, TLS and SASL per `options`
    (librdkafka property names, as the pipelines' `kafka.*` options without the prefix)."""
    conf = {"bootstrap.servers": bootstrap, **(options or {})}
    net = KafkaNetClient(**kafka_python_config(conf))
    net.check_version(timeout_ms=30_000)  # bootstraps: the brokers' node ids become known
    return AdminClient(librdkafka_client_conf(conf)), net


def read_partition(bootstrap: str, topic: str, partition: int,
                   options: Mapping[str, str] | None = None) -> PartitionLog:
    admin, net = _clients(bootstrap, options)
    try:
        return _read_partition(admin, net, topic, partition)
    finally:
        net.close()


def _read_partition(admin: AdminClient, net: KafkaNetClient, topic: str,
                    partition: int) -> PartitionLog:
    md = admin.list_topics(topic, timeout=10)
    leader = md.topics[topic].partitions[partition].leader
    result = PartitionLog([], [], [], [])
    pending: dict[int, list[OutRecord]] = defaultdict(list)
    offset, high = 0, None
    while high is None or offset < high:
        high, records = _fetch(net, leader, topic, partition, offset)
        if not records:
            break
        progressed = False
        for batch in MemoryRecords(records):
            if batch.next_offset <= offset:
                continue
            progressed = True
            offset = batch.next_offset
            if batch.is_control_batch:
                for rec in batch:
                    _version, kind = struct.unpack(">hh", rec.key[:4])
                    marker = "COMMIT" if kind == 1 else "ABORT"
                    result.markers.append((rec.offset, batch.producer_id, marker))
                    done = pending.pop(batch.producer_id, [])
                    (result.committed if kind == 1 else result.aborted).extend(done)
                continue
            recs = [OutRecord(topic, partition, r.offset, r.key, r.value) for r in batch]
            if batch.is_transactional:
                pending[batch.producer_id].extend(recs)
            else:
                result.committed.extend(recs)
        if not progressed:
            break
    result.open = sorted(r for recs in pending.values() for r in recs)
    return result


def committed(bootstrap: str, topic: str,
              options: Mapping[str, str] | None = None) -> list[OutRecord]:
    """Every committed record of every partition of `topic`, in (partition, offset) order."""
    admin, net = _clients(bootstrap, options)
    try:
        md = admin.list_topics(topic, timeout=10)
        out: list[OutRecord] = []
        for p in sorted(md.topics[topic].partitions):
            out.extend(_read_partition(admin, net, topic, p).committed)
        return sorted(out)
    finally:
        net.close()
