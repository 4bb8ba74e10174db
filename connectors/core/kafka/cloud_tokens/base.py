"""The part every cloud's token source shares: a cached token renewed before it expires."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

#: The method option, in librdkafka's name: librdkafka's own values are `default` and `oidc`;
#: the clouds' are this package's (connectors/core/kafka/cloud_tokens/settings.py).
METHOD = "sasl.oauthbearer.method"

#: A token is renewed once this share of its lifetime has passed. librdkafka asks again at
#: 80% of the lifetime it was told: by then the cached token has been replaced.
RENEW_AT = 0.75


def method_of(conf: Mapping[str, Any]) -> str:
    return str(conf.get(METHOD, "")).strip().lower()


class CloudTokenSource:
    """One cloud identity's OAUTHBEARER tokens: `_fetch` gets a new one (token, expiry as a
    Unix time in seconds); `token` caches it until RENEW_AT of its lifetime has passed. Thread
    safe: librdkafka calls `oauth_cb` from its own threads."""

    #: what the token source is, for messages and logs (never a secret)
    describe: str = "cloud token"
    #: the principal librdkafka reports for the token (the broker takes its own from the token)
    principal: str = "cloud-identity"

    def __init__(self) -> None:
        self._token: str | None = None
        self._expires = 0.0
        self._renew = 0.0
        self._lock = threading.Lock()
        self.fetches = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe})"

    def _fetch(self) -> tuple[str, float]:
        raise NotImplementedError

    def current(self) -> tuple[str, float]:
        """(token, expiry in Unix seconds), renewed when due."""
        with self._lock:
            now = time.time()
            if self._token is None or now >= self._renew:
                token, expires = self._fetch()
                lifetime = max(expires - now, 1.0)
                self._token, self._expires = token, expires
                self._renew = now + lifetime * RENEW_AT
                self.fetches += 1
                log.info("kafka-eos: new %s, valid for %.0f s", self.describe, lifetime)
            return self._token, self._expires

    def token(self) -> str:
        return self.current()[0]

    def oauth_cb(self, _oauthbearer_config: str) -> tuple[str, float, str]:
        """librdkafka's token refresh callback: (token, expiry in Unix seconds, principal).
        An exception's message becomes librdkafka's authentication error: ours name the
        option to check and never a secret."""
        token, expires = self.current()
        return token, expires, self.principal


def scrub(text: str, *secrets: str | None) -> str:
    """`text` with every non-empty secret replaced by ***."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text
