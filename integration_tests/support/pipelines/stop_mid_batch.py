"""Two exactly-once queries (kafka-eos -> kafka-eos, kafka-eos -> delta-eos) stopped with a
clean `query.stop()` while their first batch is in flight: a slow UDF keeps the tasks busy for
seconds, and the stop comes once both queries' tasks have begun writing (the sinks' first
`task started` marker files). Prints STOPPED and the stop's duration; what the package logs
meanwhile is the test's subject (integration_tests/operations/test_quiet_stop.py).

    python -m integration_tests.support.pipelines.stop_mid_batch BOOTSTRAP TOPIC OUT_TOPIC TABLE WORKDIR
"""

import os
import sys
import time

from pyspark.sql import functions as F

from connectors import enable_structured_logs
from connectors.local.spark import local_spark

bootstrap, topic, out_topic, table, workdir = sys.argv[1:6]
# The package's lines with their level and logger, here and in Spark's Python workers: what
# the test searches for an ERROR of the package.
enable_structured_logs()
spark = local_spark("stop-mid-batch")
marks = os.path.join(workdir, "marks")
os.makedirs(marks, exist_ok=True)


@F.udf("binary")
def slow(value):
    """Marks that a task is writing, then takes 20 ms a row."""
    open(os.path.join(marks, f"{os.getpid()}"), "w").close()
    time.sleep(0.02)
    return value


def source():
    return (spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").load()
            .select("key", slow("value").alias("value")))


to_kafka = (source().writeStream.format("kafka-eos").option("kafka.bootstrap.servers", bootstrap)
            .option("topic", out_topic)
            .option("checkpointLocation", os.path.join(workdir, "ck-kafka")).start())
to_delta = (source().writeStream.format("delta-eos").option("path", table)
            .option("checkpointLocation", os.path.join(workdir, "ck-delta")).start())
deadline = time.monotonic() + 240
while len(os.listdir(marks)) < 2 and time.monotonic() < deadline:
    time.sleep(0.2)
time.sleep(1.0)  # well inside the batch: 1,000 rows at 20 ms take 10 s per task
assert to_kafka.lastProgress is None and to_delta.lastProgress is None, "a batch already ended"
print("STOPPING", flush=True)
started = time.monotonic()
to_kafka.stop()
to_delta.stop()
print(f"STOPPED in {time.monotonic() - started:.1f} s", flush=True)
time.sleep(3)  # what the workers still log after the stop
spark.stop()
