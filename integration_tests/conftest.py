"""Shared fixtures: one real broker and one real local Spark session per test run."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

import pytest

from connectors.core.logs import LEVEL_ENV
from connectors.local.apache_kafka import KAFKA_CDS_ENV
from connectors.local.broker_handle import Broker
from connectors.local.spark import SPARK_CDS_ENV, local_spark
from integration_tests.support.brokers import kafka_broker
from integration_tests.support.class_sharing import (
    dump_kafka_archives,
    ensure_archive,
    kafka_archive_dir,
)
from sources.batch_metrics import SOURCE_METRICS_ENV
from sources.consumer_pool import STATS_ENV

# Before any Spark starts, so its Python workers inherit it: the source's consumer pool counts
# created and reused consumers there (integration_tests/source/test_consumer_pool.py reads them).
os.environ.setdefault(STATS_ENV, tempfile.mkdtemp(prefix="kafka-eos-pool-stats-"))
# Likewise the source's per-batch metrics lines
# (integration_tests/source/test_source_monitoring.py).
os.environ.setdefault(SOURCE_METRICS_ENV, os.path.join(
    tempfile.mkdtemp(prefix="kafka-eos-source-metrics-"), "batches.jsonl"))
# The suite opts in to the package's structured log lines, as the CLI and the demo do
# (connectors/core/logs.py): its Spark sessions and pipelines log them with level and logger
# name, which a failure's output shows and integration_tests/operations/test_quiet_stop.py searches.
os.environ.setdefault(LEVEL_ENV, "INFO")


# Before any Spark starts, too: every driver JVM of the run (this process's, the pipelines',
# the demo's) maps one class-data-sharing archive of Spark's classes, dumped once per machine
# into the jars' cache, instead of loading them from the jars again (about 6-8 s of CPU per
# Spark start; integration_tests/support/class_sharing.py). Without one the suite only runs
# slower.
if SPARK_CDS_ENV not in os.environ:
    os.environ[SPARK_CDS_ENV] = str(ensure_archive() or "")

# Likewise every Kafka node and storage format of the run maps an archive of its classes once
# one is dumped (connectors/local/apache_kafka.py: KAFKA_CDS_ENV), which a thread of the first
# test process does beside the first tests (about 25 s, once per machine); JVMs started before
# it is done load their classes from the jars.
if KAFKA_CDS_ENV not in os.environ:
    os.environ[KAFKA_CDS_ENV] = str(kafka_archive_dir())
    threading.Thread(target=dump_kafka_archives, args=(Path(os.environ[KAFKA_CDS_ENV]),),
                     name="kafka-cds-dump", daemon=True).start()


#: The longest modules (minutes each: sequences of killed and restarted Spark processes) are
#: handed out first, so that the xdist workers of the default run (pyproject.toml's addopts,
#: `--dist loadfile --no-loadscope-reorder`: xdist's own reordering, by number of tests per
#: module, would hand the one-test crash matrices out last) end together instead of one running
#: a long module alone at the end. By module basename, whichever sub-package holds it (basenames
#: are unique: tests/test_architecture.py checks). From the suite's profile on 2 cores
#: (docs/testing.md), 2026-11-28: the two workers' sums came within 5 s of each other, the
#: three workers' of the evening within 15 s. `test_operations` moved down when its six Spark
#: applications became two (2026-11-29: 40 s of wall, from 85-260 s).
LONGEST_FIRST = (
    "test_crash_matrix", "test_cluster_faults", "test_spark_cluster", "test_network_partitions",
    "test_demo",
    "test_benchmarks_smoke", "test_storage_faults", "test_chained_kafka", "test_peers_interop",
    "test_secured_clusters", "test_oauth_lane", "test_operations", "test_delta_operations",
    "test_kafka_crash_matrix", "test_schema_registry_source", "test_delta_s3", "test_streaming",
    "test_schema_registry_sink", "test_postgres_crash_matrix", "test_kafka_sink_reset",
    "test_kafka_sink_commit", "test_delta_sink", "test_postgres_sink", "test_delta_crash_matrix",
    "test_demo_secured", "test_secured_refusals", "test_first_pipeline", "test_batch_write",
    "test_spark_connect", "test_netns", "test_many_partitions", "test_kill_restart",
    "test_quiet_stop", "test_deep_backlog", "test_many_topics", "test_schema_registry_server",
    "test_kafka_cluster",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def order(item: pytest.Item) -> int:
        module = getattr(item, "module", None)
        return rank.get(module.__name__.rsplit(".", 1)[-1] if module else "", len(rank))

    items.sort(key=order)  # stable: the rest keep their order


def pytest_report_header(config: pytest.Config) -> str:
    from integration_tests.support.brokers import broker_choice

    archive = os.environ.get(SPARK_CDS_ENV) or "none (Spark loads its classes from its jars)"
    return f"Kafka broker: {broker_choice()}\nSpark class-data-sharing archive: {archive}"


@pytest.fixture(scope="session")
def broker() -> Broker:
    with kafka_broker() as b:
        print(f"\nKafka broker for this run: {b.kind} at {b.bootstrap_servers}")
        yield b


@pytest.fixture(scope="session")
def broker_v3() -> Broker:
    """Apache Kafka 3.9 (transaction version before KIP-890 part 2), started on first use: the
    second cluster generation of the Kafka sink's commit tests, crash matrix and kill-restart."""
    from connectors.local.apache_kafka import GENERATION_3
    from integration_tests.support.brokers import apache_kafka_broker

    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip():
        pytest.skip("KAFKA_BOOTSTRAP_SERVERS names the cluster under test: the 3.9 lane starts "
                    "an Apache Kafka 3.9 node of its own only when no cluster is given")
    with apache_kafka_broker(GENERATION_3) as b:
        print(f"\nKafka 3.9 broker for this run: {b.bootstrap_servers}")
        yield b


