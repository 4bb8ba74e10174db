"""The test suite's secured listeners of a local Apache Kafka node, kept out of the wheel: the
node (connectors/local/apache_kafka.py) serves PLAINTEXT for the CLI and the demo, and these
listeners only when a test asks (`apache_kafka(listeners=make_secured_listeners)`).

With a throwaway PKI (integration_tests/support/certs.py) the node serves SASL_SSL
(SCRAM-SHA-512/256 and PLAIN), SSL (no client certificate), MTLS (SSL, client certificate
required) and SASL_PLAINTEXT. Under the StandardAuthorizer the PLAINTEXT and TLS-only principals
and the SASL user `alice` are super users; `limited` has no ACL at all (the tests of ACL
refusals use it). Its users' passwords are random per node.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

from integration_tests.support.certs import TestPKI, generate_test_pki

SCRAM_USER = "alice"
LIMITED_USER = "limited"  # a SASL user with no ACL: for the authorizer's refusals
CLIENT_CN = "test client"  # the CN of integration_tests.support.certs' client certificate
#: Every listener a secured node serves, PLAINTEXT first, and each one's security protocol.
LISTENERS = ("PLAINTEXT", "SASL_SSL", "SSL", "MTLS", "SASL_PLAINTEXT")
PROTOCOLS = {"SASL_SSL": "SASL_SSL", "SSL": "SSL", "MTLS": "SSL",
             "SASL_PLAINTEXT": "SASL_PLAINTEXT"}
SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")


@dataclass
class SecuredListeners:
    """A node's secured listeners (connectors.local.apache_kafka.ExtraListeners): its PKI and
    its SASL users."""

    pki: TestPKI
    #: SASL user -> password
    passwords: dict[str, str] = field(repr=False)
    protocols: dict[str, str] = field(default_factory=lambda: dict(PROTOCOLS))

    def server_properties(self) -> dict[str, str]:
        def pem(path: str) -> str:
            return Path(path).read_text().strip() + "\n"

        props = {
            "super.users": f"User:ANONYMOUS;User:{SCRAM_USER};User:{CLIENT_CN}",
            "ssl.principal.mapping.rules": "RULE:^.*CN=([^,]+).*$/$1/,DEFAULT",
            "sasl.enabled.mechanisms": ",".join([*SCRAM_MECHANISMS, "PLAIN"]),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": pem(self.pki.server_cert_pem) + pem(self.pki.ca_pem),
            "ssl.keystore.key": pem(self.pki.server_key_pem),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": pem(self.pki.ca_pem),
            "ssl.endpoint.identification.algorithm": "",
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.sasl_ssl.ssl.client.auth": "requested",
        }
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        plain_users = " ".join(f'user_{u}="{p}"' for u, p in self.passwords.items())
        plain = f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
        for listener in ("sasl_ssl", "sasl_plaintext"):
            for mechanism in SCRAM_MECHANISMS:
                props[f"listener.name.{listener}.{mechanism.lower()}.sasl.jaas.config"] = scram
            props[f"listener.name.{listener}.plain.sasl.jaas.config"] = plain
        return props

    def format_args(self) -> list[str]:
        """The SASL users' SCRAM credentials, written by the storage format."""
        args: list[str] = []
        for user, password in self.passwords.items():
            for mechanism in SCRAM_MECHANISMS:
                args += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
        return args


def make_secured_listeners(workdir: Path) -> SecuredListeners:
    """A node's secured listeners: a fresh PKI in its directory, random passwords."""
    return SecuredListeners(generate_test_pki(str(workdir / "pki")),
                            {SCRAM_USER: secrets.token_urlsafe(16),
                             LIMITED_USER: secrets.token_urlsafe(16)})
