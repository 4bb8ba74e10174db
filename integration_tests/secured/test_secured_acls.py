"""The authorizer's refusals, end to end: a principal that may write the output topic but lacks
the TransactionalId ACL fails an exactly-once `kafka-eos` sink query at its start, and the error
names the ACL to add (`sinks.kafka.commit_client.acl_needed`), rather than retrying until a timeout.

Real Apache Kafka with the StandardAuthorizer (the session's node): the user `limited` over the
SASL_SSL listener (SCRAM-SHA-512), with ACLs on the output topic only, given through the
PLAINTEXT listener (a super user).
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from integration_tests.support.kafka_data import create_topic
from integration_tests.support.secured import secured_cluster

#: Only tells a refusal from a hang (Spark's first batch in a fresh session on a loaded 2-core
#: machine took 47 s); the test asserts what ran, not how fast.
NOT_A_HANG_S = 300


def _allow(admin_bootstrap: str, user: str, topic: str,
           operations: tuple[AclOperation, ...]) -> None:
    admin = AdminClient({"bootstrap.servers": admin_bootstrap})
    bindings = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                           f"User:{user}", "*", op, AclPermissionType.ALLOW)
                for op in operations]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)


def test_exactly_once_sink_without_the_transactional_id_acl_fails_at_start_naming_it(
        spark, secured_kafka, tmp_path):
    limited = secured_cluster(secured_kafka, "SASL_SSL", mechanism="SCRAM-SHA-512",
                              user="limited")
    plaintext = secured_kafka.node.address("PLAINTEXT")
    topic = f"acl-out-{uuid.uuid4().hex[:8]}"
    create_topic(plaintext, topic, 1)
    _allow(plaintext, "limited", topic,
           (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE))
    prefix = f"acl-test-{uuid.uuid4().hex[:8]}"

    query = (spark.readStream.format("rate").option("rowsPerSecond", "5").load()
             .selectExpr("CAST(value AS STRING) AS value")
             .writeStream.format("kafka-eos")
             .option("kafka.bootstrap.servers", limited.bootstrap_servers)
             .options(**limited.options())
             .option("topic", topic).option("deliveryGuarantee", "exactly-once")
             .option("transactionalIdPrefix", prefix)
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        with pytest.raises(Exception) as info:
            query.awaitTermination(NOT_A_HANG_S)
            pytest.fail("the query did not fail")
    finally:
        query.stop()
    message = str(info.value)
    # Refused when the sink starts (its driver-side check, before batch 0's tasks), not at the
    # first batch that carries rows (the rate source's batch 0 has none): no batch completed.
    assert query.recentProgress == [], query.recentProgress
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in message, message[-3000:]
    # the ACL to add, for the query's own prefix
    assert f"WRITE (and DESCRIBE) on TransactionalId '{prefix}*'" in message, message[-3000:]
    assert (f"--transactional-id '{prefix}' --resource-pattern-type prefixed"
            in message), message[-3000:]
    assert limited.users["limited"] not in message
