"""Schema Registry option parsing: formats, the required URL, subjects by strategy, client
settings passed through as confluent-kafka wants them, and secrets kept out of every message."""

from __future__ import annotations

import pickle

import pytest

from connectors.core.options import OptionError
from connectors.core.schema_registry.options import (
    RegistryOptions,
    redact_client_conf,
    registry_option_names,
    url_without_credentials,
)

URL = "http://127.0.0.1:8081"


def parse(side: str = "value", **options: str) -> RegistryOptions:
    return RegistryOptions.parse({k.lower(): v for k, v in options.items()}, side=side)


def test_binary_is_the_default_and_needs_no_registry() -> None:
    opts = parse()
    assert (opts.format, opts.enabled, opts.url) == ("binary", False, None)


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json-schema", "AVRO"])
def test_registry_formats_need_the_url(fmt: str) -> None:
    with pytest.raises(OptionError) as e:
        parse(valueFormat=fmt)
    assert e.value.option == "schema.registry.url"
    assert fmt.lower() in str(e.value)


def test_a_bad_format_names_the_option_and_the_choices() -> None:
    with pytest.raises(OptionError) as e:
        parse(side="key", keyFormat="thrift")
    assert e.value.option == "keyFormat"
    for accepted in ("binary", "avro", "protobuf", "json-schema"):
        assert accepted in str(e.value)


def test_key_side_reads_key_options_only() -> None:
    opts = parse(side="key", keyFormat="avro", valueFormat="protobuf",
                 **{"schema.registry.url": URL, "keySubject": "k-subj", "valueSubject": "v"})
    assert (opts.format, opts.subject_for("t")) == ("avro", "k-subj")
    assert opts.raw_column == "rawKey"


@pytest.mark.parametrize(("strategy", "expected"), [
    ("topic", "orders-value"),
    ("TopicNameStrategy", "orders-value"),
    ("record", "com.acme.Order"),
    ("io.confluent.kafka.serializers.subject.RecordNameStrategy", "com.acme.Order"),
    ("topic-record", "orders-com.acme.Order"),
    ("TopicRecordNameStrategy", "orders-com.acme.Order"),
])
def test_subject_names_by_strategy(strategy: str, expected: str) -> None:
    opts = parse(valueFormat="avro", valueSubjectNameStrategy=strategy,
                 valueRecordName="com.acme.Order", **{"schema.registry.url": URL})
    assert opts.subject_for("orders") == expected


def test_record_strategy_without_a_record_name_names_the_option() -> None:
    opts = parse(valueFormat="avro", valueSubjectNameStrategy="record",
                 **{"schema.registry.url": URL})
    with pytest.raises(OptionError) as e:
        opts.subject_for("orders")
    assert e.value.option == "valueRecordName"
    assert opts.subject_for("orders", "com.acme.FromSchema") == "com.acme.FromSchema"


def test_a_bad_strategy_lists_the_accepted_ones() -> None:
    with pytest.raises(OptionError) as e:
        parse(valueFormat="avro", valueSubjectNameStrategy="by-topic",
              **{"schema.registry.url": URL})
    assert e.value.option == "valueSubjectNameStrategy"
    assert "topic-record" in str(e.value)


def test_schema_version_latest_or_a_positive_number() -> None:
    base = {"valueFormat": "avro", "schema.registry.url": URL}
    assert parse(**base).schema_version is None
    assert parse(**base, valueSchemaVersion="latest").schema_version is None
    assert parse(**base, valueSchemaVersion="3").schema_version == 3
    with pytest.raises(OptionError) as e:
        parse(**base, valueSchemaVersion="0")
    assert e.value.option == "valueSchemaVersion"


def test_mode_is_failfast_or_permissive_in_any_case() -> None:
    base = {"valueFormat": "avro", "schema.registry.url": URL}
    assert parse(**base).mode == "FAILFAST"
    assert parse(**base, mode="permissive").permissive
    with pytest.raises(OptionError) as e:
        parse(**base, mode="DROPMALFORMED")
    assert e.value.option == "mode" and "PERMISSIVE" in str(e.value)


