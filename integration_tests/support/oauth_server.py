"""A local OAuth 2.0 token endpoint (client-credentials grant) and its JWKS, for an Apache Kafka
OAUTHBEARER listener that validates JWTs (`OAuthBearerValidatorCallbackHandler`).

Short-lived RS256 tokens (`lifetime_s`), signing keys rotated every `rotate_s`: the JWKS holds
the previous, the current and the next key, so a broker that refreshes its JWKS more often than
keys rotate always knows a token's key before the token exists. Written with joserfc. It counts
what it issued (per client and per caller's User-Agent: librdkafka's OIDC client and the commit
client's urllib tell themselves apart) and which keys signed, for the tests to assert that tokens
really expired and were renewed during a run.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from joserfc import jwt
from joserfc.jwk import RSAKey

AUDIENCE = "kafka"


@dataclass
class OAuthServer:
    clients: dict[str, str]  # client id -> secret
    lifetime_s: float = 5.0
    rotate_s: float = 6.0
    url: str = ""
    issued: collections.Counter = field(default_factory=collections.Counter)  # (client, agent)
    refused: collections.Counter = field(default_factory=collections.Counter)  # client id
    kids_used: set[str] = field(default_factory=set)
    _keys: list[RSAKey] = field(default_factory=list)
    _rotated_at: float = 0.0
    _serial: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/jwks"

    def _new_key(self) -> RSAKey:
        self._serial += 1
        return RSAKey.generate_key(2048, parameters={"kid": f"key-{self._serial}",
                                                     "use": "sig", "alg": "RS256"})

    def _rotate(self) -> None:
        """[previous, current, next]: rotated when `rotate_s` has passed."""
        now = time.monotonic()
        if not self._keys:
            self._keys = [self._new_key(), self._new_key()]
            self._rotated_at = now
        elif now - self._rotated_at >= self.rotate_s:
            self._keys = [*self._keys[-2:], self._new_key()]
            self._rotated_at = now
        if len(self._keys) == 2:
            self._keys.append(self._new_key())
            self._keys = self._keys[-3:]

    def _current(self) -> RSAKey:
        return self._keys[-2]

    def jwks(self) -> dict:
        with self._lock:
            self._rotate()
            return {"keys": [k.as_dict(private=False) for k in self._keys]}

    def token(self, client_id: str, agent: str) -> dict:
        with self._lock:
            self._rotate()
            key = self._current()
            now = int(time.time())
            lifetime = max(1, int(self.lifetime_s))
            # exp is whole seconds: rounded up, so that the token lives at least the
            # `expires_in` it is announced with (rounded down, a client renewing at 80% of it
            # could present a token already expired: seen as a task consumer's _AUTHENTICATION)
            claims = {"iss": self.url, "aud": AUDIENCE, "sub": client_id, "iat": now,
                      "nbf": now - 1, "exp": now + 1 + lifetime, "scope": "kafka"}
            kid = key.kid
            self.kids_used.add(kid)
            self.issued[(client_id, agent)] += 1
        token = jwt.encode({"alg": "RS256", "kid": kid, "typ": "JWT"}, claims, key)
        return {"access_token": token, "token_type": "Bearer", "expires_in": lifetime}

    def tokens_for(self, client_id: str, agent_prefix: str = "") -> int:
        return sum(n for (c, a), n in self.issued.items()
                   if c == client_id and a.startswith(agent_prefix))


def _handler(server: OAuthServer):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args) -> None:  # quiet
            pass

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.split("?")[0] == "/jwks":
                self._send(200, server.jwks())
            else:
                self._send(404, {"error": "not_found"})

        def do_POST(self) -> None:
            if self.path.split("?")[0] != "/token":
                self._send(404, {"error": "not_found"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            form = urllib.parse.parse_qs(self.rfile.read(length).decode())
            client_id = (form.get("client_id") or [""])[0]
            secret = (form.get("client_secret") or [""])[0]
            auth = self.headers.get("Authorization", "")
            if auth.startswith("Basic "):
                user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
                client_id = urllib.parse.unquote_plus(user)
                secret = urllib.parse.unquote_plus(password)
            if (form.get("grant_type") or [""])[0] != "client_credentials":
                self._send(400, {"error": "unsupported_grant_type"})
                return
            if server.clients.get(client_id) != secret or not secret:
                server.refused[client_id] += 1
                self._send(401, {"error": "invalid_client",
                                 "error_description": "client authentication failed"})
                return
            self._send(200, server.token(client_id, self.headers.get("User-Agent", "")))

    return Handler


@contextlib.contextmanager
def oauth_server(clients: dict[str, str], *, lifetime_s: float = 5.0,
                 rotate_s: float = 6.0) -> Iterator[OAuthServer]:
    """The endpoint on a free loopback port, in a thread; stopped on exit."""
    server = OAuthServer(dict(clients), lifetime_s=lifetime_s, rotate_s=rotate_s)
    ThreadingHTTPServer.request_queue_size = 128  # bursts of clients fetching at once
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(server))
    httpd.daemon_threads = True
    server.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True, name="oauth-server")
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
