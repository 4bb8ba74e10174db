"""Committing a prepared Kafka transaction from another process (DESIGN.md section 4), and
settling its outcome from the output when the coordinator cannot.

A task's transactional producer flushes its transaction and goes away without committing; the
driver later ends it with the two raw requests Flink's Kafka sink uses: FindCoordinator (key
type 1, the transaction coordinator of the transactional id) and EndTxn(transactional id,
producer id, epoch, committed). Every message is encoded and decoded by kafka-python's protocol
layer, and every error code is named by `kafka.errors`; the transport is one short-lived socket
per request.

What an EndTxn error means (`classify`):
* retriable (the coordinator moved or is loading, a concurrent EndTxn, ...): retry;
* authorization: fail at once, naming the ACL the sink needs (`acl_needed`);
* fenced epoch / unknown producer id / invalid state (`TxnRefused`): the coordinator will not
  end the transaction with this producer id and epoch. That is *not* proof that it was lost:
  it may have been committed before (the driver crashed between EndTxn and its committed
  marker) and fenced or expired since. Only the output can tell: `transaction_outcome` reads
  the raw record batches of a partition the transaction wrote and finds the control marker
  that ends it;
* anything else: fail at once with its Kafka error name.
"""

from __future__ import annotations

import socket
import struct
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import kafka.errors as kafka_errors
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.transaction import (
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from kafka.record.memory_records import MemoryRecords

NONE = 0
OFFSET_OUT_OF_RANGE = 1
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_NOT_FOUND = 105

FENCED = {INVALID_PRODUCER_EPOCH, PRODUCER_FENCED}
#: The coordinator no longer knows the producer id (transactional.id.expiration.ms passed).
UNKNOWN = {INVALID_PRODUCER_ID_MAPPING, TRANSACTIONAL_ID_NOT_FOUND}

COMMITTED, ABORTED, OPEN = "committed", "aborted", "open"


# -- errors ---------------------------------------------------------------------------------


class TransientTxnError(ConnectionError):
    """The outcome is unknown: retry (the coordinator moved, the connection dropped, ...).

    `closed_by_broker`: the broker closed the connection after the request was sent, without
    an answer. Tansu 0.6.0 answers every refused EndTxn (fenced epoch, unknown producer id or
    transactional id) that way, so the output is worth consulting before retrying blindly.
    """

    def __init__(self, message: str, *, closed_by_broker: bool = False) -> None:
        super().__init__(message)
        self.closed_by_broker = closed_by_broker


class TxnRequestError(RuntimeError):
    """A definite error that retrying will not fix; `code` is Kafka's error code."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class TxnAuthorizationError(TxnRequestError):
    """The sink's principal lacks an ACL: fail at once, saying which."""


class TxnRefused(TxnRequestError):
    """The coordinator will not end the transaction with this producer id and epoch. Whether
    it was committed before is for the output to say (`transaction_outcome`)."""


class TransactionFenced(TxnRefused):
    """The producer epoch is stale: a newer producer or a timeout ended the transaction."""


class TransactionUnknown(TxnRefused):
    """The coordinator does not know the producer id any more (the id expired)."""


class TxnStateInvalid(TxnRefused):
    """INVALID_TXN_STATE: the transaction is not in a state this EndTxn can end."""


class OutcomeUnreadable(TxnRequestError):
    """The output no longer holds what would settle a transaction's outcome."""


def error_name(code: int) -> str:
    """Kafka's name for an error code (kafka-python's table), with the number."""
    return f"{kafka_errors.for_code(code).message} (error {code})"


def classify(code: int) -> str:
    """none | transient | fenced | unknown | invalid_state | authorization | definite."""
    if code == NONE:
        return "none"
    if code in FENCED:
        return "fenced"
    if code in UNKNOWN:
        return "unknown"
    if code == INVALID_TXN_STATE:
        return "invalid_state"
    error = kafka_errors.for_code(code)
    if issubclass(error, kafka_errors.AuthorizationError):
        return "authorization"
    return "transient" if error.retriable else "definite"


_REFUSALS: dict[str, type[TxnRefused]] = {
    "fenced": TransactionFenced,
    "unknown": TransactionUnknown,
    "invalid_state": TxnStateInvalid,
}


def txn_error(code: int, what: str) -> Exception | None:
    """The exception an answer with `code` to request `what` raises (None for no error)."""
    kind = classify(code)
    message = f"{what}: {error_name(code)}"
    if kind == "none":
        return None
    if kind == "transient":
        return TransientTxnError(f"{message}, retry")
    if kind == "authorization":
        return TxnAuthorizationError(message, code)
    if kind in _REFUSALS:
        return _REFUSALS[kind](message, code)
    return TxnRequestError(message, code)


def acl_needed(code: int | None, transactional_id_prefix: str, topics: Iterable[str] = ()) -> str:
    """What to grant the sink's principal for an authorization failure `code`."""
    topic_list = ", ".join(f"'{t}'" for t in sorted(set(topics))) or "the output topic(s)"
    if code == kafka_errors.TransactionalIdAuthorizationFailedError.errno:
        return (
            f"the sink's principal needs WRITE (and DESCRIBE) on TransactionalId "
            f"'{transactional_id_prefix}*' (a prefixed ACL: kafka-acls --add --allow-principal "
            f"User:<principal> --operation Write --operation Describe --transactional-id "
            f"'{transactional_id_prefix}' --resource-pattern-type prefixed)"
        )
    if code == kafka_errors.TopicAuthorizationFailedError.errno:
        return (
            f"the sink's principal needs WRITE and DESCRIBE on Topic {topic_list}, and READ to "
            "settle a transaction whose commit is in doubt from the output"
        )
    if code == kafka_errors.ClusterAuthorizationFailedError.errno:
        return (
            "the sink's principal needs IDEMPOTENT_WRITE on the Cluster (brokers before 2.8 "
            "require it of transactional producers)"
        )
    return f"the sink's principal lacks an ACL the broker names as {error_name(code or -1)}"


@dataclass(frozen=True)
class PreparedTxn:
    transactional_id: str
    producer_id: int
    producer_epoch: int


# -- transport ------------------------------------------------------------------------------


def _call(host: str, port: int, request, response_cls, version: int, timeout_s: float):
    request.with_header(correlation_id=1, client_id="kafka-eos-driver")
    payload = request.encode(version=version, header=True, framed=True)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(payload)
            size = struct.unpack(">i", _read_exactly(sock, 4))[0]
            body = _read_exactly(sock, size)
    except _ClosedByBroker as e:
        raise TransientTxnError(f"{request.name} to {host}:{port} failed: {e}",
                                closed_by_broker=True) from e
    except (OSError, struct.error) as e:
        raise TransientTxnError(f"{request.name} to {host}:{port} failed: {e}") from e
    return response_cls.decode(body, version=version, header=True)


class _ClosedByBroker(ConnectionError):
    pass


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise _ClosedByBroker("connection closed by the broker")
        buf += chunk
    return bytes(buf)


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    return host.strip("[]"), int(port)


def _servers(cluster) -> str:
    return cluster if isinstance(cluster, str) else cluster["bootstrap.servers"]


def _bootstrap_call(bootstrap_servers, request_factory, response_cls, version: int,
                    timeout_s: float):
    """The first bootstrap server's answer; transient if none answers."""
    last: Exception | None = None
    for address in _servers(bootstrap_servers).split(","):
        host, port = _split(address)
        try:
            return _call(host, port, request_factory(), response_cls, version, timeout_s)
        except TransientTxnError as e:
            last = e
    raise TransientTxnError(f"no bootstrap server answered: {last}")


# -- ending a transaction -------------------------------------------------------------------


def find_transaction_coordinator(
    bootstrap_servers: str, transactional_id: str, timeout_s: float = 10.0
) -> tuple[str, int]:
    r = _bootstrap_call(
        bootstrap_servers,
        lambda: FindCoordinatorRequest(key=transactional_id, key_type=1, version=1),
        FindCoordinatorResponse, 1, timeout_s,
    )
    error = txn_error(r.error_code, f"FindCoordinator({transactional_id})")
    if error is not None:
        raise error
    return r.host, r.port


def end_transaction(
    bootstrap_servers: str, txn: PreparedTxn, *, commit: bool, timeout_s: float = 10.0
) -> None:
    """EndTxn at the coordinator. Idempotent: ending a completed transaction again with the same
    epoch returns no error. Raises TransientTxnError, or a TxnRequestError: TxnRefused (settle
    from the output), TxnAuthorizationError, or another definite error named by Kafka."""
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
    what = (f"EndTxn({'commit' if commit else 'abort'}) of {txn.transactional_id} "
            f"(producer id {txn.producer_id}, epoch {txn.producer_epoch})")
    error = txn_error(r.error_code, what)
    if error is not None:
        raise error


def fence_transactional_id(
    bootstrap_servers: str, transactional_id: str, transaction_timeout_ms: int,
    *, timeout_s: float = 10.0, deadline_s: float = 30.0,
) -> None:
    """InitProducerId for `transactional_id`, as a new producer's `init_transactions` does: the
    coordinator bumps the epoch and aborts the id's open transaction, if any. Raw, so that it
    costs two round trips and no librdkafka instance. Version 3 (Kafka 2.5+) with producer id
    and epoch -1: Tansu 0.6.0 answers versions 0-2 with UNKNOWN_SERVER_ERROR."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            host, port = find_transaction_coordinator(
                bootstrap_servers, transactional_id, timeout_s)
            r = _call(
                host, port,
                InitProducerIdRequest(transactional_id=transactional_id,
                                      transaction_timeout_ms=transaction_timeout_ms,
                                      producer_id=-1, producer_epoch=-1, version=3),
                InitProducerIdResponse, 3, timeout_s,
            )
            error = txn_error(r.error_code, f"InitProducerId({transactional_id})")
            if error is None:
                return
            raise error
        except TransientTxnError:
            # CONCURRENT_TRANSACTIONS while the coordinator writes the abort markers
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


# -- reading the output ---------------------------------------------------------------------

TopicPartition = tuple[str, int]


def partition_leaders(
    bootstrap_servers: str, topics: Iterable[str], timeout_s: float = 10.0
) -> dict[TopicPartition, tuple[str, int]]:
    """(topic, partition) -> the leader's (host, port), for the topics the broker knows."""
    wanted = sorted(set(topics))
    r = _bootstrap_call(
        bootstrap_servers,
        lambda: MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in wanted],
            allow_auto_topic_creation=False, version=4,
        ),
        MetadataResponse, 4, timeout_s,
    )
    brokers = {b.node_id: (b.host, b.port) for b in r.brokers}
    leaders: dict[TopicPartition, tuple[str, int]] = {}
    for t in r.topics:
        error = txn_error(t.error_code, f"Metadata({t.name})")
        if isinstance(error, TxnAuthorizationError):
            raise error
        for p in t.partitions:
            if p.error_code == NONE and p.leader_id in brokers:
                leaders[(t.name, p.partition_index)] = brokers[p.leader_id]
    return leaders


