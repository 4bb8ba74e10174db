"""Run as a script: Spark's own `from_avro` (spark-avro) against the `kafka-eos` source's Avro
rows, in one Spark session of its own (the suite's shared session has no spark-avro jar).

`python -m integration_tests.support.from_avro_peer JAR BOOTSTRAP TOPIC REGISTRY_URL SUBJECT` reads the
topic with `valueFormat=avro` and `includeRawValue=true`, applies `from_avro` to the raw bytes
after the 5-byte wire header with the subject's latest schema, and prints one JSON line: how
many rows, how many of them `from_avro` decoded to a different struct (or null), the first
differences, and the two column types.
"""

from __future__ import annotations

import json
import sys


def main(jar: str, bootstrap: str, topic: str, url: str, subject: str) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from pyspark.sql.avro.functions import from_avro
    from pyspark.sql.functions import col, expr

    from connectors.local.spark import local_spark

    schema = SchemaRegistryClient({"url": url}).get_latest_version(subject).schema.schema_str
    spark = local_spark("kafka-eos-from-avro", master="local[1]", conf={"spark.jars": jar})
    try:
        df = (spark.read.format("kafka-eos").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("valueFormat", "avro")
              .option("schema.registry.url", url).option("includeRawValue", "true").load())
        both = df.select("partition", "offset", col("value").alias("ours"),
                         from_avro(expr("substring(rawValue, 6)"), schema).alias("spark"))
        rows = both.collect()
        diffs = [{"partition": r.partition, "offset": r.offset, "ours": repr(r.ours),
                  "spark": repr(r.spark)}
                 for r in rows if r.ours is None or r.spark is None or r.ours != r.spark]
        print(json.dumps({"rows": len(rows), "different": len(diffs), "first": diffs[:3],
                          "ours_type": both.schema["ours"].dataType.simpleString(),
                          "spark_type": both.schema["spark"].dataType.simpleString()}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:6])
