"""Reading the output to settle a prepared transaction whose commit the coordinator refused
(docs/design.md#kafka-commits): the partitions' leaders and end offsets (Metadata, ListOffsets),
and the raw record batches (Fetch, read_uncommitted) after the transaction's records, where the
control marker of its producer id says whether it was committed, aborted, or is still open.
Sent on the commit client's connections (commit_client.py).
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Iterable

from sinks.kafka.commit_client import (
    ABORTED,
    COMMITTED,
    NONE,
    OFFSET_OUT_OF_RANGE,
    OPEN,
    Cluster,
    OutcomeUnreadable,
    PreparedTxn,
    TxnAuthorizationError,
    commit_client,
    txn_error,
)

TopicPartition = tuple[str, int]


def partition_leaders(
    cluster: Cluster, topics: Iterable[str], timeout_s: float = 10.0
) -> dict[TopicPartition, int]:
    """(topic, partition) -> the leader's node id, for the topics the broker knows."""
    from kafka.protocol.metadata.metadata import MetadataRequest

    wanted = sorted(set(topics))
    client = commit_client(cluster)
    r = client.call(
        MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in wanted],
            allow_auto_topic_creation=False, version=4,
        ),
        timeout_s=timeout_s,
    )
    client.learn_brokers(r)
    brokers = {b.node_id for b in r.brokers}
    leaders: dict[TopicPartition, int] = {}
    for t in r.topics:
        error = txn_error(t.error_code, f"Metadata({t.name})")
        if isinstance(error, TxnAuthorizationError):
            raise error
        for p in t.partitions:
            if p.error_code == NONE and p.leader_id in brokers:
                leaders[(t.name, p.partition_index)] = p.leader_id
    return leaders


def end_offsets(
    cluster: Cluster, topics: Iterable[str], timeout_s: float = 10.0
) -> dict[TopicPartition, int]:
    """The latest offset of every partition of `topics` (read_uncommitted): any record
    produced after this call lies at or above it. One Metadata request, then one ListOffsets
    per leader."""
    from kafka.protocol.consumer.offsets import ListOffsetsRequest

    by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
    for tp, leader in partition_leaders(cluster, topics, timeout_s).items():
        by_leader[leader].append(tp)
    out: dict[TopicPartition, int] = {}
    for node, tps in by_leader.items():
        by_topic: dict[str, list[int]] = defaultdict(list)
        for t, p in tps:
            by_topic[t].append(p)
        request = ListOffsetsRequest(
            replica_id=-1, isolation_level=0, version=2,
            topics=[ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=[
                ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=p, timestamp=-1)
                for p in ps
            ]) for t, ps in by_topic.items()],
        )
        r = commit_client(cluster).call(request, node, timeout_s=timeout_s)
        for t in r.topics:
            for p in t.partitions:
                if p.error_code == NONE and p.offset >= 0:
                    out[(t.name, p.partition_index)] = p.offset
    return out


FETCH_VERSION = 5  # record batches v2, isolation level, log start offset


def _fetch(cluster: Cluster, node: int, tp: TopicPartition, offset: int, timeout_s: float):
    from kafka.protocol.consumer.fetch import FetchRequest

    request = FetchRequest(
        replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=8 << 20, isolation_level=0,
        topics=[FetchRequest.FetchTopic(topic=tp[0], partitions=[
            FetchRequest.FetchTopic.FetchPartition(
                partition=tp[1], fetch_offset=offset, partition_max_bytes=8 << 20)
        ])],
        version=FETCH_VERSION,
    )
    response = commit_client(cluster).call(request, node, timeout_s=timeout_s)
    return response.responses[0].partitions[0]


def _unreadable(txn: PreparedTxn, tp: TopicPartition, start: int, why: str) -> OutcomeUnreadable:
    return OutcomeUnreadable(
        f"the records of transaction {txn.transactional_id} (producer id {txn.producer_id}, "
        f"epoch {txn.producer_epoch}) in {tp[0]}-{tp[1]} from offset {start} are {why}"
    )


