"""A local Kafka broker that really demands TLS and/or SASL, for tests of secured clusters.

Tansu 0.6.0 serves neither TLS nor lasting SASL users (DESIGN.md section 10), so a plaintext
Tansu runs behind `KafkaProxy`, which terminates TLS and SASL. Tansu advertises the proxy's
address, so clients that follow metadata come back through the proxy and authenticate again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from connectors.testing.broker import _wait_until_ready, free_port, tansu_binary
from connectors.testing.certs import TestPKI, generate_test_pki
from connectors.testing.kafka_proxy import KafkaProxy, server_ssl_context

__all__ = ["SecuredBroker", "SecurityProtocol", "secured_broker"]

log = logging.getLogger(__name__)

SecurityProtocol = Literal["SSL", "SASL_SSL", "SASL_PLAINTEXT"]


@dataclass
class SecuredBroker:
    """A running secured broker and what a correctly configured client needs to reach it."""

    #: The proxy's address: the only address clients should use (Tansu advertises it).
    bootstrap_servers: str
    protocol: SecurityProtocol
    #: The SASL mechanism clients are configured with; None for protocol "SSL".
    mechanism: str | None
    pki: TestPKI
    mtls: bool
    #: SASL users (name -> password); empty for protocol "SSL".
    users: dict[str, str] = field(repr=False)
    #: librdkafka property names (no "kafka." prefix) a correctly configured client sets.
    client_options: dict[str, str] = field(repr=False)
    #: Tansu's process id (tests freeze it with SIGSTOP).
    pid: int | None = None
    #: The proxy, e.g. for `proxy.sasl_exchanges` (which SASL versions clients used).
    proxy: KafkaProxy | None = field(default=None, repr=False)
    #: Tansu's own plaintext address: only for checks that must bypass the proxy.
    upstream_bootstrap_servers: str = ""

    @property
    def username(self) -> str | None:
        return next(iter(self.users), None)

    def options(self, prefix: str = "kafka.") -> dict[str, str]:
        """`client_options` with every key prefixed (the connectors' `kafka.`-style options)."""
        return {prefix + k: v for k, v in self.client_options.items()}


def _client_options(
    protocol: SecurityProtocol,
    mechanism: str | None,
    pki: TestPKI,
    mtls: bool,
    users: dict[str, str],
) -> dict[str, str]:
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


@contextlib.contextmanager
def secured_broker(
    protocol: SecurityProtocol,
    *,
    mechanism: str = "SCRAM-SHA-256",
    mtls: bool = False,
) -> Iterator[SecuredBroker]:
    """Start Tansu behind a TLS/SASL-terminating proxy; yields once a client configured with
    `client_options` can list topics; tears both down (and the generated PKI) on exit.

    `mechanism` applies to the SASL protocols (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512); `mtls`
    (TLS protocols only) makes the proxy demand a client certificate signed by the test CA.
    """
    if protocol not in ("SSL", "SASL_SSL", "SASL_PLAINTEXT"):
        raise ValueError(f"protocol must be SSL, SASL_SSL or SASL_PLAINTEXT, not {protocol!r}")
    if mtls and protocol == "SASL_PLAINTEXT":
        raise ValueError("mtls needs TLS: use protocol SSL or SASL_SSL")
    sasl = protocol.startswith("SASL_")
    tls = protocol in ("SSL", "SASL_SSL")

    workdir = tempfile.mkdtemp(prefix="secured-kafka-")
    try:
        pki = generate_test_pki(os.path.join(workdir, "pki"))
        users = {"alice": secrets.token_urlsafe(16)} if sasl else {}
        ssl_context = (
            server_ssl_context(
                pki.server_cert_pem,
                pki.server_key_pem,
                client_ca_pem=pki.ca_pem if mtls else None,
            )
            if tls
            else None
        )
        tansu_port = free_port()
        upstream = f"127.0.0.1:{tansu_port}"
        proxy = KafkaProxy(
            upstream,
            ssl_context=ssl_context,
            sasl_users=users if sasl else None,
            sasl_mechanisms=(mechanism,) if sasl else (),
        )
        with proxy:
            bootstrap = proxy.bootstrap_servers
            with open(os.path.join(workdir, "tansu.log"), "wb") as logfile:
                proc = subprocess.Popen(
                    [
                        tansu_binary(),
                        "broker",
                        "--listener-url", f"tcp://{upstream}",
                        # Metadata points clients at the proxy, never at the plaintext port.
                        "--advertised-listener-url", f"tcp://{bootstrap}",
                        "--storage-engine", "memory://tansu/",
                    ],
                    stdout=logfile,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # not killed with a pipeline's process group
                )
                try:
                    # Plaintext check first (fast, and says "Tansu died" rather than "auth
                    # failed"), then the real check through the proxy with the client options.
                    _wait_until_ready(upstream, proc)
                    options = _client_options(protocol, mechanism if sasl else None, pki, mtls, users)
                    _wait_until_ready(bootstrap, proc, client_config=options)
                    log.info("secured broker (%s) at %s, Tansu pid %d", protocol, bootstrap, proc.pid)
                    yield SecuredBroker(
                        bootstrap_servers=bootstrap,
                        protocol=protocol,
                        mechanism=mechanism if sasl else None,
                        pki=pki,
                        mtls=mtls,
                        users=users,
                        client_options=options,
                        pid=proc.pid,
                        proxy=proxy,
                        upstream_bootstrap_servers=upstream,
                    )
                finally:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, signal.SIGCONT)  # a test may have left it frozen
                    proc.terminate()
                    try:
                        proc.wait(10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(10)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
