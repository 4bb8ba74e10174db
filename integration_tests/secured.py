"""The secured cluster of the secured tests: real Apache Kafka's SASL_SSL listener (SCRAM-SHA-512)
where a Docker engine answers, as the rest of the suite runs there; otherwise, or for what that
listener does not offer, the embedded broker behind the TLS- and SASL-terminating test proxy."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator

from connectors.testing.broker import docker_available, secured_container
from connectors.testing.certs import generate_test_pki
from connectors.testing.secured import SecuredBroker, secured_broker

CONTAINER_MECHANISM = "SCRAM-SHA-512"


def _use_container(protocol: str, mechanism: str, mtls: bool) -> bool:
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip():
        return False
    if (protocol, mechanism, mtls) != ("SASL_SSL", CONTAINER_MECHANISM, False):
        return False
    return docker_available()[0]


@contextlib.contextmanager
def secured_cluster(protocol: str, *, mechanism: str = CONTAINER_MECHANISM,
                    mtls: bool = False) -> Iterator[SecuredBroker]:
    if not _use_container(protocol, mechanism, mtls):
        with secured_broker(protocol, mechanism=mechanism, mtls=mtls) as b:  # type: ignore[arg-type]
            yield b
        return
    workdir = tempfile.mkdtemp(prefix="secured-container-")
    try:
        pki = generate_test_pki(os.path.join(workdir, "pki"))
        user, password = "alice", secrets.token_urlsafe(16)
        with secured_container(pki.server_cert_pem, pki.server_key_pem, pki.ca_pem,
                               user, password) as (bootstrap, _broker):
            yield SecuredBroker(
                bootstrap_servers=bootstrap, protocol="SASL_SSL", mechanism=mechanism, pki=pki,
                mtls=False, users={user: password},
                client_options={"security.protocol": "SASL_SSL", "ssl.ca.location": pki.ca_pem,
                                "sasl.mechanisms": mechanism, "sasl.username": user,
                                "sasl.password": password},
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
