"""Schema Registry formats: the local registry itself, the source decoding and the sink
encoding Avro, Protobuf and JSON Schema."""