def test_client_settings_pass_through_with_numbers_as_numbers() -> None:
    opts = parse(valueFormat="avro", **{
        "schema.registry.url": URL, "schema.registry.basic.auth.user.info": "alice:s3cret",
        "schema.registry.timeout": "3", "schema.registry.cache.capacity": "50",
    })
    assert opts.client_conf["basic.auth.user.info"] == "alice:s3cret"
    assert opts.client_conf["timeout"] == 3.0
    assert opts.client_conf["cache.capacity"] == 50
    assert opts.client_conf["url"] == URL


def test_an_unknown_client_setting_fails_at_parse() -> None:
    with pytest.raises(OptionError) as e:
        parse(valueFormat="avro", **{"schema.registry.url": URL, "schema.registry.bogus": "1"})
    assert e.value.option == "schema.registry.bogus"


def test_a_non_numeric_number_names_the_setting() -> None:
    with pytest.raises(OptionError) as e:
        parse(valueFormat="avro", **{"schema.registry.url": URL,
                                      "schema.registry.timeout": "soon"})
    assert e.value.option == "schema.registry.timeout"


def test_secrets_never_reach_messages() -> None:
    secret = "pa55word-xyz"
    opts = parse(valueFormat="avro", **{
        "schema.registry.url": "https://reg.example:8081",
        "schema.registry.basic.auth.user.info": f"alice:{secret}",
        "schema.registry.bearer.auth.credentials.source": "STATIC_TOKEN",
        "schema.registry.bearer.auth.token": secret,
        "schema.registry.bearer.auth.logical.cluster": "lsrc-1",
    })
    shown = f"{opts!r} {opts.safe_client_conf()}"
    assert secret not in shown
    in_url = parse(valueFormat="avro", **{"schema.registry.url": f"https://al:{secret}@reg:8081"})
    assert secret not in f"{in_url!r} {in_url.safe_url} {in_url.safe_client_conf()}"
    with pytest.raises(OptionError) as e:
        parse(valueFormat="avro", **{"schema.registry.url": f"ftp://alice:{secret}@reg:8081"})
    assert secret not in str(e.value)
    assert e.value.option == "schema.registry.url"


def test_bearer_auth_passes_through_and_stays_secret() -> None:
    secret = "tok-123456"
    opts = parse(valueFormat="avro", **{
        "schema.registry.url": URL, "schema.registry.bearer.auth.credentials.source": "STATIC_TOKEN",
        "schema.registry.bearer.auth.token": secret,
        "schema.registry.bearer.auth.logical.cluster": "lsrc-1",
    })
    assert opts.client_conf["bearer.auth.token"] == secret
    assert secret not in str(opts.safe_client_conf())


def test_url_credentials_are_removed() -> None:
    assert url_without_credentials("https://alice:pw@reg:8081/apis,http://b:c@r2") == \
        "https://reg:8081/apis,http://r2"
    assert redact_client_conf({"url": "http://a:b@h:1", "ssl.key.password": "k"}) == \
        {"url": "http://h:1", "ssl.key.password": "***"}


def test_options_pickle_for_tasks() -> None:
    opts = parse(valueFormat="protobuf", includeRawValue="true", **{"schema.registry.url": URL})
    again = pickle.loads(pickle.dumps(opts))
    assert again == opts and again.include_raw


def test_option_names_cover_both_sides() -> None:
    names = set(registry_option_names())
    assert {"valueFormat", "keyFormat", "valueSubject", "keySchemaVersion", "mode",
            "includeRawValue", "includeRawKey", "schemaRegistryRetryTimeout"} <= names


def test_the_source_parses_both_sides() -> None:
    from sources.kafka_options import parse_source_options

    base = {"kafka.bootstrap.servers": "b:9092", "subscribe": "t"}
    options = parse_source_options({**base, "valueformat": "avro", "keyformat": "json-schema",
                                    "schema.registry.url": URL, "includerawkey": "true"},
                                   batch=False)
    assert (options.value_registry.format, options.key_registry.format) == ("avro", "json-schema")
    assert options.key_registry.include_raw and not options.value_registry.include_raw
    with pytest.raises(OptionError) as e:
        parse_source_options({**base, "valueformat": "protobuf"}, batch=False)
    assert e.value.option == "schema.registry.url"
    with pytest.raises(OptionError) as e:
        parse_source_options({**base, "valueformt": "avro"}, batch=False)
    assert "valueFormat" in str(e.value)  # a misspelt option names the right one
