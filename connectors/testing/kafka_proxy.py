"""A test-only Kafka proxy that terminates TLS and SASL in front of a plaintext broker.

Why: the local broker (Tansu 0.6.0) can neither serve TLS nor keep SASL users (DESIGN.md section
10), yet the connectors must be tested against a cluster that really demands both. This proxy
listens on 127.0.0.1, optionally wraps each connection in TLS (optionally demanding a client
certificate), and, when SASL is on, behaves like a secured Kafka listener before authentication:

* ApiVersions is piped to the broker (the client learns the broker's versions, SASL's included);
* SaslHandshake (v0, v1) and SaslAuthenticate (v0, v1, v2 flexible) are answered here, for PLAIN,
  SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802 / RFC 7677, 4096 iterations);
* a wrong password or unknown user gets SASL_AUTHENTICATION_FAILED (58) and the connection is
  closed; any other request before authentication closes the connection.

Once authenticated (or at once, without SASL) bytes are piped both ways untouched, so
transactions, fetches and everything else are the broker's own behaviour.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import logging
import secrets
import ssl
import struct
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType

from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

__all__ = [
    "KafkaProxy",
    "SaslExchange",
    "SASL_MECHANISMS",
    "server_ssl_context",
]

log = logging.getLogger(__name__)

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

_API_VERSIONS = 18
_SASL_HANDSHAKE = 17
_SASL_AUTHENTICATE = 36

_ILLEGAL_SASL_STATE = 34
_UNSUPPORTED_SASL_MECHANISM = 33
_SASL_AUTHENTICATION_FAILED = 58

# Before authentication only small requests are legal. A TLS ClientHello read as a Kafka frame
# starts 0x16 0x03 0x01 ..., a "size" of ~370 MB: refusing it is how a TLS client is turned away
# from a plaintext SASL port (a real broker does the same with its max-request-size check).
_MAX_PREAUTH_FRAME = 1 << 20
_SCRAM_ITERATIONS = 4096
# How long a refused connection stays open for the client to read the refusal (or close first).
_FAILED_AUTHENTICATION_DELAY_S = 0.5


def server_ssl_context(
    cert_pem: str,
    key_pem: str,
    *,
    client_ca_pem: str | None = None,
) -> ssl.SSLContext:
    """A server-side TLS context; with `client_ca_pem`, clients must present a certificate
    signed by that CA (mutual TLS)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_pem, key_pem)
    if client_ca_pem is not None:
        ctx.load_verify_locations(cafile=client_ca_pem)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


@dataclass
class SaslExchange:
    """What one connection did during SASL: which versions its client sent (so tests and reports
    can say what librdkafka and kafka-python really use) and how it ended."""

    client_id: str | None
    mechanism: str | None = None
    handshake_version: int | None = None
    authenticate_versions: list[int] = field(default_factory=list)
    username: str | None = None
    #: "authenticated", "failed: <why>", or "closed: <why>".
    outcome: str = "in progress"


class _AuthFailed(Exception):
    """A SASL exchange that must be refused with SASL_AUTHENTICATION_FAILED."""


