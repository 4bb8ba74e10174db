"""`python -m connectors demo`: the product end to end, with its own verdict.

events.py produces the input, pipeline.py is the Spark job (source -> both exactly-once sinks),
run.py conducts it (chaos kills, restarts, drain) with config.py (its settings) and services.py
(the broker, the registry and the topics it runs against), verify.py reads the outputs back and
compares them with the input, record by record.
"""
