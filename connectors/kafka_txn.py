"""Committing a prepared Kafka transaction from another process (DESIGN.md section 4).

A task's transactional producer flushes its transaction and goes away without committing; the
driver later ends it with the two raw requests Flink's Kafka sink uses: FindCoordinator (key
type 1, the transaction coordinator of the transactional id) and EndTxn(transactional id,
producer id, epoch, committed). Both messages are encoded and decoded by kafka-python's protocol
layer; the transport is one short-lived socket per request.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from kafka.protocol.producer.transaction import EndTxnRequest, EndTxnResponse

# Kafka error codes that matter when ending a transaction.
NONE = 0
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
CONCURRENT_TRANSACTIONS = 51
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
PRODUCER_FENCED = 90

TRANSIENT = {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
             CONCURRENT_TRANSACTIONS}
FENCED = {INVALID_PRODUCER_EPOCH, PRODUCER_FENCED}


class TransientTxnError(ConnectionError):
    """The outcome is unknown: retry (the coordinator moved, the connection dropped, ...)."""


class TransactionFenced(RuntimeError):
    """The producer epoch is stale: the transaction was aborted (timeout) or fenced."""


class TxnRequestError(RuntimeError):
    """A definite error that retrying will not fix (authorization, invalid state)."""


@dataclass(frozen=True)
class PreparedTxn:
    transactional_id: str
    producer_id: int
    producer_epoch: int


def _call(host: str, port: int, request, response_cls, version: int, timeout_s: float):
    request.with_header(correlation_id=1, client_id="kafka-eos-driver")
    payload = request.encode(version=version, header=True, framed=True)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(payload)
            size = struct.unpack(">i", _read_exactly(sock, 4))[0]
            body = _read_exactly(sock, size)
    except (OSError, struct.error) as e:
        raise TransientTxnError(f"{request.name} to {host}:{port} failed: {e}") from e
    return response_cls.decode(body, version=version, header=True)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        buf += chunk
    return bytes(buf)


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    return host.strip("[]"), int(port)


def find_transaction_coordinator(
    bootstrap_servers: str, transactional_id: str, timeout_s: float = 10.0
) -> tuple[str, int]:
    last: Exception | None = None
    for address in bootstrap_servers.split(","):
        host, port = _split(address)
        try:
            r = _call(host, port, FindCoordinatorRequest(key=transactional_id, key_type=1, version=1),
                      FindCoordinatorResponse, 1, timeout_s)
        except TransientTxnError as e:
            last = e
            continue
        if r.error_code in TRANSIENT:
            raise TransientTxnError(f"FindCoordinator({transactional_id}): error {r.error_code}")
        if r.error_code != NONE:
            raise TxnRequestError(f"FindCoordinator({transactional_id}): error {r.error_code}")
        return r.host, r.port
    raise TransientTxnError(f"no bootstrap server answered FindCoordinator: {last}")


def end_transaction(
    bootstrap_servers: str, txn: PreparedTxn, *, commit: bool, timeout_s: float = 10.0
) -> None:
    """EndTxn at the coordinator. Idempotent: ending a completed transaction again with the same
    epoch returns no error. Raises TransactionFenced, TransientTxnError or TxnRequestError."""
    host, port = find_transaction_coordinator(bootstrap_servers, txn.transactional_id, timeout_s)
    r = _call(
        host, port,
        EndTxnRequest(
            transactional_id=txn.transactional_id,
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            committed=commit,
            version=1,
        ),
        EndTxnResponse, 1, timeout_s,
    )
    if r.error_code == NONE:
        return
    what = f"EndTxn({'commit' if commit else 'abort'}) of {txn.transactional_id}"
    if r.error_code in FENCED:
        raise TransactionFenced(f"{what}: producer epoch {txn.producer_epoch} is fenced "
                                f"(error {r.error_code}); the transaction was aborted")
    if r.error_code in TRANSIENT:
        raise TransientTxnError(f"{what}: error {r.error_code}, retry")
    raise TxnRequestError(f"{what}: error {r.error_code}")
