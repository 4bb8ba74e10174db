"""The tests' plumbing, kept out of the wheel: the suite's broker resolution (Testcontainers,
Apache Kafka with every secured listener), a throwaway PKI, the class-data-sharing archive of
Spark's classes, the peers' environment, an S3 server, a PostgreSQL server, and helpers of the
secured and Schema Registry tests. Benchmarks may use it too.

What the product itself runs locally (the broker, Spark, the registry, the Kafka oracle) is in
connectors/local/.
"""
