"""Side by side with what users run today: delta-spark and Spark's own Kafka connector on the
same topics and tables, on PySpark 4.2 and 4.3."""
