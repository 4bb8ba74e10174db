"""Consumers kept between tasks in one Python worker process (Spark reuses its Python workers:
`spark.python.worker.reuse`, true by default), so that a micro-batch's task does not pay for a
new librdkafka consumer, its connection and its TLS / SASL handshake every time.

The pool is keyed by the consumer's full configuration (credentials, `group.id` included: one
query's consumers are never lent to another query or to other credentials), not by
topic-partition: a Python worker runs whichever partition's task Spark hands it, and one
consumer per configuration per worker serves them all. A task takes a consumer, `assign()`s it
at its range's start, reads, and gives it back `unassign()`ed; a consumer whose range did not
complete (an exception, data loss, a task cancelled) is closed, never given back.

Bounds, as Spark's Kafka consumer cache (`spark.kafka.consumer.cache.capacity` = 64,
`spark.kafka.consumer.cache.timeout` = 5m), here the source options
`kafkaConsumer.cache.capacity` and `kafkaConsumer.cache.timeout`: at most `capacity` idle
consumers per process (least recently used closed first; 0 turns pooling off), and an idle one is
closed once it has been idle for `timeout` (checked when the pool is used and by a daemon thread).
The pool is per process, so the settings last given (by the latest task) apply to it.

Thread-safe: the bookkeeping is under a lock; consumers are created and closed outside it. A
pool inherited through fork() (Spark's daemon forks its workers) is dropped, not used: a
librdkafka client does not survive a fork.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer

from connectors.core.digest import short_digest
from connectors.core.kafka.client import consumer_conf

log = logging.getLogger(__name__)

DEFAULT_CAPACITY = 64
DEFAULT_TIMEOUT_MS = 5 * 60_000

#: When set, a directory: each take appends "<pid> <key> created|reused <topic>-<partition>"
#: to <dir>/<pid>.log (tests read it to check that consumers are reused across batches).
STATS_ENV = "KAFKA_EOS_CONSUMER_POOL_STATS"


def pool_key(conf: Mapping[str, Any]) -> str:
    """A digest of the whole configuration: consumers are shared only between identical
    configurations, and the key can be logged without showing any value."""
    text = json.dumps(sorted((str(k), str(v)) for k, v in conf.items()))
    return short_digest(text)


@dataclass
class _Idle:
    consumer: Any
    key: str
    idle_since: float
    timeout_s: float
    last_tp: tuple[str, int] | None = None


@dataclass
class PoolStats:
    created: int = 0
    reused: int = 0
    closed: int = 0
    evicted: int = 0  # closed because of capacity
    expired: int = 0  # closed because idle for longer than the timeout


class ConsumerPool:
    def __init__(self, *, factory: Callable[[Mapping[str, Any]], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic, reaper: bool = True) -> None:
        self._factory = factory or (lambda conf: Consumer(consumer_conf(conf)))
        self._clock = clock
        self._lock = threading.Lock()
        self._idle: list[_Idle] = []  # least recently returned first
        self._capacity = DEFAULT_CAPACITY
        self._pid = os.getpid()
        self._reaper_wanted = reaper
        self._reaper: threading.Thread | None = None
        self.stats = PoolStats()

    # -- lending -------------------------------------------------------------------------------

    def take(self, conf: Mapping[str, Any], tp: tuple[str, int] | None = None) -> Any:
        """A consumer for `conf`: an idle one of the same configuration (preferably the one that
        last read `tp`), or a new one. Unassigned either way; the caller assigns it."""
        key = pool_key(conf)
        expired = self._check_fork_and_expire()
        self._close_all(expired, "expired")
        found = None
        with self._lock:
            same = [i for i, e in enumerate(self._idle) if e.key == key]
            if same:
                pick = next((i for i in reversed(same) if self._idle[i].last_tp == tp), same[-1])
                found = self._idle.pop(pick).consumer
                self.stats.reused += 1
        reused = found is not None
        if found is None:
            found = self._factory(conf)
            with self._lock:
                self.stats.created += 1
        _record(key, "reused" if reused else "created", tp)
        return found

    def give_back(self, consumer: Any, conf: Mapping[str, Any], *,
                  tp: tuple[str, int] | None = None,
                  capacity: int = DEFAULT_CAPACITY, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        """Return a consumer whose range completed. It is unassigned first (it stops fetching,
        and nothing of its old assignment can reach the next task); if that fails, or pooling
        is off (capacity 0), it is closed instead."""
        try:
            consumer.unassign()
        except Exception as e:  # a consumer in doubt is not lent again
            log.info("kafka-eos: closing a consumer that could not be unassigned: %s", e)
            self.discard(consumer)
            return
        key = pool_key(conf)
        evicted: list[_Idle] = []
        with self._lock:
            self._capacity = max(0, capacity)
            self._idle.append(_Idle(consumer, key, self._clock(), max(0, timeout_ms) / 1000, tp))
            while len(self._idle) > self._capacity:
                evicted.append(self._idle.pop(0))
            self.stats.evicted += len(evicted)
            start_reaper = self._reaper_wanted and self._reaper is None and self._idle
            if start_reaper:
                self._reaper = threading.Thread(target=self._reap, name="kafka-eos-consumer-pool",
                                                daemon=True)
        if start_reaper:
            self._reaper.start()  # type: ignore[union-attr]
        self._close_all(evicted, "evicted")

    def discard(self, consumer: Any) -> None:
        """Close a consumer that must not be lent again (its range failed)."""
        self._close(consumer)

    # -- bookkeeping ---------------------------------------------------------------------------

    def idle_count(self) -> int:
        with self._lock:
            return len(self._idle)

    def close_all(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        self._close_all(idle, "closed")

    def expire(self) -> None:
        """Close the consumers idle for longer than their timeout (also run by the reaper)."""
        self._close_all(self._check_fork_and_expire(), "expired")

    def _check_fork_and_expire(self) -> list[_Idle]:
        now = self._clock()
        with self._lock:
            if os.getpid() != self._pid:
                # Inherited through fork(): the parent's clients are not usable here, and
                # closing them could disturb the parent's. Forget them.
                self._idle, self._pid, self._reaper = [], os.getpid(), None
                self.stats = PoolStats()
                return []
            expired = [e for e in self._idle if now - e.idle_since >= e.timeout_s]
            if expired:
                self._idle = [e for e in self._idle if now - e.idle_since < e.timeout_s]
                self.stats.expired += len(expired)
            return expired

    def _reap(self) -> None:
        while True:
            with self._lock:
                if os.getpid() != self._pid or not self._idle:
                    self._reaper = None
                    return
                now = self._clock()
                wait = min(e.idle_since + e.timeout_s for e in self._idle) - now
            time.sleep(min(max(wait, 0.05), 30.0))
            self.expire()

    def _close_all(self, entries: list[_Idle], why: str) -> None:
        for e in entries:
            log.info("kafka-eos: closing a pooled consumer (%s, configuration %s)", why, e.key)
            self._close(e.consumer)

    def _close(self, consumer: Any) -> None:
        with self._lock:
            self.stats.closed += 1
        try:
            consumer.close()
        except Exception as e:  # closing is best effort
            log.info("kafka-eos: closing a consumer failed: %s", e)


def _record(key: str, what: str, tp: tuple[str, int] | None) -> None:
    where = os.environ.get(STATS_ENV)
    if not where:
        return
    try:
        os.makedirs(where, exist_ok=True)
        pid = os.getpid()
        with open(os.path.join(where, f"{pid}.log"), "a") as f:
            f.write(f"{pid} {key} {what} {tp[0] if tp else '-'}-{tp[1] if tp else '-'}\n")
    except OSError as e:  # statistics must never fail a read
        log.info("kafka-eos: cannot record consumer pool statistics: %s", e)


#: The process's pool.
POOL = ConsumerPool()
