"""`python -m connectors demo`: the product end to end, with its own verdict.

events.py produces the input, pipeline.py is the Spark job (source -> both exactly-once sinks),
run.py conducts it (broker, chaos kills, restarts, drain), verify.py reads the outputs back and
compares them with the input, record by record.
"""
