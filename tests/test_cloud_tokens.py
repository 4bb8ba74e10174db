"""The clouds' OAUTHBEARER tokens offline (connectors/core/kafka/cloud_tokens/): the options Spark
users have for Amazon MSK IAM, Azure Event Hubs and Google Managed Kafka translated, tokens
signed and decoded, renewed before they expire, and every failure naming what is missing
without a secret. The clouds' own server-side checks cannot run here: MSK tokens are signed
with fake static credentials and with credentials from assume-role against moto's STS (a local
server); the Azure and Google credentials are stand-ins implementing the clouds' credential
interfaces (get_token; refresh/token/expiry). librdkafka's own refresh schedule is measured with
a real librdkafka client (no broker needed for the callback to run).
"""

from __future__ import annotations

import base64
import datetime
import json
import sys
import time
import urllib.parse

import pytest

from connectors.core.kafka import cloud_tokens
from connectors.core.kafka.cloud_tokens.base import CloudTokenSource
from connectors.core.extras import MissingExtra
from connectors.core.kafka.java_options import translate
from connectors.core.kafka.python_security import check_commit_mechanism, kafka_python_config
from connectors.core.options import OptionError, redact

MSK_HOST = "b-1.mycluster.abc123.c2.kafka.eu-west-1.amazonaws.com:9098"
MSK = "software.amazon.msk.auth.iam."
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
FAKE_KEY_ID, FAKE_SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.fixture(autouse=True)
def fresh_sources():
    cloud_tokens._SOURCES.clear()
    yield
    cloud_tokens._SOURCES.clear()


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """An AWS environment with nothing in it: no files, no instance metadata."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_DEFAULT_PROFILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_STS", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return monkeypatch


@pytest.fixture
def fake_keys(aws_env):
    aws_env.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY_ID)
    aws_env.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    return aws_env


def msk_java(form: str = "iam", jaas_options: str = "", host: str = MSK_HOST) -> dict[str, str]:
    """The options of a Spark job on MSK IAM (aws-msk-iam-auth's README), with the prefix
    removed as translate() sees them."""
    if form == "iam":
        return {"bootstrap.servers": host, "security.protocol": "SASL_SSL",
                "sasl.mechanism": "AWS_MSK_IAM",
                "sasl.jaas.config": f"{MSK}IAMLoginModule required {jaas_options};",
                "sasl.client.callback.handler.class": f"{MSK}IAMClientCallbackHandler"}
    return {"bootstrap.servers": host, "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.jaas.config": f"{OAUTH_MODULE} required {jaas_options};",
            "sasl.login.callback.handler.class": f"{MSK}IAMOAuthBearerLoginCallbackHandler",
            "sasl.client.callback.handler.class": f"{MSK}IAMOAuthBearerLoginCallbackHandler"}


def decode_msk(token: str) -> tuple[str, dict[str, str]]:
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}", dict(
        urllib.parse.parse_qsl(parts.query))


# -- Amazon MSK IAM -------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["iam", "oauthbearer"])
def test_msk_iam_java_options_become_the_aws_method(form):
    out = translate(msk_java(form, 'awsProfileName="dev" awsRoleArn="arn:aws:iam::123456789012:'
                                   'role/kafka" awsRoleSessionName="job-1" awsStsRegion="us-east-1"'))
    assert out == {"bootstrap.servers": MSK_HOST, "security.protocol": "SASL_SSL",
                   "sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.method": "aws_msk_iam",
                   "aws.profile": "dev", "aws.role.arn": "arn:aws:iam::123456789012:role/kafka",
                   "aws.role.session.name": "job-1", "aws.sts.region": "us-east-1"}
    check_commit_mechanism(out)  # the commit client can speak it


@pytest.mark.parametrize("host, region", [
    (MSK_HOST, "eu-west-1"),
    ("boot-abcd1234.c1.kafka-serverless.us-east-2.amazonaws.com:9098", "us-east-2"),
    ("b-2.cluster.xyz.c3.kafka.cn-north-1.amazonaws.com.cn:9098", "cn-north-1"),
    ("b-1-public.cluster.xyz.c3.kafka.ap-southeast-2.amazonaws.com:9198", "ap-southeast-2"),
])
def test_the_region_comes_from_the_bootstrap_host(host, region):
    from connectors.core.kafka.cloud_tokens.settings import msk_region

    assert msk_region(translate(msk_java(host=host))) == region


def test_a_bootstrap_host_without_a_region_needs_the_region_option():
    with pytest.raises(OptionError) as e:
        translate(msk_java(host="kafka.internal.example.com:9098"))
    assert e.value.option == "kafka.aws.region"
    given = translate({**msk_java(host="kafka.internal.example.com:9098"),
                       "aws.region": "eu-central-1"})
    assert given["aws.region"] == "eu-central-1"
    with pytest.raises(OptionError, match="expected an AWS region"):
        translate({**msk_java(), "aws.region": "Frankfurt"})


@pytest.mark.parametrize("options, option, words", [
    ({**msk_java(jaas_options='awsRegionName="x"')}, "kafka.sasl.jaas.config", "awsProfileName"),
    ({**msk_java(jaas_options=f'awsRoleAccessKeyId="{FAKE_KEY_ID}" '
                              f'awsRoleSecretAccessKey="{FAKE_SECRET}"')},
     "kafka.sasl.jaas.config", "AWS credential chain"),
    ({**msk_java(), "security.protocol": "SSL"}, "kafka.security.protocol", "SASL_SSL"),
    ({**msk_java(), "sasl.mechanism": "SCRAM-SHA-512"}, "kafka.sasl.mechanism", "AWS_MSK_IAM"),
    ({"bootstrap.servers": MSK_HOST, "aws.region": "eu-west-1"}, "kafka.aws.region",
     "aws_msk_iam"),
    ({"bootstrap.servers": MSK_HOST, "sasl.oauthbearer.method": "aws"},
     "kafka.sasl.oauthbearer.method", "aws_msk_iam, azure, google"),
])
def test_wrong_msk_options_fail_naming_the_option_and_no_secret(options, option, words):
    with pytest.raises(OptionError) as e:
        translate(options)
    assert e.value.option == option and words in str(e.value), str(e.value)
    assert FAKE_SECRET not in str(e.value)


def test_an_msk_token_signed_with_static_credentials_decodes_to_connect_in_the_region(fake_keys):
    conf = translate(msk_java())
    client = cloud_tokens.librdkafka_client_conf(conf)
    assert not [k for k in client if k.startswith(("aws.", "sasl.oauthbearer."))]
    before = time.time()
    token, expires, principal = client["oauth_cb"]("")
    endpoint, query = decode_msk(token)
    assert endpoint == "https://kafka.eu-west-1.amazonaws.com/"
    assert query["Action"] == "kafka-cluster:Connect"
    key_id, _date, region, service, _ = query["X-Amz-Credential"].split("/")
    assert (key_id, region, service) == (FAKE_KEY_ID, "eu-west-1", "kafka-cluster")
    assert query["X-Amz-Expires"] == "900" and query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert before + 900 - 5 <= expires <= time.time() + 900
    assert principal and FAKE_SECRET not in token
    # the commit client's provider hands out the same (cached) token
    provider = kafka_python_config(conf)["sasl_oauth_token_provider"]
    assert provider.token() == token and provider.extensions() == {}


def test_no_aws_credentials_fail_naming_what_to_set(aws_env):
    conf = translate(msk_java())  # the options are fine: credentials are looked up at use
    with pytest.raises(OptionError) as e:
        cloud_tokens.check_tokens(conf)
    assert "no AWS credentials" in str(e.value) and "AWS_ACCESS_KEY_ID" in str(e.value)


def test_the_sink_commit_client_fails_at_start_naming_the_missing_credentials(aws_env):
    """The exactly-once sink's first check at query start (kafka-python): the OptionError, not
    a dropped connection from inside kafka-python's SASL exchange."""
    from sinks.kafka.commit_client import check_cluster

    with pytest.raises(OptionError, match="no AWS credentials"):
        check_cluster(translate(msk_java()), timeout_s=2)


def test_an_unknown_profile_fails_naming_the_option(aws_env):
    conf = translate(msk_java(jaas_options='awsProfileName="nope"'))
    with pytest.raises(OptionError) as e:
        cloud_tokens.check_tokens(conf)
    assert e.value.option == "kafka.aws.profile" and "'nope'" in str(e.value)


@pytest.fixture(scope="module")
def moto_sts():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def test_assume_role_against_sts_signs_with_the_role_credentials(fake_keys, moto_sts):
    fake_keys.setenv("AWS_ENDPOINT_URL_STS", moto_sts)
    role = "arn:aws:iam::123456789012:role/kafka-writer"
    conf = translate(msk_java(jaas_options=f'awsRoleArn="{role}" awsRoleSessionName="spark-1"'))
    source = cloud_tokens.source_for(conf)
    _endpoint, query = decode_msk(source.token())
    key_id = query["X-Amz-Credential"].split("/")[0]
    assert key_id != FAKE_KEY_ID and key_id.startswith("ASIA"), key_id  # the role's, not ours
    assert query["X-Amz-Security-Token"]  # session credentials carry their token
    assert FAKE_SECRET not in source.token()


def test_a_refused_assume_role_names_the_role_option_and_no_secret(fake_keys):
    # nothing listens there: STS cannot be reached (as with a wrong endpoint or no network)
    fake_keys.setenv("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:9")
    fake_keys.setenv("AWS_MAX_ATTEMPTS", "1")
    conf = translate(msk_java(jaas_options='awsRoleArn="arn:aws:iam::1:role/r"'))
    with pytest.raises(OptionError) as e:
        cloud_tokens.check_tokens(conf)
    assert e.value.option == "kafka.aws.role.arn" and "arn:aws:iam::1:role/r" in str(e.value)
    assert FAKE_SECRET not in str(e.value)


# -- renewal ---------------------------------------------------------------------------------


class Counting(CloudTokenSource):
    def __init__(self, lifetime_s: float) -> None:
        super().__init__()
        self.lifetime = lifetime_s

    def _fetch(self) -> tuple[str, float]:
        return f"token-{self.fetches + 1}", time.time() + self.lifetime


def test_a_token_is_cached_and_renewed_before_it_expires():
    source = Counting(lifetime_s=2.0)
    first, expires = source.current()
    assert source.current()[0] == first and source.fetches == 1  # cached
    time.sleep(1.6)  # past RENEW_AT (75%) of its lifetime, before it expires
    assert time.time() < expires
    assert source.token() == "token-2" and source.fetches == 2


def test_librdkafka_calls_the_token_callback_again_on_its_own_schedule():
    """Measured with a real librdkafka producer and nothing listening: the callback runs when
    the client is created and again before each token expires, with no poll() (confluent-kafka
    serves it on a background thread): the tasks' producers and consumers, and the driver's
    admin clients, renew their tokens however seldom they are polled."""
    from confluent_kafka import Producer

    source = Counting(lifetime_s=2.0)
    producer = Producer({"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanisms": "OAUTHBEARER", "oauth_cb": source.oauth_cb,
                         "log_level": 0})
    time.sleep(5.5)
    assert source.fetches >= 3, source.fetches
    del producer


# -- the extras ------------------------------------------------------------------------------


@pytest.mark.parametrize("module, options, extra", [
    ("aws_msk_iam_sasl_signer", msk_java(), "aws"),
    ("azure.identity", {"bootstrap.servers": "ns.servicebus.windows.net:9093",
                        "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                        "sasl.oauthbearer.method": "azure"}, "azure"),
    ("google.auth", {"bootstrap.servers": "bootstrap.c.us-central1.managedkafka.p.cloud.goog:9092",
                     "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                     "sasl.jaas.config": f"{OAUTH_MODULE} required;",
                     "sasl.login.callback.handler.class":
                         "com.google.cloud.hosted.kafka.auth.GcpLoginCallbackHandler"}, "gcp"),
])
def test_a_missing_extra_fails_at_start_naming_the_pip_install(monkeypatch, module, options,
                                                                extra):
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingExtra) as e:
        translate(options)
    assert str(e.value).endswith(f"pip install 'spark-eos-connectors[{extra}]'"), str(e.value)


# -- Azure Event Hubs ------------------------------------------------------------------------

EH = "my-namespace.servicebus.windows.net:9093"


class StandInCredential:
    """azure-identity's credential interface: get_token(*scopes) -> AccessToken."""

    def __init__(self, lifetime_s: float = 3600, error: Exception | None = None) -> None:
        self.scopes: list[tuple[str, ...]] = []
        self.lifetime, self.error = lifetime_s, error

    def get_token(self, *scopes: str, **_kwargs):
        from azure.core.credentials import AccessToken

        self.scopes.append(scopes)
        if self.error is not None:
            raise self.error
        return AccessToken(f"eyJ.entra-token-{len(self.scopes)}.sig",
                           int(time.time() + self.lifetime))


def azure_options(**extra: str) -> dict[str, str]:
    return {"bootstrap.servers": EH, "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "azure", **extra}


def test_event_hubs_tokens_come_from_default_azure_credential_for_the_namespace(monkeypatch):
    import azure.identity

    made: list[StandInCredential] = []

    def default_credential(**kwargs):
        made.append(StandInCredential())
        made[-1].kwargs = kwargs
        return made[-1]

    monkeypatch.setattr(azure.identity, "DefaultAzureCredential", default_credential)
    conf = translate(azure_options())
    token, expires, _ = cloud_tokens.librdkafka_client_conf(conf)["oauth_cb"]("")
    assert token == "eyJ.entra-token-1.sig" and expires > time.time() + 3000
    assert made[0].scopes == [("https://my-namespace.servicebus.windows.net/.default",)]
    assert made[0].kwargs == {}
    assert kafka_python_config(conf)["sasl_oauth_token_provider"].token() == token


def test_a_user_assigned_managed_identity_is_picked_by_client_id(monkeypatch):
    import azure.identity

    seen = {}
    monkeypatch.setattr(azure.identity, "DefaultAzureCredential",
                        lambda **kw: seen.update(kw) or StandInCredential())
    cloud_tokens.check_tokens(translate(azure_options(
        **{"sasl.oauthbearer.client.id": "1111-2222"})))
    assert seen == {"managed_identity_client_id": "1111-2222"}


def test_a_service_principal_needs_its_tenant_and_never_shows_its_secret(monkeypatch):
    import azure.identity

    secret = "sp-secret-" + "x" * 20
    with pytest.raises(OptionError) as e:
        translate(azure_options(**{"sasl.oauthbearer.client.id": "app",
                                   "sasl.oauthbearer.client.secret": secret}))
    assert e.value.option == "kafka.azure.tenant.id" and secret not in str(e.value)
    # refused by Entra ID: the error names the options, the secret is scrubbed from its text
    refused = StandInCredential(error=RuntimeError(f"AADSTS7000215: Invalid client secret "
                                                    f"provided ({secret})"))
    monkeypatch.setattr(azure.identity, "ClientSecretCredential",
                        lambda tenant, client, s: refused)
    conf = translate(azure_options(**{"sasl.oauthbearer.client.id": "app",
                                      "sasl.oauthbearer.client.secret": secret,
                                      "azure.tenant.id": "tenant-1"}))
    with pytest.raises(OptionError) as e:
        cloud_tokens.check_tokens(conf)
    assert e.value.option == "kafka.sasl.oauthbearer.client.secret"
    assert "AADSTS7000215" in str(e.value) and secret not in str(e.value)
    assert secret not in repr(redact(conf))


def test_no_azure_identity_fails_naming_what_to_set(monkeypatch):
    import azure.identity
    from azure.core.exceptions import ClientAuthenticationError

    monkeypatch.setattr(azure.identity, "DefaultAzureCredential", lambda **kw: StandInCredential(
        error=ClientAuthenticationError("DefaultAzureCredential failed to retrieve a token")))
    with pytest.raises(OptionError) as e:
        cloud_tokens.check_tokens(translate(azure_options()))
    assert "AZURE_CLIENT_ID" in str(e.value) and "managed identity" in str(e.value)


def test_the_scope_is_required_off_event_hubs_hosts():
    with pytest.raises(OptionError) as e:
        translate({**azure_options(), "bootstrap.servers": "10.0.0.5:9093"})
    assert e.value.option == "kafka.sasl.oauthbearer.scope"
    conf = translate({**azure_options(), "bootstrap.servers": "10.0.0.5:9093",
                      "sasl.oauthbearer.scope": "https://ns.servicebus.windows.net/.default"})
    assert conf["sasl.oauthbearer.scope"] == "https://ns.servicebus.windows.net/.default"


def test_the_event_hubs_connection_string_form_is_plain_and_never_shown():
    """Event Hubs' `$ConnectionString` form is SASL PLAIN: the connection string is the
    password, and redacted as one."""
    key = "s3cr3tSharedAccessKeyValue="
    cs = (f"Endpoint=sb://my-namespace.servicebus.windows.net/;SharedAccessKeyName="
          f"RootManageSharedAccessKey;SharedAccessKey={key}")
    conf = translate({"bootstrap.servers": EH, "security.protocol": "SASL_SSL",
                      "sasl.mechanism": "PLAIN",
                      "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
                                          f'required username="$ConnectionString" password="{cs}";'})
    assert conf["sasl.username"] == "$ConnectionString" and conf["sasl.password"] == cs
    config = kafka_python_config(conf)
    assert config["sasl_mechanism"] == "PLAIN" and config["sasl_plain_password"] == cs
    assert key not in repr(redact(conf))


def test_databricks_shaded_kafka_classes_are_read_as_kafkas_own():
    out = translate({"bootstrap.servers": EH, "security.protocol": "SASL_SSL",
                     "sasl.mechanism": "OAUTHBEARER",
                     "sasl.jaas.config": "kafkashaded.org.apache.kafka.common.security.oauthbearer."
                                         'OAuthBearerLoginModule required clientId="app" '
                                         'clientSecret="s" scope="https://ns.servicebus.windows.net/.default";',
                     "sasl.login.callback.handler.class":
                         "kafkashaded.org.apache.kafka.common.security.oauthbearer.secured."
                         "OAuthBearerLoginCallbackHandler",
                     "sasl.oauthbearer.token.endpoint.url":
                         "https://login.microsoftonline.com/tenant/oauth2/v2.0/token"})
    assert out["sasl.oauthbearer.method"] == "oidc"
    assert out["sasl.oauthbearer.client.id"] == "app"
    assert out["sasl.oauthbearer.scope"] == "https://ns.servicebus.windows.net/.default"


# -- Google Managed Kafka --------------------------------------------------------------------


class StandInGoogleCredentials:
    """google-auth's credentials interface: valid, token, expiry (naive UTC), refresh()."""

    def __init__(self, email: str | None = "writer@proj.iam.gserviceaccount.com") -> None:
        self.token: str | None = None
        self.expiry: datetime.datetime | None = None
        self.refreshes = 0
        if email is not None:
            self.service_account_email = email

    @property
    def valid(self) -> bool:
        return self.token is not None and self.expiry > datetime.datetime.utcnow()

    def refresh(self, _request) -> None:
        self.refreshes += 1
        self.token = f"ya29.access-token-{self.refreshes}"
        self.expiry = datetime.datetime.utcnow() + datetime.timedelta(seconds=3599)


def google_java() -> dict[str, str]:
    return {"bootstrap.servers": "bootstrap.my-cluster.us-central1.managedkafka.proj.cloud.goog:9092",
            "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
            "sasl.jaas.config": f"{OAUTH_MODULE} required;",
            "sasl.login.callback.handler.class":
                "com.google.cloud.hosted.kafka.auth.GcpLoginCallbackHandler"}


def _b64json(part: str) -> dict:
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def test_google_tokens_have_the_form_managed_kafka_documents(monkeypatch):
    import google.auth

    creds = StandInGoogleCredentials()
    monkeypatch.setattr(google.auth, "default", lambda scopes=None: (creds, "proj"))
    conf = translate(google_java())
    assert conf["sasl.oauthbearer.method"] == "google"
    token, expires, _ = cloud_tokens.librdkafka_client_conf(conf)["oauth_cb"]("")
    header, claims, signature = token.split(".")
    assert _b64json(header) == {"typ": "JWT", "alg": "GOOG_OAUTH2_TOKEN"}
    body = _b64json(claims)
    assert body["iss"] == "Google" and body["scope"] == "kafka"
    assert body["sub"] == "writer@proj.iam.gserviceaccount.com"
    assert abs(body["exp"] - expires) < 1 and expires > time.time() + 3500
    assert base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)) == b"ya29.access-token-1"
    assert "=" not in token
    assert kafka_python_config(conf)["sasl_oauth_token_provider"].token() == token


def test_google_without_application_default_credentials_says_what_to_set(monkeypatch, tmp_path):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(OptionError) as e:
        cloud_tokens.check_tokens(translate(google_java()))
    assert "GOOGLE_APPLICATION_CREDENTIALS" in str(e.value)


def test_google_credentials_without_a_service_account_are_refused(monkeypatch):
    import google.auth

    monkeypatch.setattr(google.auth, "default",
                        lambda scopes=None: (StandInGoogleCredentials(email=None), "proj"))
    with pytest.raises(OptionError, match="name no service account"):
        cloud_tokens.check_tokens(translate(google_java()))


# -- transactions refused --------------------------------------------------------------------


def test_a_cluster_refusing_transactions_is_said_plainly():
    from connectors.core.kafka.transactions_refused import message, refuses_transactions

    assert refuses_transactions(35) and refuses_transactions(-165)  # UNSUPPORTED_VERSION, librdkafka's
    assert not refuses_transactions(53)  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED: the ACL's message
    text = message(EH, "InitProducerId: UnsupportedVersionError (error 35)")
    assert "Premium and Dedicated" in text and "deliveryGuarantee=at-least-once" in text
    assert "Event Hubs" not in message("kafka1.internal:9092", "x")


def test_the_formats_fail_at_query_start_without_the_aws_extra(monkeypatch, tmp_path):
    """Through the formats, as a query starts: the source's reader and the sink's writer."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    from connectors.formats import KafkaEosDataSource

    monkeypatch.setitem(sys.modules, "aws_msk_iam_sasl_signer", None)
    options = {f"kafka.{k}": v for k, v in msk_java().items()}
    with pytest.raises(MissingExtra, match=r"pip install 'spark-eos-connectors\[aws\]'"):
        source = KafkaEosDataSource({**options, "subscribe": "t"})
        source.streamReader(source.schema())
    schema = StructType([StructField("value", BinaryType())])
    with pytest.raises(MissingExtra, match=r"\[aws\]"):
        KafkaEosDataSource({**options, "topic": "t",
                            "checkpointLocation": str(tmp_path / "ck")}).streamWriter(schema, False)
