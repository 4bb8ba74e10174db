"""The replayable Kafka source (`kafka-eos`): offset planning, admission control, Arrow reads."""