def end_offsets(
    bootstrap_servers: str, topics: Iterable[str], timeout_s: float = 10.0
) -> dict[TopicPartition, int]:
    """The latest offset of every partition of `topics` (read_uncommitted): any record
    produced after this call lies at or above it. One Metadata request, then one ListOffsets
    per leader."""
    by_leader: dict[tuple[str, int], list[TopicPartition]] = defaultdict(list)
    for tp, leader in partition_leaders(bootstrap_servers, topics, timeout_s).items():
        by_leader[leader].append(tp)
    out: dict[TopicPartition, int] = {}
    for (host, port), tps in by_leader.items():
        by_topic: dict[str, list[int]] = defaultdict(list)
        for t, p in tps:
            by_topic[t].append(p)
        request = ListOffsetsRequest(
            replica_id=-1, isolation_level=0, version=2,
            topics=[ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=[
                ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=p, timestamp=-1)
                for p in ps
            ]) for t, ps in by_topic.items()],
        )
        r = _call(host, port, request, ListOffsetsResponse, 2, timeout_s)
        for t in r.topics:
            for p in t.partitions:
                if p.error_code == NONE and p.offset >= 0:
                    out[(t.name, p.partition_index)] = p.offset
    return out


FETCH_VERSION = 5  # record batches v2, isolation level, log start offset


