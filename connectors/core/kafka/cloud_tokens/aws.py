"""Amazon MSK IAM tokens, signed with aws-msk-iam-sasl-signer-python.

An MSK IAM token is a SigV4 presigned URL for `kafka-cluster:Connect` in the cluster's region,
base64url-encoded, valid 15 minutes. MSK's IAM listeners take it as an OAUTHBEARER token from
non-Java clients (Java's AWS_MSK_IAM mechanism sends the same signature in another frame,
which librdkafka does not speak). Credentials: the AWS default chain (environment, profile,
web identity, container and instance roles: botocore refreshes those itself), or a named
profile; with a role ARN, that role assumed through STS from them, renewed before it expires.
"""

from __future__ import annotations

import time
from typing import Any

from connectors.core.kafka.cloud_tokens.base import CloudTokenSource, scrub
from connectors.core.options import OptionError

#: awsRoleSessionName when none is given (it shows in CloudTrail)
DEFAULT_SESSION_NAME = "spark-eos-connectors"
#: assumed-role credentials are renewed this long before they expire
_ROLE_MARGIN_S = 300.0


class MskIamTokenSource(CloudTokenSource):
    principal = "aws-msk-iam"

    def __init__(self, region: str, *, profile: str | None = None, role_arn: str | None = None,
                 session_name: str | None = None, sts_region: str | None = None) -> None:
        super().__init__()
        self.region, self.profile, self.role_arn = region, profile, role_arn
        self.session_name = session_name or DEFAULT_SESSION_NAME
        self.sts_region = sts_region or region
        self.describe = (f"MSK IAM token for {region}"
                         + (f" (profile {profile})" if profile else "")
                         + (f" (role {role_arn})" if role_arn else ""))
        self._role: Any = None  # botocore Credentials of the assumed role
        self._role_expires = 0.0

    # -- credentials -----------------------------------------------------------------------

    def _session(self):
        import boto3
        import botocore.exceptions

        try:
            return boto3.Session(profile_name=self.profile)
        except botocore.exceptions.ProfileNotFound:
            raise OptionError(
                "kafka.aws.profile",
                f"the AWS profile {self.profile!r} is not in the AWS config or credentials "
                f"files (awsProfileName in kafka.sasl.jaas.config)") from None

    def credentials(self):
        """Frozen credentials to sign with."""
        if self.role_arn:
            return self._assumed()
        creds = self._session().get_credentials()
        if creds is None:
            raise OptionError(
                "kafka.sasl.jaas.config",
                "no AWS credentials were found for the MSK IAM token: set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, a profile (awsProfileName in kafka.sasl.jaas.config, or "
                "kafka.aws.profile), a role (awsRoleArn / kafka.aws.role.arn), or run where an "
                "instance, container or web identity role is available")
        return creds.get_frozen_credentials()

    def _assumed(self):
        if self._role is not None and time.time() < self._role_expires - _ROLE_MARGIN_S:
            return self._role
        import botocore.exceptions
        from botocore.credentials import Credentials

        session = self._session()
        base = session.get_credentials()
        if base is None:
            raise OptionError(
                "kafka.aws.role.arn",
                f"no AWS credentials were found to assume {self.role_arn} with: set "
                f"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile, or run where an "
                f"instance, container or web identity role is available")
        secret = base.get_frozen_credentials().secret_key
        try:
            answer = session.client("sts", region_name=self.sts_region).assume_role(
                RoleArn=self.role_arn, RoleSessionName=self.session_name)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            raise OptionError(
                "kafka.aws.role.arn",
                f"assuming {self.role_arn} (session {self.session_name}, STS in "
                f"{self.sts_region}) failed: {type(e).__name__}: {scrub(str(e), secret)} "
                f"(awsRoleArn in kafka.sasl.jaas.config)") from None
        c = answer["Credentials"]
        self._role = Credentials(c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"])
        expiration = c.get("Expiration")
        self._role_expires = (expiration.timestamp() if hasattr(expiration, "timestamp")
                              else time.time() + 3600)
        return self._role

    # -- the token ---------------------------------------------------------------------------

    def _fetch(self) -> tuple[str, float]:
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider
        from botocore.credentials import CredentialProvider

        creds = self.credentials()

        class _Given(CredentialProvider):
            METHOD = "given"

            def load(self):
                return creds

        try:
            token, expiry_ms = MSKAuthTokenProvider.generate_auth_token_from_credentials_provider(
                self.region, _Given())
        except ValueError as e:  # "AWS Credentials can not be empty"
            raise OptionError("kafka.sasl.jaas.config",
                              f"cannot sign the MSK IAM token: {e}") from None
        return token, expiry_ms / 1000.0
