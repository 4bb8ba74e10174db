"""`--kafka-config`'s properties file: parsed as Kafka's tools read `--command-config` files,
translated to librdkafka's names, and never echoing a secret in an error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from integration_tests.support.certs import generate_test_pki
from connectors.kafka_config_file import (
    ENV,
    KafkaConfigError,
    describe,
    from_env,
    load_kafka_config,
    parse_properties,
    read_properties,
    to_env,
)

SECRET = "s3cr=t:pass word"


def test_key_value_lines_comments_and_blank_lines():
    text = (
        "# a comment\n"
        "! also a comment\n"
        "\n"
        "   \n"
        "security.protocol=SASL_SSL\n"
        "  sasl.mechanism = SCRAM-SHA-512  \n"
        "ssl.ca.location: /etc/kafka/ca.pem\n"
        "client.id:demo\n"
        "   # an indented comment\n"
    )
    assert parse_properties(text) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512  ",  # Java keeps a value's trailing whitespace
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "client.id": "demo",
    }


def test_values_keep_separators_after_the_first():
    text = ('sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="alice" password="{SECRET}";\n'
            "sasl.oauthbearer.extensions = a=b,c=d\n"
            "ssl.endpoint.identification.algorithm=\n"
            "url: http://host:8080/x\n")
    conf = parse_properties(text)
    assert conf["sasl.jaas.config"].endswith(f'password="{SECRET}";')
    assert conf["sasl.oauthbearer.extensions"] == "a=b,c=d"
    assert conf["ssl.endpoint.identification.algorithm"] == ""  # explicit empty: allowed
    assert conf["url"] == "http://host:8080/x"


def test_a_jaas_value_continued_without_backslashes_is_refused(tmp_path: Path):
    path = tmp_path / "client.properties"
    path.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required\n"
        f'   username="alice" password="{SECRET}";\n')
    with pytest.raises(KafkaConfigError) as e:
        load_kafka_config(str(path))
    assert str(e.value) == (f'{path}: sasl.jaas.config: must give both username="..." and '
                            f'password="..."')


def test_continuation_lines_and_java_escapes():
    text = ("sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
            '      username="bob" \\\n'
            '      password="pw";\n'
            "tab=a\\tb\n"
            "unicode=caf\\u00e9\n"
            "backslash=C:\\\\certs\\\\ca.pem\n"
            "ends.with.backslash=x\\\\\n"
            "next=1\n"
            "comment.at.end = v \\\n"
            "# not a comment: the continuation of the line above\n")
    conf = parse_properties(text)
    assert conf["sasl.jaas.config"] == ("org.apache.kafka.common.security.plain.PlainLoginModule "
                                        'required username="bob" password="pw";')
    assert conf["tab"] == "a\tb" and conf["unicode"] == "café"
    assert conf["backslash"] == "C:\\certs\\ca.pem"
    assert conf["ends.with.backslash"] == "x\\" and conf["next"] == "1"
    assert conf["comment.at.end"] == "v # not a comment: the continuation of the line above"


def test_crlf_line_endings():
    assert parse_properties("a.b=1\r\nc.d=2\r\n") == {"a.b": "1", "c.d": "2"}


@pytest.mark.parametrize(
    "text, line, fragment",
    [
        ("security.protocol=SSL\njust.a.key\n", 2,
         "expected key=value (or key: value), found a line with no '=' or ':'"),
        ("security.protocol SSL\n", 1, "found 'security.protocol' with no '=' or ':'"),
        ("=value\n", 1, "a setting with no name"),
        ("a=1\n\n# c\n\"quoted\"=2\n", 4, "with a Kafka client property name as the key"),
        ("a=1\nA=2\n", 2, "'A' is already set on line 1; keep one"),
        ("bad=\\u12\n", 1, "malformed \\uXXXX escape"),
        # a JAAS value continued without backslashes: the next line is no setting
        ("sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required\n"
         f"   org.apache.kafka.common.security.scram.ScramLoginModule required password={SECRET}\n",
         2, "needs a backslash at the end of each line but the last"),
    ],
)
def test_malformed_lines_are_named_by_file_and_line(text, line, fragment):
    with pytest.raises(KafkaConfigError) as e:
        parse_properties(text, "client.properties")
    message = str(e.value)
    assert message.startswith(f"client.properties, line {line}: "), message
    assert fragment in message
    assert SECRET not in message


@pytest.mark.parametrize("line", [
    "sasl.password hunter2\n",           # no '=': the key looks secret, so it is not shown
    "ssl.keystore.password hunter2\n",
    "sasl.jaas.config hunter2\n",
    "sasl.password\n",
    "hunter2\n",                          # a stray word on a line of its own: a value's part?
    "hunter2 and more\n",
    "Hunter2.pass\n",
])
def test_errors_never_echo_a_secret_or_a_stray_value(line):
    with pytest.raises(KafkaConfigError) as e:
        parse_properties("security.protocol=SASL_SSL\n" + line, "f.properties")
    message = str(e.value)
    assert message.startswith("f.properties, line 2: expected key=value")
    for word in ("hunter2", "Hunter2", "sasl.password", "keystore.password", "jaas"):
        assert word not in message, message


def test_a_missing_file_or_a_directory_is_named(tmp_path: Path):
    with pytest.raises(KafkaConfigError, match=r"/nope\.properties: no such file$"):
        read_properties(str(tmp_path / "nope.properties"))
    with pytest.raises(KafkaConfigError, match="is a directory"):
        read_properties(str(tmp_path))


def test_an_empty_file_is_refused(tmp_path: Path):
    path = tmp_path / "empty.properties"
    path.write_text("# nothing but comments\n\n")
    with pytest.raises(KafkaConfigError, match=r"empty\.properties: no settings in it"):
        load_kafka_config(str(path))


def test_java_names_are_translated_to_librdkafkas(tmp_path: Path):
    ca = generate_test_pki(str(tmp_path / "pki")).ca_pem
    path = tmp_path / "client.properties"
    path.write_text(
        "security.protocol=sasl_ssl\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="alice" password="{SECRET}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={ca}\n"
        "ssl.endpoint.identification.algorithm=\n"
    )
    assert load_kafka_config(str(path)) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": SECRET,
        "ssl.ca.location": ca,
        "ssl.endpoint.identification.algorithm": "none",
    }


def test_librdkafka_names_pass_through(tmp_path: Path):
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanisms=PLAIN\n"
                    f"sasl.username=bob\nsasl.password={SECRET}\n")
    assert load_kafka_config(str(path)) == {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
        "sasl.username": "bob", "sasl.password": SECRET}


@pytest.mark.parametrize(
    "body, fragment",
    [
        ("ssl.protocol=TLSv1.2\n",
         "client.properties: ssl.protocol: is a Java client setting with no librdkafka "
         "counterpart"),
        ("security.protocol=TLS\n", "client.properties: security.protocol: expected one of "),
        (f"sasl.jaas.config=com.example.Login required password=\"{SECRET}\";\n",
         "client.properties: sasl.jaas.config: expected one login module of "),
        ("sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
         f'username="a" password="{SECRET}";\n',
         "client.properties: sasl.mechanism: is required with a SCRAM login module in "
         "sasl.jaas.config"),
    ],
)
def test_untranslatable_settings_name_the_file_and_setting(tmp_path: Path, body, fragment):
    path = tmp_path / "client.properties"
    path.write_text(body)
    with pytest.raises(KafkaConfigError) as e:
        load_kafka_config(str(path))
    message = str(e.value)
    assert message.startswith(str(tmp_path)) and fragment in message, message
    assert SECRET not in message
    assert "kafka.sasl" not in message and "kafka.ssl" not in message  # the file's own names


def test_what_librdkafka_refuses_is_refused_when_the_file_is_read(tmp_path: Path):
    path = tmp_path / "client.properties"
    # a Java producer setting librdkafka does not have
    path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                    f"sasl.username=a\nsasl.password={SECRET}\nmax.block.ms=1000\n")
    with pytest.raises(KafkaConfigError) as e:
        load_kafka_config(str(path))
    assert str(e.value) == f'{path}: No such configuration property: "max.block.ms"'
    path.write_text("security.protocol=SSL\nssl.ca.location=/no/such/ca.pem\n")
    with pytest.raises(KafkaConfigError, match=r"client\.properties: .*ssl\.ca\.location"):
        load_kafka_config(str(path))


def test_describe_hides_secrets_and_inline_pem():
    text = describe({"security.protocol": "SSL", "sasl.password": SECRET,
                     "ssl.ca.pem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
                     "ssl.key.pem": "-----BEGIN PRIVATE KEY-----\n"})
    assert SECRET not in text and "BEGIN" not in text
    assert "sasl.password=***" in text and "ssl.key.pem=***" in text
    assert "ssl.ca.pem=<PEM, " in text and "security.protocol=SSL" in text


def test_the_environment_hand_over_removes_the_settings():
    conf = {"security.protocol": "SASL_SSL", "sasl.password": SECRET}
    env = {"PATH": "/bin", **to_env(conf)}
    assert json.loads(env[ENV]) == conf
    assert from_env(env) == conf
    assert ENV not in env  # Spark's JVM and workers, started after, do not inherit it
    assert from_env(env) == {} and to_env({}) == {}
    with pytest.raises(KafkaConfigError, match="expected a JSON object of strings"):
        from_env({ENV: '["a"]'})