def _fetch(host: str, port: int, tp: TopicPartition, offset: int, timeout_s: float):
    request = FetchRequest(
        replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=8 << 20, isolation_level=0,
        topics=[FetchRequest.FetchTopic(topic=tp[0], partitions=[
            FetchRequest.FetchTopic.FetchPartition(
                partition=tp[1], fetch_offset=offset, partition_max_bytes=8 << 20)
        ])],
        version=FETCH_VERSION,
    )
    response = _call(host, port, request, FetchResponse, FETCH_VERSION, timeout_s)
    return response.responses[0].partitions[0]


def _unreadable(txn: PreparedTxn, tp: TopicPartition, start: int, why: str) -> OutcomeUnreadable:
    return OutcomeUnreadable(
        f"the records of transaction {txn.transactional_id} (producer id {txn.producer_id}, "
        f"epoch {txn.producer_epoch}) in {tp[0]}-{tp[1]} from offset {start} are {why}"
    )


def _earliest_offset(host: str, port: int, tp: TopicPartition, timeout_s: float) -> int:
    request = ListOffsetsRequest(
        replica_id=-1, isolation_level=0, version=2,
        topics=[ListOffsetsRequest.ListOffsetsTopic(name=tp[0], partitions=[
            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=tp[1], timestamp=-2)
        ])],
    )
    part = _call(host, port, request, ListOffsetsResponse, 2, timeout_s).topics[0].partitions[0]
    error = txn_error(part.error_code, f"ListOffsets({tp[0]}-{tp[1]}, earliest)")
    if error is not None:
        raise error
    return part.offset


