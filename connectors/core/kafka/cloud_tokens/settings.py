"""The clouds' OAUTHBEARER methods as options: what each accepts, checked at query start.

`kafka.sasl.oauthbearer.method` takes, besides librdkafka's `default` and `oidc`:
- `aws_msk_iam`: Amazon MSK IAM. `kafka.aws.region` (else the region in the bootstrap host
  names), `kafka.aws.profile`, `kafka.aws.role.arn`, `kafka.aws.role.session.name`,
  `kafka.aws.sts.region`; credentials from the AWS default chain (or the profile).
- `azure`: Azure Event Hubs with Entra ID. `kafka.sasl.oauthbearer.scope` (else
  `https://<namespace>.servicebus.windows.net/.default` from the bootstrap host); a service
  principal with `kafka.sasl.oauthbearer.client.id`, `kafka.sasl.oauthbearer.client.secret` and
  `kafka.azure.tenant.id`, else DefaultAzureCredential (environment, workload identity, managed
  identity: `kafka.sasl.oauthbearer.client.id` picks a user-assigned one, Azure CLI).
- `google`: Google Cloud Managed Service for Apache Kafka, with application default
  credentials.
Java clients' options for the same (MSK's IAMLoginModule, Google's GcpLoginCallbackHandler) are
turned into these by connectors/core/kafka/cloud_tokens/java.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from connectors.core.kafka.cloud_tokens.base import METHOD, CloudTokenSource, method_of
from connectors.core.extras import require
from connectors.core.options import OptionError

#: method -> the pip extra that brings its library
METHODS = {"aws_msk_iam": "aws", "azure": "azure", "google": "gcp"}
LIBRDKAFKA_METHODS = ("default", "oidc")
#: this package's settings of each method (the `kafka.` prefix removed)
AWS_KEYS = ("aws.region", "aws.profile", "aws.role.arn", "aws.role.session.name",
            "aws.sts.region")
AZURE_KEYS = ("azure.tenant.id",)
#: keys no librdkafka client may see when a cloud method is on: ours and librdkafka's
#: OAUTHBEARER settings, which the token source reads instead
OWN_KEYS = frozenset((METHOD, "sasl.oauthbearer.config", "sasl.oauthbearer.client.id",
                      "sasl.oauthbearer.client.secret", "sasl.oauthbearer.scope",
                      "sasl.oauthbearer.extensions", "sasl.oauthbearer.token.endpoint.url",
                      *AWS_KEYS, *AZURE_KEYS))

_MSK_HOST = re.compile(r"\.kafka(?:-serverless)?\.([a-z]{2}(?:-[a-z]+)+-\d+)\.amazonaws\.com"
                       r"(?:\.cn)?\.?$")
_EVENT_HUBS_HOST = re.compile(
    r"^(?P<ns>[A-Za-z0-9-]+)\.servicebus\.(?P<cloud>windows\.net|chinacloudapi\.cn|"
    r"usgovcloudapi\.net|cloudapi\.de)\.?$")


def _opt(name: str) -> str:
    return f"kafka.{name}"


def is_cloud(conf: Mapping[str, Any]) -> bool:
    return method_of(conf) in METHODS


def hosts(conf: Mapping[str, Any]) -> list[str]:
    """The bootstrap servers' host names."""
    out = []
    for server in str(conf.get("bootstrap.servers", "")).split(","):
        server = server.strip()
        if not server:
            continue
        server = server.split("://", 1)[-1]
        host = server.rsplit(":", 1)[0] if server.count(":") == 1 or "]" in server else server
        out.append(host.strip("[]").lower())
    return out


def msk_region(conf: Mapping[str, Any]) -> str:
    """The region MSK tokens are signed for: kafka.aws.region, else the one in the bootstrap
    hosts' names (b-1.<cluster>.<id>.c2.kafka.<region>.amazonaws.com, and MSK Serverless's
    boot-<id>.c1.kafka-serverless.<region>.amazonaws.com)."""
    given = str(conf.get("aws.region", "")).strip()
    if given:
        if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d+", given):
            raise OptionError(_opt("aws.region"),
                              f"expected an AWS region such as eu-west-1; got {given!r}")
        return given
    found = {m.group(1) for h in hosts(conf) if (m := _MSK_HOST.search(h))}
    if len(found) == 1:
        return found.pop()
    if len(found) > 1:
        raise OptionError(_opt("aws.region"),
                          f"is required: the bootstrap servers name several regions "
                          f"({', '.join(sorted(found))})")
    raise OptionError(
        _opt("aws.region"),
        "is required for kafka.sasl.mechanism=AWS_MSK_IAM (MSK IAM tokens are signed for a "
        "region) when the bootstrap servers are not MSK's own names "
        "(b-1.<cluster>.<id>.c2.kafka.<region>.amazonaws.com): e.g. eu-west-1")


