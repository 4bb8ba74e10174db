"""Clusters that demand TLS and SASL: the listeners themselves, exactly once through them, and
the refusals (credentials, certificates, ACLs) that fail a query at its start."""
