"""The `kafka-eos` sink's handles: one open Kafka transaction each (sinks/kafka/kind.py shows
and settles them for `kafka-eos inspect` and `resolve`).

A task's transaction is prepared (flushed, left open on the broker) and its handle says how the
driver ends it: EndTxn with the transactional id, producer id and epoch; the output partitions
it wrote, and where to read them from to settle a commit the coordinator refused.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from connectors.core.kafka.format import FORMAT_NAME

KIND = FORMAT_NAME


class KafkaHandle(TypedDict):
    #: Absent from handles written before handles recorded their kind.
    kind: NotRequired[Literal["kafka-eos"]]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    #: [topic, partition] of each output partition the transaction wrote
    partitions: list[list[Any]]
    began_ms: int
    #: transaction.timeout.ms of the producer: past it, the broker aborts the transaction
    timeout_ms: int
    #: [topic, partition, offset]: an offset below every record of the batch there
    scan_from: list[list[Any]]


def kafka_handle(transactional_id: str, producer_id: int, producer_epoch: int, *,
                 partitions: list[list[Any]], began_ms: int, timeout_ms: int,
                 scan_from: list[list[Any]]) -> KafkaHandle:
    return {"kind": KIND, "partitions": partitions, "transactional_id": transactional_id,
            "producer_id": producer_id, "producer_epoch": producer_epoch,
            "began_ms": began_ms, "timeout_ms": timeout_ms, "scan_from": scan_from}
