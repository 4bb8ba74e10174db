"""The clouds' Java client options, as Spark users have them, turned into the cloud methods.

Amazon MSK IAM (aws-msk-iam-auth), both of its forms:
    sasl.mechanism=AWS_MSK_IAM
    sasl.jaas.config=software.amazon.msk.auth.iam.IAMLoginModule required [awsProfileName=".."]
        [awsRoleArn=".."] [awsRoleSessionName=".."] [awsStsRegion=".."];
    sasl.client.callback.handler.class=software.amazon.msk.auth.iam.IAMClientCallbackHandler
and
    sasl.mechanism=OAUTHBEARER
    sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
    sasl.login.callback.handler.class=software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler
    sasl.client.callback.handler.class=software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler
Google Managed Kafka: OAUTHBEARER with
    sasl.login.callback.handler.class=com.google.cloud.hosted.kafka.auth.GcpLoginCallbackHandler
Databricks' shaded names (`kafkashaded.org.apache.kafka...`) are read as Kafka's own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from connectors.core.kafka.cloud_tokens.base import METHOD
from connectors.core.options import OptionError

MSK_LOGIN_MODULE = "software.amazon.msk.auth.iam.IAMLoginModule"
MSK_HANDLERS = ("software.amazon.msk.auth.iam.IAMClientCallbackHandler",
                "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler")
GOOGLE_HANDLER = "com.google.cloud.hosted.kafka.auth.GcpLoginCallbackHandler"
#: MSK's JAAS options -> this package's settings (None: accepted, nothing to do here)
MSK_JAAS_OPTIONS = {
    "awsProfileName": "aws.profile",
    "awsRoleArn": "aws.role.arn",
    "awsRoleSessionName": "aws.role.session.name",
    "awsStsRegion": "aws.sts.region",
    "awsDebugCreds": None,  # logs the caller's identity in Java; nothing here
    "awsMaxRetries": None,  # Java's retries of credential loading
    "awsMaxBackOffTimeMs": None,
    "awsRoleAccessKeyId": None,  # refused below: a static key belongs in the AWS chain
    "awsRoleSecretAccessKey": None,
    "awsRoleSessionToken": None,
}
_HANDLER_KEYS = ("sasl.login.callback.handler.class", "sasl.client.callback.handler.class")
_SHADED = "kafkashaded."
_JAAS_HEAD = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?P<rest>.*)$", re.S)


def _unshade(name: str) -> str:
    name = name.strip()
    return name[len(_SHADED):] if name.startswith(_SHADED + "org.apache.kafka.") else name


def _jaas_module(conf: dict[str, Any]) -> str | None:
    m = _JAAS_HEAD.match(str(conf.get("sasl.jaas.config", "")))
    return m.group("module") if m else None


#: kafka_java_options.parse_jaas: (family, options) of a JAAS line. Passed in by the caller, so
#: that this package does not import the module that imports it.
JaasParser = Callable[[str], tuple[str, dict[str, str]]]


def translate_java(conf: dict[str, Any], parse_jaas: JaasParser) -> None:
    """In place, before the generic Java translation: Databricks' shaded class names unshaded;
    MSK's and Google's JAAS lines and callback handlers turned into
    sasl.oauthbearer.method=aws_msk_iam / google with their settings."""
    for key in _HANDLER_KEYS:
        if key in conf:
            conf[key] = _unshade(str(conf[key]))
    module = _jaas_module(conf)
    if module is not None and module.startswith(_SHADED + "org.apache.kafka."):
        conf["sasl.jaas.config"] = _unshade(module) + str(conf["sasl.jaas.config"]).strip()[len(module):]
        module = _unshade(module)
    mechanism = str(conf.get("sasl.mechanisms", conf.get("sasl.mechanism", ""))).strip().upper()
    handlers = {conf.get(k) for k in _HANDLER_KEYS} - {None}
    msk = (mechanism == "AWS_MSK_IAM" or module == MSK_LOGIN_MODULE
           or bool(handlers & set(MSK_HANDLERS)))
    google = GOOGLE_HANDLER in handlers
    if msk and google:
        raise OptionError("kafka.sasl.login.callback.handler.class",
                          "names both MSK's and Google's callback handlers; keep one")
    if not (msk or google):
        return
    method = "aws_msk_iam" if msk else "google"
    given = str(conf.get(METHOD, "")).strip().lower()
    if given and given != method:
        raise OptionError(f"kafka.{METHOD}",
                          f"is {given}, but the Java options given are {method}'s; keep one")
    stray = handlers - set(MSK_HANDLERS if msk else (GOOGLE_HANDLER,))
    if stray:
        raise OptionError("kafka.sasl.client.callback.handler.class",
                          f"{sorted(stray)[0]} cannot go with "
                          f"{'MSK IAM' if msk else 'Google'} authentication; remove it")
    for key in _HANDLER_KEYS:
        conf.pop(key, None)
    for key in ("sasl.mechanism", "sasl.mechanisms"):
        value = str(conf.get(key, "")).strip().upper()
        if value and value not in ("AWS_MSK_IAM", "OAUTHBEARER"):
            raise OptionError("kafka.sasl.mechanism",
                              f"must be AWS_MSK_IAM or OAUTHBEARER with MSK IAM, or OAUTHBEARER "
                              f"with Google's handler; got {value}")
        if value:
            conf[key] = "OAUTHBEARER"
    conf[METHOD] = method
    if "sasl.jaas.config" in conf:
        _take_jaas(conf, msk, parse_jaas)


def _take_jaas(conf: dict[str, Any], msk: bool, parse_jaas: JaasParser) -> None:
    jaas = str(conf.pop("sasl.jaas.config"))
    module = _jaas_module({"sasl.jaas.config": jaas})
    if msk and module == MSK_LOGIN_MODULE:
        # parse_jaas knows Kafka's modules only: read MSK's options with the same grammar
        jaas = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule" + \
            jaas.strip()[len(MSK_LOGIN_MODULE):]
    elif module != "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule":
        raise OptionError("kafka.sasl.jaas.config",
                          f"expected {MSK_LOGIN_MODULE + ' or ' if msk else ''}"
                          f"org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                          f"with {'MSK IAM' if msk else 'Google'} authentication")
    _family, options = parse_jaas(jaas)
    accepted = MSK_JAAS_OPTIONS if msk else {}
    for name, value in options.items():
        if name not in accepted:
            raise OptionError(
                "kafka.sasl.jaas.config",
                f"its option {name} is not one of {'MSK IAM' if msk else 'Google'}'s login "
                f"options" + (f" ({', '.join(k for k, v in MSK_JAAS_OPTIONS.items() if v)})"
                              if msk else " (it takes none: credentials come from ADC)"))
        if name.startswith("awsRole") and name.endswith(("KeyId", "AccessKey", "SessionToken")):
            raise OptionError(
                "kafka.sasl.jaas.config",
                f"its option {name}: give static AWS keys through the AWS credential chain "
                f"(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN or a profile), "
                f"not in the options")
        target = accepted[name]
        if target is None:
            continue
        if str(conf.get(target, value)) != value:
            raise OptionError("kafka.sasl.jaas.config",
                              f"its {name} differs from kafka.{target}; keep one of the two")
        conf[target] = value