@pytest.fixture(params=["kafka-4", "kafka-3.9"])
def any_broker(request: pytest.FixtureRequest) -> Broker:
    """Each cluster generation in turn: Apache Kafka 4.x (transaction.version 2) and 3.9."""
    return request.getfixturevalue("broker" if request.param == "kafka-4" else "broker_v3")


@pytest.fixture
def freezable_broker(broker: Broker) -> Broker:
    """The broker, for tests that freeze it (SIGSTOP of Tansu, pause of a container)."""
    if not broker.supports("freeze"):
        pytest.skip(f"cannot freeze the {broker.kind} broker: it runs outside this machine's "
                    "control")
    return broker


@pytest.fixture(scope="session")
def secured_kafka(broker: Broker) -> Broker:
    """The Apache Kafka node whose own secured listeners the secured tests use: the session's
    broker when it is one (integration_tests/support/secured.py)."""
    from integration_tests.support.secured import secured_kafka_broker

    with secured_kafka_broker(broker) as b:
        yield b


@pytest.fixture(scope="session")
def bootstrap(broker: Broker) -> str:
    return broker.bootstrap_servers


@pytest.fixture(scope="session")
def spark():
    session = local_spark("kafka-eos-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def postgres():
    """A throwaway PostgreSQL server for the postgres-eos tests, or a skip saying why not."""
    from integration_tests.support.postgres import postgres_server, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with postgres_server() as server:
        print(f"\nPostgreSQL for this run: {server.version} at {server.host}:{server.port}")
        yield server


@pytest.fixture(scope="session")
def schema_registry():
    """A real Confluent-compatible Schema Registry (Apicurio, on loopback, global compatibility
    BACKWARD), started on first use: one per pytest worker, shared by its modules. Subjects
    outlive a test: name them after the test's own topic."""
    from connectors.local.schema_registry import schema_registry as started

    with started() as registry:
        print(f"\nSchema Registry for this run: {registry.url}")
        yield registry


@pytest.fixture(scope="session")
def schema_registry_url(schema_registry) -> str:
    """The registry's Confluent API base URL (`schema.registry.url`)."""
    return schema_registry.url


@pytest.fixture(scope="session")
def secured_schema_registry():
    """A second registry serving HTTPS only with basic auth, started on first use;
    `.client_config()` gives a client's settings (url, ssl.ca.location, basic.auth.user.info)."""
    from connectors.local.schema_registry import schema_registry as started
    from integration_tests.support.certs import generate_test_pki

    with started(make_pki=generate_test_pki) as registry:
        yield registry