class _Plain:
    """SASL PLAIN (RFC 4616): one message, `authzid NUL authcid NUL password`."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.username: str | None = None

    def step(self, token: bytes) -> tuple[bytes, bool]:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise _AuthFailed("Authentication failed: malformed PLAIN message")
        authzid, user_b, password_b = parts
        user = user_b.decode("utf-8", "replace")
        self.username = user
        expected = self._users.get(user)
        # compare_digest even for unknown users, so the answer takes the same time.
        ok = hmac.compare_digest(
            password_b, (expected if expected is not None else secrets.token_hex(16)).encode()
        )
        if expected is None or not ok:
            raise _AuthFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user_b:
            raise _AuthFailed("Authentication failed: authorization id must equal the username")
        return b"", True


@dataclass(frozen=True)
class _ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes


def _scram_credential(password: str, hash_name: str) -> _ScramCredential:
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, _SCRAM_ITERATIONS)
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    return _ScramCredential(
        salt=salt,
        stored_key=hashlib.new(hash_name, client_key).digest(),
        server_key=hmac.digest(salted, b"Server Key", hash_name),
    )


def _scram_attributes(message: str) -> dict[str, str]:
    attrs: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise _AuthFailed("Authentication failed: malformed SCRAM message")
        attrs.setdefault(part[0], part[2:])
    return attrs


class _Scram:
    """SCRAM-SHA-256/512 server side (RFC 5802, RFC 7677): client-first -> server-first (nonce,
    salt, iterations), client-final (proof) -> server-final (server signature)."""

    def __init__(self, hash_name: str, credentials: Mapping[str, _ScramCredential]) -> None:
        self._hash = hash_name
        self._credentials = credentials
        self._state = "client-first"
        self.username: str | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: _ScramCredential | None = None

    def step(self, token: bytes) -> tuple[bytes, bool]:
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise _AuthFailed("Authentication failed: SCRAM message is not UTF-8") from None
        if self._state == "client-first":
            return self._client_first(message), False
        if self._state == "client-final":
            return self._client_final(message), True
        raise _AuthFailed("Authentication failed: unexpected SCRAM message")

    def _client_first(self, message: str) -> bytes:
        # gs2-header: "n,," or "y,," or "n,a=authzid,"; channel binding ("p=") is not offered.
        cbind, sep1, rest = message.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2) or cbind not in ("n", "y"):
            raise _AuthFailed("Authentication failed: malformed SCRAM client-first message")
        attrs = _scram_attributes(bare)
        if "n" not in attrs or "r" not in attrs or "m" in attrs:
            raise _AuthFailed("Authentication failed: malformed SCRAM client-first message")
        user = attrs["n"].replace("=2C", ",").replace("=3D", "=")
        self.username = user
        if authzid and authzid[2:] != attrs["n"]:
            raise _AuthFailed("Authentication failed: authorization id must equal the username")
        credential = self._credentials.get(user)
        if credential is None:
            raise _AuthFailed("Authentication failed: Invalid user credentials")
        self._credential = credential
        self._gs2_header = f"{cbind},{authzid},"
        self._client_first_bare = bare
        self._nonce = attrs["r"] + secrets.token_urlsafe(18)
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={_SCRAM_ITERATIONS}"
        self._state = "client-final"
        return self._server_first.encode()

    def _client_final(self, message: str) -> bytes:
        self._state = "done"
        without_proof, sep, proof_part = message.rpartition(",p=")
        if not sep:
            raise _AuthFailed("Authentication failed: SCRAM client-final message has no proof")
        attrs = _scram_attributes(without_proof)
        channel_binding = base64.b64encode(self._gs2_header.encode()).decode()
        if attrs.get("c") != channel_binding:
            raise _AuthFailed("Authentication failed: SCRAM channel binding mismatch")
        if attrs.get("r") != self._nonce:
            raise _AuthFailed("Authentication failed: SCRAM nonce mismatch")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise _AuthFailed("Authentication failed: SCRAM proof is not base64") from None
        assert self._credential is not None
        auth_message = ",".join(
            (self._client_first_bare, self._server_first, without_proof)
        ).encode()
        client_signature = hmac.digest(self._credential.stored_key, auth_message, self._hash)
        if len(proof) != len(client_signature):
            raise _AuthFailed("Authentication failed: Invalid user credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        if not hmac.compare_digest(
            hashlib.new(self._hash, client_key).digest(), self._credential.stored_key
        ):
            raise _AuthFailed("Authentication failed: Invalid user credentials")
        server_signature = hmac.digest(self._credential.server_key, auth_message, self._hash)
        return b"v=" + base64.b64encode(server_signature)


def _request_header(frame: bytes) -> tuple[int, int, int, str | None]:
    """api_key, api_version, correlation_id and client_id of a request (headers v1 and v2 start
    alike: the client id is a non-compact nullable string in both)."""
    if len(frame) < 10:
        raise ValueError("request shorter than a request header")
    api_key, api_version, correlation_id, id_len = struct.unpack_from(">hhih", frame)
    client_id = None if id_len < 0 else frame[10 : 10 + id_len].decode("utf-8", "replace")
    return api_key, api_version, correlation_id, client_id


async def _read_frame(reader: asyncio.StreamReader, max_size: int | None) -> bytes | None:
    """One size-prefixed Kafka frame's payload; None at EOF or on an implausible size."""
    try:
        head = await reader.readexactly(4)
        (size,) = struct.unpack(">i", head)
        if size < 0 or (max_size is not None and size > max_size):
            return None
        return await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        return None


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


