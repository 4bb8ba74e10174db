"""The name of the Kafka format, said once: `kafka-eos` is one format for reading (sources/)
and writing (sinks/kafka*), and both sides name it in their options' errors and their handles."""

FORMAT_NAME = "kafka-eos"
