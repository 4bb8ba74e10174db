"""Azure Event Hubs tokens from Entra ID, with azure-identity.

Event Hubs' Kafka endpoint takes an Entra ID access token for the namespace
(`https://<namespace>.servicebus.windows.net/.default`) as the OAUTHBEARER token. Any
azure-identity credential gives one through `get_token(scope)`: a service principal's secret,
or DefaultAzureCredential (environment, workload identity, managed identity, Azure CLI), which
is what production on Azure uses.
"""

from __future__ import annotations

from typing import Any

from connectors.core.kafka.cloud_tokens.base import CloudTokenSource, scrub
from connectors.core.options import OptionError


class EventHubsTokenSource(CloudTokenSource):
    principal = "azure-entra-id"

    def __init__(self, scope: str, credential: Any, *, secret: str | None = None,
                 option: str = "kafka.sasl.oauthbearer.method") -> None:
        super().__init__()
        self.scope, self.credential = scope, credential
        self._secret = secret
        self._option = option  # what to name when no token comes
        self.describe = f"Entra ID token for {scope} ({type(credential).__name__})"

    @classmethod
    def from_settings(cls, scope: str, *, client_id: str | None, client_secret: str | None,
                      tenant_id: str | None) -> "EventHubsTokenSource":
        from azure.identity import ClientSecretCredential, DefaultAzureCredential

        if client_secret:
            return cls(scope, ClientSecretCredential(tenant_id, client_id, client_secret),
                       secret=client_secret, option="kafka.sasl.oauthbearer.client.secret")
        credential = (DefaultAzureCredential(managed_identity_client_id=client_id)
                      if client_id else DefaultAzureCredential())
        return cls(scope, credential)

    def _fetch(self) -> tuple[str, float]:
        try:
            access = self.credential.get_token(self.scope)
        except Exception as e:  # noqa: BLE001 - azure-identity raises its own kinds
            hint = ("check kafka.sasl.oauthbearer.client.id, kafka.sasl.oauthbearer.client.secret "
                    "and kafka.azure.tenant.id" if self._secret else
                    "DefaultAzureCredential found no identity: set AZURE_CLIENT_ID, "
                    "AZURE_TENANT_ID and AZURE_CLIENT_SECRET (or a federated token file), run "
                    "with a managed identity (kafka.sasl.oauthbearer.client.id for a "
                    "user-assigned one), or give a service principal's "
                    "kafka.sasl.oauthbearer.client.id, kafka.sasl.oauthbearer.client.secret and "
                    "kafka.azure.tenant.id")
            first_line = scrub(str(e), self._secret).strip().splitlines()[:1]
            raise OptionError(
                self._option,
                f"no Entra ID token for {self.scope}: {type(e).__name__}: "
                f"{first_line[0][:300] if first_line else ''}; {hint}") from None
        return access.token, float(access.expires_on)
