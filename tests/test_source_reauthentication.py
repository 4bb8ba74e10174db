"""A reading consumer whose connection fails to (re-)authenticate mid-read reads on: librdkafka
connects again with its current token. Before, the error killed the task: the OAuth lane
(integration_tests/secured/test_oauth_lane.py, 4 s tokens, the broker re-authenticating every
4 s) failed 2 runs of 4 with `_AUTHENTICATION` "FindCoordinator response error: Local:
Authentication failure" from a pooled consumer. Wrong credentials still fail the query at its
start (check_connection; the lane's wrong-secret test), and other errors still fail the read."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from sources.offsets import OffsetRange
from sources.range_reader import _handle_error

RANGE = OffsetRange("t", 0, 10, 20)


def test_an_authentication_failure_mid_read_is_read_through():
    err = KafkaError(KafkaError._AUTHENTICATION,
                     "FindCoordinator response error: Local: Authentication failure")
    assert _handle_error(None, RANGE, err, 12, True) == 12  # the consumer is not touched


def test_other_fatal_errors_still_fail_the_read():
    err = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "not authorized")
    with pytest.raises(KafkaException):
        _handle_error(None, RANGE, err, 12, True)