def partition_outcome(
    host: str, port: int, tp: TopicPartition, start: int | None, txn: PreparedTxn,
    timeout_s: float = 10.0,
) -> str:
    """COMMITTED, ABORTED or OPEN: the control marker of the transaction's producer id that
    follows its first record batch in this partition (a producer has one transaction open at a
    time, so that marker ends this one). `start` must be at or below the transaction's first
    record (None: the log start). Raises OutcomeUnreadable if the records are not (or no
    longer) there."""
    if start is None:
        start = _earliest_offset(host, port, tp, timeout_s)
    offset, found = start, False
    while True:
        part = _fetch(host, port, tp, offset, timeout_s)
        if part.error_code == OFFSET_OUT_OF_RANGE or 0 <= offset < part.log_start_offset:
            raise _unreadable(txn, tp, start, f"gone (the log now starts at offset "
                                               f"{part.log_start_offset}: retention deleted them?)")
        error = txn_error(part.error_code, f"Fetch({tp[0]}-{tp[1]}@{offset})")
        if error is not None:
            raise error
        progressed = False
        for batch in MemoryRecords(part.records or b""):
            if batch.next_offset <= offset:
                continue
            progressed, offset = True, batch.next_offset
            if batch.producer_id != txn.producer_id:
                continue
            if not batch.is_control_batch:
                found = found or batch.producer_epoch == txn.producer_epoch
            elif found:
                kind = struct.unpack(">hh", next(iter(batch)).key[:4])[1]
                return COMMITTED if kind == 1 else ABORTED
        if not progressed or offset >= part.high_watermark:
            if found:
                return OPEN
            raise _unreadable(txn, tp, start, f"not in the log (read up to offset {offset})")


def transaction_outcome(
    bootstrap_servers: str,
    txn: PreparedTxn,
    starts: dict[TopicPartition, int | None],
    timeout_s: float = 10.0,
) -> str:
    """Settle a transaction from the output: COMMITTED or ABORTED as soon as one partition it
    wrote shows the marker that ends it (the coordinator writes the same one to every
    partition); OPEN if its records are there with no marker after them. `starts` maps each
    partition it wrote to an offset at or below its first record there (None: read from the
    log start). Raises OutcomeUnreadable if no partition can tell, TransientTxnError if the
    broker cannot be read now."""
    leaders = partition_leaders(bootstrap_servers, {t for t, _ in starts}, timeout_s)
    outcomes: list[str] = []
    unreadable: list[str] = []
    for tp, start in sorted(starts.items()):
        if tp not in leaders:
            unreadable.append(f"{tp[0]}-{tp[1]}: the partition has no leader or does not exist")
            continue
        host, port = leaders[tp]
        try:
            outcome = partition_outcome(host, port, tp, start, txn, timeout_s)
        except OutcomeUnreadable as e:
            unreadable.append(str(e))
            continue
        if outcome != OPEN:
            return outcome
        outcomes.append(outcome)
    if outcomes:
        return OPEN
    raise OutcomeUnreadable("; ".join(unreadable) or "the transaction wrote no partition")
