"""Unit tests for connectors/core/options.py: typed, case-insensitive option access and
redaction."""

from __future__ import annotations

import re

import pytest

from connectors.core.options import OptionError, Options, is_secret, parse_duration_ms, redact


# --------------------------------------------------------------------------- OptionError


def test_option_error_names_option_and_is_value_error():
    e = OptionError("maxOffsetsPerTrigger", "must be positive")
    assert isinstance(e, ValueError)
    assert e.option == "maxOffsetsPerTrigger"
    assert "maxOffsetsPerTrigger" in str(e)
    assert "must be positive" in str(e)


# --------------------------------------------------------------------------- Options basics


def test_options_case_insensitive_lookup():
    o = Options({"startingOffsets": "earliest", "KAFKA.Bootstrap.Servers": "b:9092"})
    for name in ("startingOffsets", "startingoffsets", "STARTINGOFFSETS"):
        assert name in o
        assert o.get(name) == "earliest"
    assert o.get("kafka.bootstrap.servers") == "b:9092"
    assert "missing" not in o
    assert o.raw() == {"startingoffsets": "earliest", "kafka.bootstrap.servers": "b:9092"}


def test_options_raw_is_a_copy():
    o = Options({"a": "1"})
    r = o.raw()
    r["a"] = "2"
    r["b"] = "3"
    assert o.get("a") == "1"
    assert "b" not in o


def test_options_does_not_keep_a_reference_to_the_input():
    raw = {"a": "1"}
    o = Options(raw)
    raw["a"] = "2"
    assert o.get("a") == "1"


def test_get_default_and_stringification():
    o = Options({"n": 5})
    assert o.get("n") == "5"
    assert o.get("absent") is None
    assert o.get("absent", "dflt") == "dflt"


def test_require():
    o = Options({"subscribe": "  topic  ", "blank": "   ", "empty": ""})
    assert o.require("SUBSCRIBE") == "topic"
    for name in ("blank", "empty", "absent"):
        with pytest.raises(OptionError) as ei:
            o.require(name, "a hint for the user")
        assert ei.value.option == name
        assert name in str(ei.value)
        assert "required" in str(ei.value)
        assert "a hint for the user" in str(ei.value)


# --------------------------------------------------------------------------- get_bool


@pytest.mark.parametrize(
    "text,expected",
    [("true", True), ("TRUE", True), (" True ", True), ("1", True), ("yes", True),
     ("false", False), ("False", False), ("0", False), ("no", False), (" FALSE", False)],
)
def test_get_bool_values(text, expected):
    assert Options({"failOnDataLoss": text}).get_bool("failondataloss", not expected) is expected


@pytest.mark.parametrize("default", [True, False])
def test_get_bool_default(default):
    assert Options({}).get_bool("failOnDataLoss", default) is default


@pytest.mark.parametrize("text", ["", "maybe", "tru", "2", "on"])
def test_get_bool_invalid(text):
    with pytest.raises(OptionError) as ei:
        Options({"includeheaders": text}).get_bool("includeHeaders", False)
    assert ei.value.option == "includeHeaders"
    assert "includeHeaders" in str(ei.value)


# --------------------------------------------------------------------------- get_int


def test_get_int():
    o = Options({"a": "42", "b": " 7 ", "c": "-3", "d": "0"})
    assert o.get_int("A") == 42
    assert o.get_int("b") == 7
    assert o.get_int("c") == -3
    assert o.get_int("d", minimum=0) == 0
    assert o.get_int("absent") is None
    assert o.get_int("absent", 9) == 9
    assert o.get_int("absent", 9, minimum=100) == 9  # the default is not validated


@pytest.mark.parametrize("text", ["abc", "1.5", "", "1e3", "12abc", "0x10"])
def test_get_int_rejects_non_integers(text):
    with pytest.raises(OptionError) as ei:
        Options({"maxoffsetspertrigger": text}).get_int("maxOffsetsPerTrigger")
    assert ei.value.option == "maxOffsetsPerTrigger"
    assert "maxOffsetsPerTrigger" in str(ei.value)


