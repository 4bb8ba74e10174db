"""Google Cloud Managed Service for Apache Kafka tokens, from application default credentials.

The service takes, as the OAUTHBEARER token, a JWT-shaped string that Google's client libraries
build (the Java GcpLoginCallbackHandler, and the Python token provider in Google's docs): the
header {"typ": "JWT", "alg": "GOOG_OAUTH2_TOKEN"}, claims {exp, iat, iss: "Google", scope:
"kafka", sub: the principal's email}, and the Google OAuth access token in the signature's
place, each part base64url-encoded without padding.
"""

from __future__ import annotations

import base64
import json
import time
from datetime import timezone
from typing import Any

from connectors.core.kafka.cloud_tokens.base import CloudTokenSource
from connectors.core.options import OptionError

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
HEADER = {"typ": "JWT", "alg": "GOOG_OAUTH2_TOKEN"}


def _b64(data: str) -> str:
    return base64.urlsafe_b64encode(data.encode()).decode().rstrip("=")


class GoogleManagedKafkaTokenSource(CloudTokenSource):
    principal = "google"

    def __init__(self, credentials: Any, request: Any = None) -> None:
        super().__init__()
        self.credentials = credentials
        self._request = request
        self.describe = f"Google token ({type(credentials).__name__})"

    @classmethod
    def from_adc(cls) -> "GoogleManagedKafkaTokenSource":
        import google.auth
        import google.auth.exceptions

        try:
            credentials, _project = google.auth.default(scopes=list(SCOPES))
        except google.auth.exceptions.DefaultCredentialsError as e:
            raise OptionError(
                "kafka.sasl.oauthbearer.method",
                f"google needs application default credentials, and none were found "
                f"({type(e).__name__}): set GOOGLE_APPLICATION_CREDENTIALS to a service account "
                f"key or workload identity federation file, or run where the metadata server "
                f"gives a service account") from None
        return cls(credentials)

    def _refresh(self) -> None:
        import google.auth.exceptions

        if self._request is None:
            from google.auth.transport.requests import Request

            self._request = Request()
        try:
            self.credentials.refresh(self._request)
        except google.auth.exceptions.GoogleAuthError as e:
            raise OptionError(
                "kafka.sasl.oauthbearer.method",
                f"google: refreshing the application default credentials failed: "
                f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}") from None

    def _fetch(self) -> tuple[str, float]:
        if not self.credentials.valid or self.credentials.token is None:
            self._refresh()
        email = getattr(self.credentials, "service_account_email", None)
        if not email or email == "default":
            raise OptionError(
                "kafka.sasl.oauthbearer.method",
                f"google: the application default credentials "
                f"({type(self.credentials).__name__}) name no service account, and Managed "
                f"Kafka authenticates service accounts: use a service account key, workload "
                f"identity federation with service account impersonation, or the metadata "
                f"server's service account")
        expiry = self.credentials.expiry  # naive UTC in google-auth
        expires = (expiry.replace(tzinfo=timezone.utc).timestamp() if expiry is not None
                   else time.time() + 3600)
        now = int(time.time())
        claims = {"exp": int(expires), "iat": now, "iss": "Google", "scope": "kafka",
                  "sub": email}
        token = ".".join((_b64(json.dumps(HEADER)), _b64(json.dumps(claims)),
                          _b64(self.credentials.token)))
        return token, expires
