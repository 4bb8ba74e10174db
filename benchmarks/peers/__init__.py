"""Side by side with the peers (`python -m benchmarks --peers`): lane.py runs the lane (the parent
starts the broker; the peers' PySpark 4.2.0 session measures), latency.py and sinks.py measure
its sections, report.py holds the targets, verdicts and tables."""
