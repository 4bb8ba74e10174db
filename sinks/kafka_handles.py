"""The `kafka-eos` sink's handles: one open Kafka transaction each, and the sink kind that shows
and settles them for `kafka-eos inspect` and `resolve` (sinks/kinds.py).

A task's transaction is prepared (flushed, left open on the broker) and its handle says how the
driver ends it: EndTxn with the transactional id, producer id and epoch; the output partitions
it wrote, and where to read them from to settle a commit the coordinator refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict

from sinks.kafka_ids import parse_transactional_id
from sinks.kinds import PendingBatch, ResolveError, SinkKind, duration_text, register

if TYPE_CHECKING:
    from sinks.kafka import KafkaSink

KIND = "kafka-eos"


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


class KafkaKind(SinkKind):
    name = KIND
    legacy_keys = ("transactional_id",)

    def describe(self, handle: Mapping[str, Any], now_ms: int, open_txn: bool) -> dict[str, Any]:
        """For an open transaction, its age against transaction.timeout.ms: past it, Kafka
        aborts the transaction and the replay rewrites the partition."""
        out: dict[str, Any] = {
            "transactional_id": handle["transactional_id"],
            "producer_id": handle.get("producer_id"),
            "producer_epoch": handle.get("producer_epoch"),
            "output_partitions": [f"{t}-{p}" for t, p in handle.get("partitions", [])],
        }
        began, timeout = handle.get("began_ms"), handle.get("timeout_ms")
        if open_txn and began and timeout:
            age_ms = now_ms - int(began)
            out.update(began_ms=int(began), timeout_ms=int(timeout), age_s=round(age_ms / 1000, 1),
                       timeout_left_s=round((int(timeout) - age_ms) / 1000, 1),
                       timed_out=age_ms >= int(timeout))
        return out

    def text(self, described: Mapping[str, Any]) -> str:
        e = described
        text = (f"kafka txn {e['transactional_id']} (producer {e['producer_id']}, epoch "
                f"{e['producer_epoch']})")
        if "age_s" in e:
            if e["timed_out"]:
                text += (f" open {duration_text(e['age_s'])}: PAST its timeout "
                         f"({e['timeout_ms'] // 1000} s); Kafka aborts it, the replay rewrites it")
            else:
                text += (f" open {duration_text(e['age_s'])} of its {e['timeout_ms'] // 1000} s "
                         f"timeout ({duration_text(e['timeout_left_s'])} left)")
        return text

    def recovery_sink(self, batch: PendingBatch) -> KafkaSink:
        """The query's sink as far as EndTxn needs it: the cluster (named by the operator) and
        the ids' prefix, read from the handles' own ids."""
        from sinks.kafka import KafkaSink, KafkaSinkOptions

        store = batch.store
        if not store.kafka_conf.get("bootstrap.servers"):
            raise ResolveError("the log holds kafka-eos transactions: name the cluster with "
                               "--bootstrap HOST:PORT (or bootstrap.servers in --kafka-config)")
        prefixes = {_prefix(h["transactional_id"]) for h in batch.handles}
        if len(prefixes) != 1:
            raise ResolveError(f"batch {batch.plan.batch_id}: transactions of several "
                               f"transactional id prefixes ({sorted(prefixes)}): not settled "
                               "by resolve")
        return KafkaSink(batch.settings(KIND),
                         KafkaSinkOptions(dict(store.kafka_conf), None, prefixes.pop(), 60.0))


def _prefix(tid: str) -> str:
    parsed = parse_transactional_id(tid)
    if parsed is None:
        raise ResolveError(f"{tid!r} is not a kafka-eos transactional id "
                           "(<prefix>-<partition>-<attempt>)")
    return parsed.prefix


register(KafkaKind())
