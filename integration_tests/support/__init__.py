"""The tests' plumbing, kept out of the wheel: the suite's broker resolution (Testcontainers,
Apache Kafka with every secured listener), a throwaway PKI, the 3-node cluster and network
namespaces, the S3 fault proxy, topics and records, the Delta oracle, pipelines run in a process
group of their own (pipelines/), the class-data-sharing archive of Spark's classes, the peers'
environment and sessions, an S3 server, a PostgreSQL server, and helpers of the secured and
Schema Registry tests. Benchmarks may use it too. It holds no tests: those are in the
sub-packages of integration_tests/ named after what they prove.

What the product itself runs locally (the broker, Spark, the registry, the Kafka oracle) is in
connectors/local/.
"""
