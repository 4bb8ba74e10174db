"""A streaming pipeline run as its own process so that tests can SIGKILL it (driver JVM
included) and restart it on the same checkpoint.

    python -m integration_tests.support.pipelines.source_to_parquet BOOTSTRAP TOPIC CHECKPOINT OUT MODE

MODE `continuous` runs 200 ms triggers until killed; `drain` runs Trigger.AvailableNow to the
end of the input and exits. Each batch overwrites `OUT/batch=<id>` (see streaming.py).
"""

import sys

from connectors.local.spark import local_spark
from integration_tests.support.streaming import parquet_batch_writer

bootstrap, topic, checkpoint, out, mode = sys.argv[1:6]
spark = local_spark("source-to-parquet")
df = (
    spark.readStream.format("kafka-eos")
    .option("kafka.bootstrap.servers", bootstrap)
    .option("subscribe", topic)
    .option("startingOffsets", "earliest")
    .option("maxOffsetsPerTrigger", "50")
    .load()
)
writer = df.writeStream.foreachBatch(parquet_batch_writer(out)).option(
    "checkpointLocation", checkpoint
)
if mode == "drain":
    writer.trigger(availableNow=True).start().awaitTermination()
else:
    writer.trigger(processingTime="200 milliseconds").start().awaitTermination()
spark.stop()
