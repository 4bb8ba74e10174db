"""commitOffsetsToGroup: the end offsets of each completed batch, committed to `kafka.group.id`
so that kafka-consumer-groups, Burrow and lag dashboards see the query's position (Flink's
`commit.offsets.on.checkpoint`; asked of Spark in SPARK-27549).

Monitoring only: the checkpoint is the query's truth, the group's offsets are never read back,
and a commit that fails is a warning, never a failed batch. The committing consumer never
subscribes, so it never joins the group (a standalone commit: no generation, no member id) and
never triggers a rebalance of anyone else in it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from connectors.core.kafka.client import consumer_conf
from sources.offsets import PartitionOffsets

log = logging.getLogger(__name__)

#: How long a commit's answer is waited for before the next batch is planned. A healthy broker
#: answers in milliseconds; an unreachable coordinator costs this once, then the query goes on
#: without waiting while that commit is still unanswered.
WAIT_S = 2.0


class GroupOffsetCommitter:
    """One assign()-less consumer per stream reader, opened at the first commit."""

    def __init__(self, kafka_conf: Mapping[str, str], group: str, *, wait_s: float = WAIT_S) -> None:
        self._conf = dict(kafka_conf)
        self._conf["group.id"] = group
        self.group = group
        self._wait_s = wait_s
        self._consumer: Consumer | None = None
        self._outstanding = 0
        self._last: PartitionOffsets | None = None
        self.failures = 0

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_consumer"] = None
        state["_outstanding"] = 0
        return state

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        self._outstanding = max(0, self._outstanding - 1)
        failed = [tp for tp in partitions or [] if tp.error is not None]
        if err is None and not failed:
            return
        self.failures += 1
        detail = err.str() if err is not None else "; ".join(
            f"{tp.topic}-{tp.partition}: {tp.error.str()}" for tp in failed[:5])
        self._last = None  # committed again at the next batch
        log.warning("kafka-eos: committing offsets to consumer group %r failed (monitoring "
                    "only; the query goes on and its checkpoint is unaffected): %s",
                    self.group, detail)

    def _client(self) -> Consumer:
        if self._consumer is None:
            conf: dict[str, Any] = consumer_conf(self._conf)
            conf["on_commit"] = self._on_commit
            self._consumer = Consumer(conf)
        return self._consumer

    def commit(self, offsets: PartitionOffsets) -> bool:
        """Commit `offsets` (the next offset to read, per partition) unless they are the last
        ones committed; wait for the answer up to WAIT_S unless an earlier commit is still
        unanswered. True if a commit was sent. Never raises."""
        if not offsets or offsets == self._last:
            return False
        try:
            consumer = self._client()
            consumer.poll(0)  # answers to earlier commits
            waiting_already = self._outstanding > 0
            consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())],
                asynchronous=True,
            )
            self._outstanding += 1
            self._last = dict(offsets)
            if waiting_already:
                log.warning("kafka-eos: an earlier commit to consumer group %r is still "
                            "unanswered; not waiting for this one", self.group)
                return True
            deadline = time.monotonic() + self._wait_s
            while self._outstanding and time.monotonic() < deadline:
                consumer.poll(0.02)
            return True
        except Exception as e:
            self.failures += 1
            log.warning("kafka-eos: committing offsets to consumer group %r failed (monitoring "
                        "only; the query goes on): %s", self.group, e)
            self.close()
            return False

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        self._outstanding = 0
        if consumer is not None:
            try:
                consumer.close()
            except Exception as e:
                log.info("kafka-eos: closing the group commit consumer failed: %s", e)
