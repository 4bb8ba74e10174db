"""The `kafka-eos` sink: options and partitioning, record sizes, its commit against real Kafka,
a reset checkpoint, its crash matrix, a chained Kafka -> Kafka -> Kafka pipeline, and the
marker-applying oracle that judges its output."""
