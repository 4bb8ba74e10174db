"""What a user runs, as they run it: the demo (plain and secured), the README's first
pipeline, registration, Spark Connect, `kafka-eos broker`, `python -m benchmarks`."""
