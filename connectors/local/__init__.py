"""What the CLI and the demo run on this machine: a local Kafka broker (real Apache Kafka from
its Maven jars, else the embedded broker), a local Spark session, a Schema Registry, and the
Kafka oracle that reads committed output back applying the transaction markers itself.

Part of the façade: it may use anything below it, and nothing below uses it. The tests' own
plumbing (certificates, Testcontainers, the class-sharing archive...) is in
integration_tests/support/, outside the wheel.
"""