def event_hubs_scope(conf: Mapping[str, Any]) -> str:
    """The Entra ID scope of Event Hubs tokens: kafka.sasl.oauthbearer.scope, else
    https://<namespace>.servicebus.windows.net/.default from the bootstrap host."""
    given = str(conf.get("sasl.oauthbearer.scope", "")).strip()
    if given:
        return given
    found = {f"https://{m.group('ns').lower()}.servicebus.{m.group('cloud')}/.default"
             for h in hosts(conf) if (m := _EVENT_HUBS_HOST.match(h))}
    if len(found) == 1:
        return found.pop()
    raise OptionError(
        _opt("sasl.oauthbearer.scope"),
        "is required for kafka.sasl.oauthbearer.method=azure when the bootstrap servers are "
        "not one Event Hubs namespace (<namespace>.servicebus.windows.net:9093): "
        "https://<namespace>.servicebus.windows.net/.default")


def finish(conf: dict[str, Any]) -> None:
    """Check a cloud method's settings, at query start (and in every process that reads the
    options): the method's extra installed, its mechanism and protocol, region or scope
    found. Settings of one method given with another (or none) are refused."""
    method = method_of(conf)
    if method and method not in METHODS and method not in LIBRDKAFKA_METHODS:
        raise OptionError(_opt(METHOD), f"expected one of {', '.join(LIBRDKAFKA_METHODS)} "
                                        f"(librdkafka's) or {', '.join(METHODS)}; got {method!r}")
    for keys, wanted in ((AWS_KEYS, "aws_msk_iam"), (AZURE_KEYS, "azure")):
        stray = [k for k in keys if k in conf and method != wanted]
        if stray:
            raise OptionError(_opt(stray[0]), f"is used only with kafka.sasl.oauthbearer.method="
                                              f"{wanted} (or its Java options)")
    unknown = [k for k in conf if k.startswith(("aws.", "azure.")) and k not in AWS_KEYS + AZURE_KEYS]
    if unknown:
        raise OptionError(_opt(unknown[0]), f"is not an option; the cloud options are "
                                            f"{', '.join(_opt(k) for k in AWS_KEYS + AZURE_KEYS)}")
    if method not in METHODS:
        return
    conf[METHOD] = method
    mechanism = str(conf.get("sasl.mechanisms", "OAUTHBEARER")).strip().upper()
    if mechanism != "OAUTHBEARER":
        raise OptionError(_opt("sasl.mechanism"),
                          f"must be OAUTHBEARER with kafka.sasl.oauthbearer.method={method}; "
                          f"got {mechanism}")
    conf["sasl.mechanisms"] = "OAUTHBEARER"
    protocol = str(conf.get("security.protocol", "")).strip().upper()
    if protocol not in ("SASL_SSL", "SASL_PLAINTEXT"):
        raise OptionError(_opt("security.protocol"),
                          f"must be SASL_SSL (what the cloud's listeners speak) with "
                          f"kafka.sasl.oauthbearer.method={method}; got {protocol or 'nothing'}")
    require(METHODS[method])
    if method == "aws_msk_iam":
        msk_region(conf)
    elif method == "azure":
        event_hubs_scope(conf)
        if conf.get("sasl.oauthbearer.client.secret"):
            for key in ("sasl.oauthbearer.client.id", "azure.tenant.id"):
                if not str(conf.get(key, "")).strip():
                    raise OptionError(
                        _opt(key), "is required with kafka.sasl.oauthbearer.client.secret "
                                   "(an Entra ID service principal: its application (client) "
                                   "id and its tenant id)")


def build_source(conf: Mapping[str, Any]) -> CloudTokenSource:
    """The token source of the method in `conf` (its library imported only now)."""
    method = method_of(conf)
    if method == "aws_msk_iam":
        from connectors.core.kafka.cloud_tokens.aws import MskIamTokenSource

        return MskIamTokenSource(
            msk_region(conf), profile=conf.get("aws.profile") or None,
            role_arn=conf.get("aws.role.arn") or None,
            session_name=conf.get("aws.role.session.name") or None,
            sts_region=conf.get("aws.sts.region") or None)
    if method == "azure":
        from connectors.core.kafka.cloud_tokens.azure import EventHubsTokenSource

        return EventHubsTokenSource.from_settings(
            event_hubs_scope(conf), client_id=conf.get("sasl.oauthbearer.client.id") or None,
            client_secret=conf.get("sasl.oauthbearer.client.secret") or None,
            tenant_id=conf.get("azure.tenant.id") or None)
    if method == "google":
        from connectors.core.kafka.cloud_tokens.google import GoogleManagedKafkaTokenSource

        return GoogleManagedKafkaTokenSource.from_adc()
    raise OptionError(_opt(METHOD), f"expected one of {', '.join(METHODS)}; got {method!r}")