def test_get_int_minimum():
    o = Options({"n": "0"})
    with pytest.raises(OptionError) as ei:
        o.get_int("n", minimum=1)
    assert "at least 1" in str(ei.value)
    assert o.get_int("n", minimum=0) == 0
    assert Options({"n": "-1"}).get_int("n", minimum=-1) == -1


# --------------------------------------------------------------------------- get_choice


def test_get_choice():
    o = Options({"strategy": " LATEST "})
    assert o.get_choice("strategy", ("error", "latest"), "error") == "latest"
    assert o.get_choice("absent", ("error", "latest"), "error") == "error"
    with pytest.raises(OptionError) as ei:
        Options({"strategy": "newest"}).get_choice("strategy", ("error", "latest"), "error")
    msg = str(ei.value)
    assert ei.value.option == "strategy"
    assert "error" in msg and "latest" in msg and "newest" in msg


# --------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    "text,ms",
    [
        ("0", 0),
        ("250", 250),
        ("500ms", 500),
        ("500MS", 500),
        ("30s", 30_000),
        ("30 s", 30_000),
        ("15m", 15 * 60_000),
        ("15min", 15 * 60_000),
        ("15MIN", 15 * 60_000),
        ("1h", 3_600_000),
        ("2H", 7_200_000),
        ("1d", 86_400_000),
        ("  45s  ", 45_000),
    ],
)
def test_parse_duration_ms(text, ms):
    assert parse_duration_ms("maxTriggerDelay", text) == ms
    assert Options({"maxtriggerdelay": text}).get_duration_ms("maxTriggerDelay", 1) == ms


@pytest.mark.parametrize("text", ["", "abc", "-5s", "1.5s", "10 seconds", "5w", "s", "ms10", "1h30m"])
def test_parse_duration_ms_invalid(text):
    with pytest.raises(OptionError) as ei:
        parse_duration_ms("maxTriggerDelay", text)
    assert ei.value.option == "maxTriggerDelay"
    assert "maxTriggerDelay" in str(ei.value)


def test_get_duration_ms_default():
    assert Options({}).get_duration_ms("maxTriggerDelay", 123) == 123


# --------------------------------------------------------------------------- get_json


def test_get_json():
    o = Options({"startingOffsets": '{"t": {"0": 5}}', "list": "[1, 2]"})
    assert o.get_json("startingoffsets") == {"t": {"0": 5}}
    assert o.get_json("list") == [1, 2]
    assert o.get_json("absent") is None


@pytest.mark.parametrize("text", ["{", "{'t': 1}", "not json", '{"t": {"0": 5}', ""])
def test_get_json_invalid(text):
    with pytest.raises(OptionError) as ei:
        Options({"startingoffsets": text}).get_json("startingOffsets")
    assert ei.value.option == "startingOffsets"
    assert "startingOffsets" in str(ei.value)
    assert "JSON" in str(ei.value)


# --------------------------------------------------------------------------- with_prefix


def test_with_prefix():
    o = Options({
        "kafka.bootstrap.servers": "b:9092",
        "KAFKA.Security.Protocol": "SASL_SSL",
        "kafkaConsumer.pollTimeoutMs": "5",
        "subscribe": "t",
        "kafka.": "empty-suffix",
    })
    conf = o.with_prefix("kafka.")
    assert conf == {
        "bootstrap.servers": "b:9092",
        "security.protocol": "SASL_SSL",
        "": "empty-suffix",
    }
    assert o.with_prefix("KAFKA.") == conf  # the prefix is case-insensitive too
    assert o.with_prefix("nothing.") == {}


# --------------------------------------------------------------------------- secrets


@pytest.mark.parametrize(
    "key",
    [
        "sasl.password",
        "kafka.sasl.password",
        "KAFKA.SASL.PASSWORD",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.truststore.password",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.config",
        "sasl.jaas.config",
        "kafka.sasl.jaas.config",
        "ssl.key.pem",
        "ssl_key",
        "ssl.keystore.location",
        "some.token",
    ],
)
def test_is_secret_true(key):
    assert is_secret(key)


