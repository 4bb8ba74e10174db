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

    def mark(self) -> int:
        return os.path.getsize(self.path)

    def counts(self, since: int, client_id: str) -> Counter[str]:
        """Requests by API name (METADATA, LIST_OFFSETS, FETCH, ...) that `client_id` sent
        and the broker completed after position `since`."""
        found: Counter[str] = Counter()
        with open(self.path, errors="replace") as f:
            f.seek(since)
            for line in f:
                match = _LINE.search(line)
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
