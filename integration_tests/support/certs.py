"""A throwaway PKI for tests of TLS (and mutual TLS) against the secured test broker.

Everything is generated fresh with `cryptography`, so no key material lives in the repository and
no test depends on a certificate that expires. Besides PEM files (what librdkafka and Python's
`ssl` read), the CA and the client identity are also written as password-protected PKCS#12 stores,
so the Java-style `ssl.truststore.*` / `ssl.keystore.*` options can be tested too.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["TestPKI", "generate_test_pki"]


@dataclass(frozen=True)
class TestPKI:
    """Paths of one generated PKI (all inside the directory given to `generate_test_pki`)."""

    __test__ = False  # not a pytest test class, despite the name

    ca_pem: str
    server_cert_pem: str
    server_key_pem: str
    client_cert_pem: str
    client_key_pem: str
    #: A CA that signed none of the above: trusting only it must fail the TLS handshake.
    other_ca_pem: str
    #: PKCS#12 holding only the CA certificate (a Java-style truststore).
    truststore_p12: str
    #: PKCS#12 holding the client certificate and its key (a Java-style keystore).
    keystore_p12: str
    #: Password of both PKCS#12 stores.
    store_password: str = field(repr=False)


_VALIDITY = datetime.timedelta(days=2)
# Clocks of containers and CI machines drift; a certificate "not yet valid" would fail for no reason.
_BACKDATE = datetime.timedelta(hours=1)


def _key() -> ec.EllipticCurvePrivateKey:
    # P-256: fast to generate (RSA-2048 takes ~0.1 s a key) and accepted by OpenSSL and librdkafka.
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "spark-eos-connectors tests"),
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
    ])


def _builder(common_name: str, issuer: x509.Name,
             key: ec.EllipticCurvePrivateKey) -> x509.CertificateBuilder:
    """What every certificate here has: subject, issuer, key, a fresh serial, the validity."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + _VALIDITY)
    )


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    cert = (
        _builder(common_name, _name(common_name), key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    common_name: str,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    *,
    server: bool,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    builder = (
        _builder(common_name, ca_cert.subject, key)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=True, key_cert_sign=False, crl_sign=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if server:
        # Clients check the name they dialled against the SANs (librdkafka's default
        # ssl.endpoint.identification.algorithm=https, Python's check_hostname): both spellings.
        builder = builder.add_extension(
            x509.SubjectAlternativeName([
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            ]),
            critical=False,
        )
    return builder.sign(ca_key, hashes.SHA256()), key


def _write(path: str, data: bytes, *, secret: bool) -> str:
    # Keys are created 0600 from the start, not chmod-ed after being readable for a moment.
    mode = 0o600 if secret else 0o644
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, mode)  # O_CREAT's mode is filtered by the umask
    return path


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def generate_test_pki(directory: str) -> TestPKI:
    """Generate a CA, a server and a client identity signed by it, and an unrelated CA, into
    `directory` (created if missing); returns the paths."""
    os.makedirs(directory, exist_ok=True)
    p = lambda name: os.path.join(directory, name)  # noqa: E731

    ca_cert, ca_key = _ca("test CA")
    server_cert, server_key = _leaf("localhost", ca_cert, ca_key, server=True)
    client_cert, client_key = _leaf("test client", ca_cert, ca_key, server=False)
    other_ca_cert, _ = _ca("unrelated test CA")
    password = secrets.token_urlsafe(12)
    encryption = serialization.BestAvailableEncryption(password.encode())

    return TestPKI(
        ca_pem=_write(p("ca.pem"), _cert_pem(ca_cert), secret=False),
        server_cert_pem=_write(p("server.pem"), _cert_pem(server_cert), secret=False),
        server_key_pem=_write(p("server.key"), _key_pem(server_key), secret=True),
        client_cert_pem=_write(p("client.pem"), _cert_pem(client_cert), secret=False),
        client_key_pem=_write(p("client.key"), _key_pem(client_key), secret=True),
        other_ca_pem=_write(p("other-ca.pem"), _cert_pem(other_ca_cert), secret=False),
        truststore_p12=_write(
            p("truststore.p12"),
            pkcs12.serialize_java_truststore(
                [pkcs12.PKCS12Certificate(ca_cert, b"test-ca")], encryption
            ),
            secret=False,
        ),
        keystore_p12=_write(
            p("keystore.p12"),
            pkcs12.serialize_key_and_certificates(
                b"client", client_key, client_cert, [ca_cert], encryption
            ),
            secret=True,
        ),
        store_password=password,
    )
