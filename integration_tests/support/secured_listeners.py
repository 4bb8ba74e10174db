"""The secured listeners of a running Apache Kafka node, as tests of secured clusters use them.

`connectors.local.apache_kafka` starts one node serving every listener the tests need, the
broker itself demanding TLS and SASL (no proxy in between): SASL_SSL (SCRAM-SHA-512/256, PLAIN;
client certificates requested), SSL (no client authentication), MTLS (SSL, client certificate
required), SASL_PLAINTEXT (PLAIN, SCRAM). `secured_listener()` picks the listener for a
(protocol, mechanism, mTLS) combination and gives the bootstrap address and the options a
correctly configured client sets. Metadata asked on a listener names that listener's address
only, so clients that follow metadata stay on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["SecuredBroker", "SecurityProtocol", "secured_listener"]

SecurityProtocol = Literal["SSL", "SASL_SSL", "SASL_PLAINTEXT"]
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")


@dataclass
class SecuredBroker:
    """One secured listener of a running broker and what a correctly configured client needs."""

    #: The secured listener's address (metadata asked on it leads back to it).
    bootstrap_servers: str
    protocol: SecurityProtocol
    #: The SASL mechanism clients are configured with; None for protocol "SSL".
    mechanism: str | None
    pki: Any  # integration_tests.support.certs.TestPKI
    mtls: bool
    #: The SASL user clients authenticate as (name -> password); empty for protocol "SSL".
    users: dict[str, str] = field(repr=False)
    #: librdkafka property names (no "kafka." prefix) a correctly configured client sets.
    client_options: dict[str, str] = field(repr=False)
    #: The node's listener name (SASL_SSL, SSL, MTLS, SASL_PLAINTEXT).
    listener: str = ""
    #: The node's PLAINTEXT address (a super user): for set-up and checks behind the client's back.
    upstream_bootstrap_servers: str = ""
    #: The connectors.local.apache_kafka.ApacheKafka node serving the listener.
    node: Any = field(default=None, repr=False)

    @property
    def username(self) -> str | None:
        return next(iter(self.users), None)

    @property
    def pid(self) -> int | None:
        """The broker JVM's current process id (None while it is down)."""
        process = getattr(self.node, "process", None)
        return None if process is None else process.pid

    def options(self, prefix: str = "kafka.") -> dict[str, str]:
        """`client_options` with every key prefixed (the connectors' `kafka.`-style options)."""
        return {prefix + k: v for k, v in self.client_options.items()}


def listener_name(protocol: str, mtls: bool = False) -> str:
    """The node's listener for a security protocol: SSL with a required client certificate is
    MTLS; SASL_SSL requests (and verifies) a certificate, so it serves mutual TLS as well."""
    if protocol == "SSL":
        return "MTLS" if mtls else "SSL"
    if protocol == "SASL_SSL":
        return "SASL_SSL"
    if protocol == "SASL_PLAINTEXT":
        if mtls:
            raise ValueError("mtls needs TLS: use protocol SSL or SASL_SSL")
        return "SASL_PLAINTEXT"
    raise ValueError(f"protocol must be SSL, SASL_SSL or SASL_PLAINTEXT, not {protocol!r}")


def client_options(protocol: str, mechanism: str | None, pki: Any, mtls: bool,
                   users: dict[str, str]) -> dict[str, str]:
    options = {"security.protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        options["ssl.ca.location"] = pki.ca_pem
        if mtls:
            options["ssl.certificate.location"] = pki.client_cert_pem
            options["ssl.key.location"] = pki.client_key_pem
    if mechanism is not None:
        user, password = next(iter(users.items()))
        options.update({
            "sasl.mechanisms": mechanism,
            "sasl.username": user,
            "sasl.password": password,
        })
    return options


def secured_listener(
    node: Any,
    protocol: SecurityProtocol,
    *,
    mechanism: str = "SCRAM-SHA-512",
    mtls: bool = False,
    user: str = "alice",
) -> SecuredBroker:
    """The listener of `node` (a running `ApacheKafka`) for `protocol`, with the client options
    of `user` (one of `node.extra.passwords`: "alice", a super user, or "limited", no ACL at all).

    `mechanism` applies to the SASL protocols (SCRAM-SHA-512, SCRAM-SHA-256, PLAIN); `mtls`
    makes the client present the test client certificate (protocol SSL: the MTLS listener,
    which requires one; SASL_SSL: the listener verifies it when presented)."""
    listener = listener_name(protocol, mtls)
    sasl = protocol.startswith("SASL_")
    if sasl and mechanism not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {', '.join(MECHANISMS)}, not {mechanism!r}")
    if sasl and user not in node.extra.passwords:
        raise ValueError(f"no SASL user {user!r} on this node (it has {sorted(node.extra.passwords)})")
    users = {user: node.extra.passwords[user]} if sasl else {}
    return SecuredBroker(
        bootstrap_servers=node.address(listener),
        protocol=protocol,
        mechanism=mechanism if sasl else None,
        pki=node.extra.pki,
        mtls=mtls,
        users=users,
        client_options=client_options(protocol, mechanism if sasl else None, node.extra.pki, mtls,
                                      users),
        listener=listener,
        upstream_bootstrap_servers=node.address("PLAINTEXT"),
        node=node,
    )
