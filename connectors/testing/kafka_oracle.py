"""The oracle for Kafka output: reads raw record batches with Fetch (read_uncommitted) and
applies the COMMIT/ABORT control markers itself, because the local broker's read_committed
does not hide aborted records (DESIGN.md section 6). A transactional batch from producer P on
a partition counts only if P's next control marker there is COMMIT; a non-transactional batch
counts at once. Used by the tests and by `connectors demo`. Uses kafka-python's protocol layer
and record parser, not the product's code.
"""

from __future__ import annotations

import socket
import struct
from collections import defaultdict
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.record.memory_records import MemoryRecords

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


def _fetch(host: str, port: int, topic: str, partition: int, offset: int):
    req = FetchRequest(
        replica_id=-1, max_wait_ms=200, min_bytes=1, max_bytes=8 << 20, isolation_level=0,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
            FetchRequest.FetchTopic.FetchPartition(
                partition=partition, fetch_offset=offset, partition_max_bytes=8 << 20)
        ])],
        version=FETCH_VERSION,
    )
    req.with_header(correlation_id=7, client_id="eos-oracle")
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(req.encode(version=FETCH_VERSION, header=True, framed=True))
        size = struct.unpack(">i", _exactly(sock, 4))[0]
        resp = FetchResponse.decode(_exactly(sock, size), version=FETCH_VERSION, header=True)
    part = resp.responses[0].partitions[0]
    if part.error_code:
        raise RuntimeError(f"Fetch {topic}-{partition}@{offset}: error {part.error_code}")
    return part.high_watermark, part.records


def _exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return bytes(buf)


def read_partition(bootstrap: str, topic: str, partition: int) -> PartitionLog:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    leader = md.topics[topic].partitions[partition].leader
    broker = md.brokers[leader]
    result = PartitionLog([], [], [], [])
    pending: dict[int, list[OutRecord]] = defaultdict(list)
    offset, high = 0, None
    while high is None or offset < high:
        high, records = _fetch(broker.host, broker.port, topic, partition, offset)
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


def committed(bootstrap: str, topic: str) -> list[OutRecord]:
    """Every committed record of every partition of `topic`, in (partition, offset) order."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    out: list[OutRecord] = []
    for p in sorted(md.topics[topic].partitions):
        out.extend(read_partition(bootstrap, topic, p).committed)
    return sorted(out)
