"""The `kafka-eos` source: reads (batch, streaming, driver mode, packed tasks), its options,
offsets and look-ups, transactional input, recreated topics, monitoring, wide and deep topics, a
kill and restart."""
