"""The Kafka client plumbing the `kafka-eos` source and the Kafka sink share, one module per
concern:

    client.py           librdkafka's configuration from the `kafka.*` options, admin calls,
                        transient errors retried under kafkaRetryTimeout
    java_options.py     the Java client's option names translated to librdkafka's (PKCS#12 key
                        and trust stores to PEM; Java-only options refused, naming why)
    python_security.py  the same settings for kafka-python (the Kafka sink's commit client):
                        TLS context, SASL, the hint for a refused connection
    oidc_token.py       OAUTHBEARER tokens from an OIDC provider's token endpoint
    cloud_tokens/       OAUTHBEARER tokens from the clouds' identities (Amazon MSK IAM, Azure
                        Event Hubs, Google Managed Kafka), for librdkafka and kafka-python
    transactions_refused.py
                        a cluster without Kafka transactions, said plainly at the exactly-once
                        sink's start
    format.py           the `kafka-eos` format's name, read and written

Nothing is imported here: a module pays only for what it imports.
"""
