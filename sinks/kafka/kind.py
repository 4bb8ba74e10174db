"""The `kafka-eos` sink kind (sinks/kinds.py): how `kafka-eos inspect` shows its handles (open
transactions, their age against the transaction timeout) and which sink `resolve` ends them
with (the query's transactional ids, read from the handles).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sinks.kafka.handles import KIND
from sinks.kafka.ids import parse_transactional_id
from sinks.kinds import PendingBatch, ResolveError, SinkKind, duration_text, register

if TYPE_CHECKING:
    from sinks.kafka.sink import KafkaSink


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
        from sinks.kafka.options import KafkaSinkOptions
        from sinks.kafka.sink import KafkaSink

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
