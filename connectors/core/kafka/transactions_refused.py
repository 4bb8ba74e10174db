"""A cluster that does not do Kafka transactions, said plainly at query start.

The exactly-once Kafka sink needs transactions (InitProducerId with a transactional id, then
AddPartitionsToTxn and EndTxn). Some Kafka-compatible services do not offer them: Azure Event
Hubs only on its Premium and Dedicated tiers (in preview), and a broker without the API
answers InitProducerId with UNSUPPORTED_VERSION (librdkafka: "unsupported feature"), or refuses
the request as invalid. Those answers are turned into one message that says what it means and
what to do, instead of an error code.
"""

from __future__ import annotations

#: Kafka error codes a broker answers InitProducerId with when it does not do transactions:
#: UNSUPPORTED_VERSION (35), INVALID_REQUEST (42), UNSUPPORTED_FOR_MESSAGE_FORMAT (43).
BROKER_CODES = frozenset({35, 42, 43})
#: librdkafka's own: _UNSUPPORTED_FEATURE (-165, the broker's ApiVersions lacks the API).
LIBRDKAFKA_CODES = frozenset({-165})
#: kafka-python's client-side exceptions for an API the broker does not list.
CLIENT_SIDE = ("UnsupportedVersion", "IncompatibleBrokerVersion")


class TransactionsUnsupported(RuntimeError):
    """The cluster refuses Kafka transactions: the exactly-once Kafka sink cannot run on it."""


def refuses_transactions(code: int | None, detail: str = "") -> bool:
    """Whether an InitProducerId answered with `code` (or failing with `detail`) means the
    cluster does not do transactions."""
    if code is not None and (code in BROKER_CODES or code in LIBRDKAFKA_CODES):
        return True
    return any(name in detail for name in CLIENT_SIDE)


def message(bootstrap: str, detail: str) -> str:
    hosts = bootstrap.lower()
    where = ""
    if ".servicebus." in hosts:
        where = (" Azure Event Hubs supports Kafka transactions only on its Premium and "
                 "Dedicated tiers (in preview); a Basic or Standard namespace refuses them.")
    return (f"the Kafka cluster at {bootstrap} refuses transactions ({detail}), which the "
            f"exactly-once Kafka sink needs (deliveryGuarantee=exactly-once).{where} Use a "
            f"cluster or tier with transactions, or set deliveryGuarantee=at-least-once "
            f"(idempotent producers, no transactions: records may repeat after a failure)")
