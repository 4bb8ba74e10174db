"""Counting a client's requests on the broker itself: Apache Kafka's request log.

The broker logs one "Completed request" line per request at DEBUG on `kafka.request.logger`,
naming the API and the client's `client.id`. The level is switched at run time through the
broker-logger config (IncrementalAlterConfigs on a BROKER_LOGGER resource, no restart), so a
test counts what a client really sent, round trips included that the client library makes on
its own (metadata refreshes, leader look-ups), without instrumenting the client. Needs a node
the test run controls (its log file): the suite's Apache Kafka node.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections import Counter
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

REQUEST_LOGGER = "kafka.request.logger"
_LINE = re.compile(r"Completed request:(\{.*\}) \(kafka\.request\.logger\)\s*$")


class RequestLog:
    """`with RequestLog(node) as log:` the node's request logging on; `log.mark()` a position,
    `log.counts(since, client_id)` the requests of that client since then, by API name."""

    def __init__(self, node, broker_id: str = "1") -> None:
        self.path = Path(node.log_file)
        self.bootstrap = node.bootstrap_servers
        self.broker_id = broker_id
        self._marker_id = f"request-log-marker-{uuid.uuid4().hex[:8]}"
        self._admin: AdminClient | None = None

    def _set_level(self, level: str) -> None:
        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            resource = ConfigResource(ConfigResourceType.BROKER_LOGGER, self.broker_id,
                                      configs={REQUEST_LOGGER: level})
            result = admin.alter_configs([resource])
        finally:
            admin.close()
        answer = result.get("broker_logger", {}).get(self.broker_id)
        if str(answer) != "OK":
            raise RuntimeError(f"setting {REQUEST_LOGGER}={level} failed: {result}")

    def __enter__(self) -> RequestLog:
        self._set_level("DEBUG")
        return self

    def __exit__(self, *exc: object) -> None:
        self._set_level("WARN")  # what the suite's broker logs otherwise (its `kafka` logger)

    def mark(self, timeout_s: float = 30) -> int:
        """A position after every request completed so far. The broker writes a request's line
        when its response has gone out, so a client can hold its answer before the line is in
        the file: a marker request (a Metadata request of this log's own client) is sent, and
        the position is the end of its line, once it is there."""
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap,
                                       "client.id": self._marker_id})
        start = os.path.getsize(self.path)
        self._admin.list_topics(timeout=15)
        deadline = time.monotonic() + timeout_s
        while True:
            end = self._marker_end(start)
            if end is not None:
                return end
            if time.monotonic() > deadline:
                raise TimeoutError(f"the broker's request log ({self.path}) did not show the "
                                   f"marker request within {timeout_s:.0f} s")
            time.sleep(0.05)

    def _marker_end(self, since: int) -> int | None:
        with open(self.path, "rb") as f:
            f.seek(since)
            position = since
            for line in f:
                position += len(line)
                if self._marker_id.encode() in line and b"Completed request:" in line:
                    return position
        return None

    def counts(self, since: int, client_id: str) -> Counter[str]:
        """Requests by API name (METADATA, LIST_OFFSETS, FETCH, ...) that `client_id` sent
        and the broker completed after position `since`, up to a fresh mark."""
        until = self.mark()
        found: Counter[str] = Counter()
        with open(self.path, "rb") as f:
            f.seek(since)
            for raw in f.read(until - since).decode(errors="replace").splitlines():
                match = _LINE.search(raw)
                if match is None:
                    continue
                header = json.loads(match.group(1)).get("requestHeader", {})
                if header.get("clientId") == client_id:
                    found[header.get("requestApiKeyName", str(header.get("requestApiKey")))] += 1
        return found


def wait_for_group_coordinator(bootstrap: str, group: str, timeout_s: float = 60) -> None:
    """Until `group`'s coordinator answers. A consumer with a group.id (the source's look-up
    client has one, as every consumer of a query) looks its coordinator up in the background;
    on a fresh broker that waits for the offsets topic to load (COORDINATOR_LOAD_IN_PROGRESS),
    and the lookup's retries would be counted with whatever the test measures."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin.describe_consumer_groups([group])[group].result(15)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