class KafkaProxy:
    """Terminates TLS and/or SASL on 127.0.0.1:`port` and pipes to a plaintext Kafka broker.

    Runs its own event loop in a daemon thread: `start()` returns once the port is bound (so
    `port` can be advertised by the broker before the broker starts), `stop()` closes every
    connection. Usable as a context manager.
    """

    def __init__(
        self,
        upstream: str,
        *,
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        sasl_users: Mapping[str, str] | None = None,
        sasl_mechanisms: Iterable[str] = SASL_MECHANISMS,
        handshake_timeout_s: float = 10.0,
    ) -> None:
        host, _, up_port = upstream.rpartition(":")
        self.upstream = (host, int(up_port))
        self.port = port
        self.ssl_context = ssl_context
        self.handshake_timeout_s = handshake_timeout_s
        self.sasl_mechanisms = tuple(sasl_mechanisms) if sasl_users is not None else ()
        unknown = set(self.sasl_mechanisms) - set(SASL_MECHANISMS)
        if unknown:
            raise ValueError(f"unsupported SASL mechanisms {sorted(unknown)}; use {SASL_MECHANISMS}")
        self._users: dict[str, str] | None = dict(sasl_users) if sasl_users is not None else None
        # SCRAM credentials are derived once (4096 PBKDF2 rounds each), as a broker stores them.
        self._scram: dict[str, dict[str, _ScramCredential]] = {}
        for mechanism, hash_name in (("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")):
            if mechanism in self.sasl_mechanisms and self._users is not None:
                self._scram[mechanism] = {
                    user: _scram_credential(pw, hash_name) for user, pw in self._users.items()
                }
        #: One entry per connection that began SASL, in arrival order.
        self.sasl_exchanges: list[SaslExchange] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> KafkaProxy:
        if self._thread is not None:
            raise RuntimeError("proxy already started")
        self._thread = threading.Thread(target=self._run, name=f"kafka-proxy-{self.port}", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            self._thread.join()
            self._thread = None
            raise RuntimeError(f"proxy could not listen: {self._startup_error}") from self._startup_error
        return self

    def stop(self) -> None:
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None:
            return
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # loop already gone
                loop.call_soon_threadsafe(stop.set)
        thread.join(15)
        self._thread = None

    def __enter__(self) -> KafkaProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # reported to start() if it happened before listening
            if not self._ready.is_set():
                self._startup_error = e
                self._ready.set()
            else:
                log.debug("kafka proxy loop ended with %r", e)

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stop = asyncio.Event()
        # Handshake failures and resets are the tests' point, not news: keep them at debug level.
        loop.set_exception_handler(lambda _l, ctx: log.debug("kafka proxy: %s", ctx.get("message")))
        server = await asyncio.start_server(
            self._on_connect,
            "127.0.0.1",
            self.port,
            ssl=self.ssl_context,
            ssl_handshake_timeout=self.handshake_timeout_s if self.ssl_context else None,
        )
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)

    # -- connections ---------------------------------------------------------------------

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            try:
                up_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
            except OSError as e:
                log.debug("kafka proxy: broker %s:%d unreachable: %s", *self.upstream, e)
                return
            if self._users is not None:
                if not await self._authenticate(reader, writer, up_reader, upstream_writer):
                    return
            await self._pipe(reader, writer, up_reader, upstream_writer)
        except asyncio.CancelledError:
            pass
        except Exception as e:  # one bad connection must not take the proxy down
            log.debug("kafka proxy: connection ended with %r", e)
        finally:
            for w in (writer, upstream_writer):
                if w is not None:
                    w.close()
            for w in (writer, upstream_writer):
                if w is not None:
                    with contextlib.suppress(Exception, asyncio.CancelledError):
                        await asyncio.wait_for(w.wait_closed(), 2)
            self._connections.discard(task)

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()

        tasks = [asyncio.create_task(copy(reader, up_writer)), asyncio.create_task(copy(up_reader, writer))]
        try:
            # Either side closing ends the connection, as it does on a real broker.
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _authenticate(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> bool:
        """Serve the pre-authentication phase; True once the client is authenticated."""
        exchange: SaslExchange | None = None
        session: _Plain | _Scram | None = None

        def finish(outcome: str) -> bool:
            if exchange is not None:
                exchange.outcome = outcome
            log.debug("kafka proxy: SASL %s", outcome)
            return outcome == "authenticated"

        while True:
            frame = await _read_frame(reader, _MAX_PREAUTH_FRAME)
            if frame is None:
                return finish("closed: no valid request before authentication")
            try:
                api_key, version, correlation_id, client_id = _request_header(frame)
            except ValueError:
                return finish("closed: malformed request header")

            if api_key == _API_VERSIONS and session is None:
                up_writer.write(_frame(frame))
                await up_writer.drain()
                answer = await _read_frame(up_reader, None)
                if answer is None:
                    return finish("closed: broker closed during ApiVersions")
                writer.write(_frame(answer))
                await writer.drain()
                continue

            if api_key == _SASL_HANDSHAKE and session is None:
                exchange = SaslExchange(client_id=client_id, handshake_version=version)
                self.sasl_exchanges.append(exchange)
                try:
                    mechanism = SaslHandshakeRequest.decode(frame, version=version, header=True).mechanism
                except Exception:
                    return finish(f"closed: undecodable SaslHandshake v{version}")
                exchange.mechanism = mechanism
                ok = mechanism in self.sasl_mechanisms
                response = SaslHandshakeResponse(
                    error_code=0 if ok else _UNSUPPORTED_SASL_MECHANISM,
                    mechanisms=list(self.sasl_mechanisms),
                    version=version,
                )
                if not ok:
                    refused = finish(f"failed: mechanism {mechanism} not enabled")
                    await self._respond(writer, response, correlation_id)
                    await self._linger(reader)
                    return refused
                await self._respond(writer, response, correlation_id)
                session = self._session(mechanism)
                if version == 0:
                    # SaslHandshake v0: the SASL tokens follow as bare size-prefixed frames.
                    return finish(await self._raw_tokens(reader, writer, session, exchange))
                continue

            if api_key == _SASL_AUTHENTICATE and session is not None and exchange is not None:
                exchange.authenticate_versions.append(version)
                try:
                    token = SaslAuthenticateRequest.decode(frame, version=version, header=True).auth_bytes
                except Exception:
                    return finish(f"closed: undecodable SaslAuthenticate v{version}")
                try:
                    reply, done = session.step(bytes(token))
                except _AuthFailed as e:
                    exchange.username = session.username
                    # Recorded before the answer goes out: a test may look as soon as it has it.
                    refused = finish(f"failed: {e}")
                    await self._respond(
                        writer,
                        SaslAuthenticateResponse(
                            error_code=_SASL_AUTHENTICATION_FAILED,
                            error_message=str(e),
                            auth_bytes=b"",
                            session_lifetime_ms=0,
                            version=version,
                        ),
                        correlation_id,
                    )
                    await self._linger(reader)
                    return refused
                exchange.username = session.username
                authenticated = finish("authenticated") if done else False
                await self._respond(
                    writer,
                    SaslAuthenticateResponse(
                        error_code=0, error_message=None, auth_bytes=reply,
                        session_lifetime_ms=0, version=version,
                    ),
                    correlation_id,
                )
                if authenticated:
                    return True
                continue

            # Anything else (a Metadata request, a second handshake, ...) before authentication:
            # a secured listener refuses to serve it.
            if api_key == _SASL_AUTHENTICATE and session is None:
                with contextlib.suppress(Exception):
                    await self._respond(
                        writer,
                        SaslAuthenticateResponse(
                            error_code=_ILLEGAL_SASL_STATE,
                            error_message="SaslAuthenticate before SaslHandshake",
                            auth_bytes=b"", session_lifetime_ms=0, version=version,
                        ),
                        correlation_id,
                    )
                    await self._linger(reader)
            return finish(f"closed: api key {api_key} v{version} before authentication")

    async def _raw_tokens(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        session: _Plain | _Scram,
        exchange: SaslExchange,
    ) -> str:
        """The SaslHandshake v0 exchange: bare tokens each way; a failure just closes."""
        while True:
            token = await _read_frame(reader, _MAX_PREAUTH_FRAME)
            if token is None:
                return "closed: connection ended during SASL"
            exchange.authenticate_versions.append(-1)  # -1: a bare v0 token, no SaslAuthenticate
            try:
                reply, done = session.step(token)
            except _AuthFailed as e:
                exchange.username = session.username
                return f"failed: {e}"
            exchange.username = session.username
            if done:
                exchange.outcome = "authenticated"
            writer.write(_frame(reply))
            await writer.drain()
            if done:
                return "authenticated"

    @staticmethod
    async def _linger(reader: asyncio.StreamReader) -> None:
        """Delay the close after a refused authentication, as Kafka does
        (connection.failed.authentication.delay.ms): a client that sees the connection end in the
        same read as the error answer may report only "disconnected" (kafka-python 3 does)."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(reader.read(), _FAILED_AUTHENTICATION_DELAY_S)

    def _session(self, mechanism: str) -> _Plain | _Scram:
        assert self._users is not None
        if mechanism == "PLAIN":
            return _Plain(self._users)
        hash_name = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
        return _Scram(hash_name, self._scram[mechanism])

    @staticmethod
    async def _respond(
        writer: asyncio.StreamWriter,
        response: SaslHandshakeResponse | SaslAuthenticateResponse,
        correlation_id: int,
    ) -> None:
        response.with_header(correlation_id=correlation_id)
        writer.write(bytes(response.encode(header=True, framed=True)))
        await writer.drain()
