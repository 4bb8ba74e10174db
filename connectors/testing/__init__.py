"""Test plumbing that later issues and users reuse: a broker resolver and a local Spark."""

from connectors.testing.broker import Broker, kafka_broker
from connectors.testing.spark import local_spark

__all__ = ["Broker", "kafka_broker", "local_spark"]