def _earliest_offset(cluster: Cluster, node: int, tp: TopicPartition, timeout_s: float) -> int:
    from kafka.protocol.consumer.offsets import ListOffsetsRequest

    request = ListOffsetsRequest(
        replica_id=-1, isolation_level=0, version=2,
        topics=[ListOffsetsRequest.ListOffsetsTopic(name=tp[0], partitions=[
            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=tp[1], timestamp=-2)
        ])],
    )
    response = commit_client(cluster).call(request, node, timeout_s=timeout_s)
    part = response.topics[0].partitions[0]
    error = txn_error(part.error_code, f"ListOffsets({tp[0]}-{tp[1]}, earliest)")
    if error is not None:
        raise error
    return part.offset


def partition_outcome(
    cluster: Cluster, node: int, tp: TopicPartition, start: int | None, txn: PreparedTxn,
    timeout_s: float = 10.0,
) -> str:
    """COMMITTED, ABORTED or OPEN: the control marker of the transaction's producer id that
    follows its first record batch in this partition (a producer has one transaction open at a
    time, so that marker ends this one). `start` must be at or below the transaction's first
    record (None: the log start). Raises OutcomeUnreadable if the records are not (or no
    longer) there."""
    from kafka.record.memory_records import MemoryRecords

    if start is None:
        start = _earliest_offset(cluster, node, tp, timeout_s)
    offset, found = start, False
    while True:
        part = _fetch(cluster, node, tp, offset, timeout_s)
        if part.error_code == OFFSET_OUT_OF_RANGE or 0 <= offset < part.log_start_offset:
            raise _unreadable(txn, tp, start, f"gone (the log now starts at offset "
                                               f"{part.log_start_offset}: retention deleted them?)")
        error = txn_error(part.error_code, f"Fetch({tp[0]}-{tp[1]}@{offset})")
        if error is not None:
            raise error
        progressed = False
        for batch in MemoryRecords(part.records or b""):
            if batch.next_offset <= offset:
                continue
            progressed, offset = True, batch.next_offset
            if batch.producer_id != txn.producer_id:
                continue
            if not batch.is_control_batch:
                found = found or batch.producer_epoch == txn.producer_epoch
            elif found:
                kind = struct.unpack(">hh", next(iter(batch)).key[:4])[1]
                return COMMITTED if kind == 1 else ABORTED
        if not progressed or offset >= part.high_watermark:
            if found:
                return OPEN
            raise _unreadable(txn, tp, start, f"not in the log (read up to offset {offset})")


def transaction_outcome(
    cluster: Cluster,
    txn: PreparedTxn,
    starts: dict[TopicPartition, int | None],
    timeout_s: float = 10.0,
) -> str:
    """Settle a transaction from the output: COMMITTED or ABORTED as soon as one partition it
    wrote shows the marker that ends it (the coordinator writes the same one to every
    partition); OPEN if its records are there with no marker after them. `starts` maps each
    partition it wrote to an offset at or below its first record there (None: read from the
    log start). Raises OutcomeUnreadable if no partition can tell, TransientTxnError if the
    broker cannot be read now."""
    leaders = partition_leaders(cluster, {t for t, _ in starts}, timeout_s)
    outcomes: list[str] = []
    unreadable: list[str] = []
    for tp, start in sorted(starts.items()):
        if tp not in leaders:
            unreadable.append(f"{tp[0]}-{tp[1]}: the partition has no leader or does not exist")
            continue
        try:
            outcome = partition_outcome(cluster, leaders[tp], tp, start, txn, timeout_s)
        except OutcomeUnreadable as e:
            unreadable.append(str(e))
            continue
        if outcome != OPEN:
            return outcome
        outcomes.append(outcome)
    if outcomes:
        return OPEN
    raise OutcomeUnreadable("; ".join(unreadable) or "the transaction wrote no partition")
