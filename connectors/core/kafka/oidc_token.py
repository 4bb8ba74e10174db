"""OAUTHBEARER tokens from an OIDC provider, for the clients that cannot fetch them themselves.

librdkafka fetches its own tokens (`sasl.oauthbearer.method=oidc`); the Kafka sink's driver-side
commit client (kafka-python) does not, so it is given this client: the client-credentials grant
against `kafka.sasl.oauthbearer.token.endpoint.url`, as librdkafka and Java's
OAuthBearerLoginCallbackHandler make it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping

from connectors.core.options import OptionError

#: The option naming the provider's token endpoint: every failure here is about it.
ENDPOINT_OPTION = "kafka.sasl.oauthbearer.token.endpoint.url"


class OidcTokenProvider:
    """OAUTHBEARER tokens by the OIDC client-credentials grant, as librdkafka's
    `sasl.oauthbearer.method=oidc` fetches them; cached until shortly before they expire."""

    def __init__(self, endpoint: str, client_id: str, client_secret: str,
                 scope: str | None = None, timeout_s: float = 10.0,
                 extensions: Mapping[str, str] | None = None) -> None:
        self._endpoint, self._client_id, self._secret = endpoint, client_id, client_secret
        self._scope, self._timeout = scope, timeout_s
        self._extensions = dict(extensions or {})
        self._token: str | None = None
        self._expires = 0.0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OidcTokenProvider({self._endpoint!r}, client_id={self._client_id!r})"

    def token(self) -> str:
        with self._lock:
            if self._token is None or time.monotonic() > self._expires:
                self._token, lifetime = self._fetch()
                # renewed at 80% of its lifetime, never used past it
                self._expires = time.monotonic() + max(lifetime, 0.0) * 0.8
            return self._token

    def extensions(self) -> dict[str, str]:
        """SASL extensions sent with the token (librdkafka's sasl.oauthbearer.extensions)."""
        return dict(self._extensions)

    def _fetch(self) -> tuple[str, float]:
        # Imported here: urllib.request pulls in http.client and email (about 0.1 s), which
        # every Python worker that imports the Kafka source would pay for a rarely used option.
        import urllib.parse
        import urllib.request

        form = {"grant_type": "client_credentials"}
        if self._scope:
            form["scope"] = self._scope
        request = urllib.request.Request(
            self._endpoint, data=urllib.parse.urlencode(form).encode(), method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded",
                     "Accept": "application/json"})
        import base64

        # RFC 6749 2.3.1 (and Java's client): each form-urlencoded, then Basic
        form_encode = lambda v: urllib.parse.quote_plus(v, safe="")  # noqa: E731
        basic = base64.b64encode(
            f"{form_encode(self._client_id)}:{form_encode(self._secret)}".encode()
        ).decode()
        request.add_header("Authorization", f"Basic {basic}")
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                body = json.load(response)
        except Exception as e:  # noqa: BLE001 - every failure is the endpoint's
            raise OptionError(
                ENDPOINT_OPTION,
                f"no token from {self._endpoint}: {type(e).__name__}: {self._hide(str(e))}"
                f"{self._error_of(e)} (check kafka.sasl.oauthbearer.client.id and "
                f"kafka.sasl.oauthbearer.client.secret)"
            ) from None
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise OptionError(ENDPOINT_OPTION,
                              f"the answer of {self._endpoint} has no access_token")
        try:
            lifetime = float(body.get("expires_in", 300))
        except (TypeError, ValueError):
            lifetime = 300.0
        return token, lifetime

    def _hide(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    def _error_of(self, e: Exception) -> str:
        """The OAuth error of a refused request (RFC 6749 5.2: error, error_description)."""
        import urllib.error

        if not isinstance(e, urllib.error.HTTPError):
            return ""
        try:
            answer = json.loads(e.read(4096) or b"{}")
        except Exception:  # noqa: BLE001 - not JSON: nothing more to say
            return ""
        if not isinstance(answer, dict) or "error" not in answer:
            return ""
        text = str(answer["error"])
        if answer.get("error_description"):
            text += f": {answer['error_description']}"
        return f" ({self._hide(text[:300])})"