@pytest.mark.parametrize(
    "key",
    ["bootstrap.servers", "kafka.bootstrap.servers", "sasl.username", "sasl.mechanism",
     "security.protocol", "ssl.ca.location", "client.id", "subscribe"],
)
def test_is_secret_false(key):
    assert not is_secret(key)


def test_redact():
    conf = {
        "bootstrap.servers": "b:9092",
        "sasl.username": "alice",
        "sasl.password": "hunter2",
        "SSL.Key.Password": "pw2",
        "sasl.jaas.config": 'org.apache.kafka...PlainLoginModule required password="hunter3";',
    }
    safe = redact(conf)
    assert safe == {
        "bootstrap.servers": "b:9092",
        "sasl.username": "alice",
        "sasl.password": "***",
        "SSL.Key.Password": "***",
        "sasl.jaas.config": "***",
    }
    for secret in ("hunter2", "pw2", "hunter3"):
        assert secret not in repr(safe)
    # the input is left alone
    assert conf["sasl.password"] == "hunter2"
    assert safe is not conf


def test_redact_empty():
    assert redact({}) == {}


# ------------------------------------------------------------------ unknown options


def test_an_unknown_option_names_the_three_closest_as_the_docs_spell_them_not_the_whole_list():
    """Spark lower-cases the user's `startingOfsets` to `startingofsets`: the message names the
    option meant as the docs spell it, then the three closest and the page with every option,
    instead of the thirty-odd names of the format."""
    from sources.kafka_options import KNOWN_OPTIONS, OPTION_PREFIXES

    with pytest.raises(OptionError) as e:
        Options({"startingOfsets": "earliest"}).reject_unknown(
            KNOWN_OPTIONS, prefixes=OPTION_PREFIXES, format_name="kafka-eos",
            docs="docs/source.md#options")
    message = str(e.value)
    assert e.value.option == "startingofsets"
    assert "did you mean 'startingOffsets'?" in message
    closest = message.split("closest: ")[1].split(";")[0]
    assert closest.split(", ")[0] == "'startingOffsets'" and closest.count("'") == 6, message
    assert "every option: docs/source.md#options" in message
    assert "known:" not in message and "kafkaConsumer.pollTimeoutMs" not in message, message
    assert len(message) < 300, message


def test_a_far_off_unknown_option_gets_the_closest_names_without_a_guess():
    with pytest.raises(OptionError) as e:
        Options({"zzz": "1"}).reject_unknown(["alpha", "beta", "gamma", "delta"],
                                             format_name="x")
    assert "did you mean" not in str(e.value)
    assert str(e.value).count("'") == 2 + 6  # the option itself, and three names


@pytest.mark.parametrize("format_name,page", [
    ("kafka-eos", "docs/kafka-sink.md#options"),
    ("delta-eos", "docs/delta-sink.md#options"),
    ("postgres-eos", "docs/postgres-sink.md#options"),
])
def test_each_sinks_unknown_option_points_to_its_own_page(format_name, page, tmp_path):
    from pyspark.sql.types import LongType, StructField, StructType

    from connectors.formats import ALL

    (source,) = [s for s in ALL if s.name() == format_name]
    raw = {"checkpointlocation": str(tmp_path / "ck"), "committimout": "1s"}
    with pytest.raises(OptionError, match=rf"did you mean 'commitTimeout'\?.*every option: "
                                          rf"{re.escape(page)}"):
        source(raw).streamWriter(StructType([StructField("v", LongType())]), False)


def test_a_users_own_sink_names_no_page_unless_it_has_one():
    from sinks.two_phase_commit import reject_unknown_options

    with pytest.raises(OptionError) as e:
        reject_unknown_options(Options({"flushtimout": "1s"}), ("flushTimeout",),
                               format_name="my-eos")
    assert "did you mean 'flushTimeout'?" in str(e.value) and "every option" not in str(e.value)
    with pytest.raises(OptionError, match=r"every option: docs/mine\.md"):
        reject_unknown_options(Options({"flushtimout": "1s"}), ("flushTimeout",),
                               format_name="my-eos", docs="docs/mine.md")