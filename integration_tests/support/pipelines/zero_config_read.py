"""Batch-read a topic in a fresh Spark session WITHOUT calling connectors.register():
`kafka-eos` must be found through PySpark's static registration of `pyspark_*` modules.
Prints the number of rows read."""

import sys

from connectors.local.spark import local_spark

bootstrap, topic = sys.argv[1], sys.argv[2]
spark = local_spark("zero-config", register=False)
n = (
    spark.read.format("kafka-eos")
    .option("kafka.bootstrap.servers", bootstrap)
    .option("subscribe", topic)
    .load()
    .count()
)
print(f"ROWS={n}")
# What local_spark() and users' code do next: register() leaves the formats the static lookup
# found alone (registering them again logs "replaced a statically registered data source").
import connectors  # noqa: E402

connectors.register(spark)
print("REGISTERED=" + ",".join(
    name for name in ("kafka-eos", "delta-eos", "postgres-eos")
    if spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists(name)))
spark.stop()
