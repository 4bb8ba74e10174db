"""Committing a prepared Kafka transaction from another process (docs/design.md#kafka-commits),
and settling its outcome from the output when the coordinator cannot.

A task's transactional producer flushes its transaction and goes away without committing; the
driver later ends it with the two raw requests Flink's Kafka sink uses: FindCoordinator (key
type 1, the transaction coordinator of the transactional id) and EndTxn(transactional id,
producer id, epoch, committed). Every message is encoded and decoded by kafka-python's protocol
layer, and every error code is named by `kafka.errors`. The transport is kafka-python's client
and connection layer (`CommitClient`), configured from the sink's own `kafka.*` options
(connectors/core/kafka/python_security.py), so the commit speaks the cluster's TLS and SASL as
the tasks' producers do; a cluster that refuses it (credentials, certificate, protocol) raises
`ClusterRefused`, naming the options to check.

What an EndTxn error means (`classify`):
* retriable (the coordinator moved or is loading, a concurrent EndTxn, ...): retry;
* authorization: fail at once, naming the ACL the sink needs (`acl_needed`);
* fenced epoch / unknown producer id / invalid state (`TxnRefused`): the coordinator will not
  end the transaction with this producer id and epoch. That is *not* proof that it was lost:
  it may have been committed before (the driver crashed between EndTxn and its committed
  marker) and fenced or expired since. Only the output can tell: `transaction_outcome` (outcome.py) reads
  the raw record batches of a partition the transaction wrote and finds the control marker
  that ends it;
* anything else: fail at once with its Kafka error name.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from types import ModuleType
from typing import TYPE_CHECKING

from connectors.core.kafka.python_security import connection_hint, kafka_python_config
from sinks.kafka.connection_logs import demoting

if TYPE_CHECKING:
    from kafka.net.compat import KafkaNetClient

# kafka-python is imported where a request is sent, not here: it costs about 0.2 s, and every
# Python worker Spark starts for this sink (its tasks, its planners) imports this module, while
# only the driver's commit and recovery send these requests.


def _errors() -> ModuleType:
    """kafka-python's table of error codes (`kafka.errors`)."""
    import kafka.errors

    return kafka.errors

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

#: The request versions the commit client sends, pinned, and the same for a first attempt and
#: every retry. The coordinator chooses its rules by EndTxn's version (KIP-890 part 2): v0-4
#: get the classic ones on every cluster, transaction.version 2 or not (the epoch must match;
#: a repeated commit of a completed transaction answers NONE; no epoch bump), which is what the
#: tasks' librdkafka producers (EndTxn v0-1, AddPartitionsToTxn v<4) begin their transactions
#: with. v5+ would bump the epoch at every commit, and mixing versions between a send and its
#: retry turns the retry into PRODUCER_FENCED or INVALID_TXN_STATE. InitProducerId v3 (Kafka
#: 2.5+) fences with producer id and epoch -1, as a new producer's init_transactions does.
#: Verified on Apache Kafka 4.4.0 (transaction.version 2) and 3.9.2: integration_tests/
#: test_kafka_sink_commit.py.
END_TXN_VERSION = 1
INIT_PRODUCER_ID_VERSION = 3


# -- errors ---------------------------------------------------------------------------------


class TransientTxnError(ConnectionError):
    """The outcome is unknown: retry (the coordinator moved, the connection dropped, ...).

    `closed_by_broker`: the broker closed the connection after the request was sent, without
    an answer. The embedded demo broker (Tansu 0.6.0) answers every refused EndTxn (fenced
    epoch, unknown producer id or transactional id) that way, so the output is worth consulting
    before retrying blindly; Apache Kafka answers with an error code.
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
    return f"{_errors().for_code(code).message} (error {code})"


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
    error = _errors().for_code(code)
    if issubclass(error, _errors().AuthorizationError):
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
    if code == _errors().TransactionalIdAuthorizationFailedError.errno:
        return (
            f"the sink's principal needs WRITE (and DESCRIBE) on TransactionalId "
            f"'{transactional_id_prefix}*' (a prefixed ACL: kafka-acls --add --allow-principal "
            f"User:<principal> --operation Write --operation Describe --transactional-id "
            f"'{transactional_id_prefix}' --resource-pattern-type prefixed)"
        )
    if code == _errors().TopicAuthorizationFailedError.errno:
        return (
            f"the sink's principal needs WRITE and DESCRIBE on Topic {topic_list}, and READ to "
            "settle a transaction whose commit is in doubt from the output"
        )
    if code == _errors().ClusterAuthorizationFailedError.errno:
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

#: The cluster: the sink's librdkafka configuration (its `kafka.*` options), or bare bootstrap
#: servers for a plaintext cluster.
Cluster = Mapping[str, str] | str


class ClusterRefused(TxnRequestError):
    """The cluster refused the connection itself (TLS or SASL): retrying will not help; the
    message names the options to fix and never their values."""


class CommitClient:
    """kafka-python's client and connection layer, configured from the sink's `kafka.*`
    options: the same TLS and SASL as the tasks' producers. One per configuration and
    process, its connections kept between batches, so a commit costs its requests and not a
    TLS and SASL handshake each."""

    def __init__(self, conf: Mapping[str, str]) -> None:
        self.conf = dict(conf)
        self._config = kafka_python_config(self.conf)
        self._lock = threading.RLock()
        self._client: KafkaNetClient | None = None
        #: `check_cluster` passed once: later batches do not pay for the check again.
        self.verified = False
        #: transactional id -> its coordinator's node id, from the last FindCoordinator: the
        #: ids are per (partition, attempt), so each batch's EndTxn goes to the same node
        #: without asking again; forgotten when a request there fails.
        self._coordinators: dict[str, object] = {}

    def __repr__(self) -> str:  # the configuration holds secrets
        return f"CommitClient({self.conf.get('bootstrap.servers')!r}, " \
               f"{self._config['security_protocol']})"

    def _net(self, timeout_s: float) -> KafkaNetClient:
        if self._client is None:
            from kafka.net.compat import KafkaNetClient

            self._client = KafkaNetClient(
                **self._config,
                request_timeout_ms=int(timeout_s * 1000),
                socket_connection_setup_timeout_ms=int(timeout_s * 1000),
                reconnect_backoff_ms=50, reconnect_backoff_max_ms=1000,
            )
        return self._client

    def _refused(self, exc: BaseException, where: str) -> ClusterRefused:
        detail = f"{type(exc).__name__}: {exc}"
        return ClusterRefused(
            f"the Kafka cluster at {where} refused the exactly-once sink's commit client "
            f"({self._config['security_protocol']}): {detail}. "
            f"{connection_hint(self.conf, detail)}")

    def _ready(self, client: KafkaNetClient, node_id, timeout_s: float) -> None:
        """Connect (TLS, SASL) to `node_id`, raising what went wrong instead of 'not ready'."""
        where = self._address(client, node_id)
        manager = client._manager  # the public await_ready() hides why a connection failed
        try:
            manager.maybe_raise_auth_failure(node_id)
            conn = manager.get_connection(node_id)
        except _errors().NodeNotReadyError:
            manager.reset_backoff(node_id)
            conn = manager.get_connection(node_id)
        except (_errors().SaslAuthenticationFailedError,
                _errors().UnsupportedSaslMechanismError) as e:
            raise self._refused(e, where) from None
        if not conn.init_future.is_done:
            client._net.poll(timeout_ms=int(timeout_s * 1000), future=conn.init_future)
        if conn.init_future.failed():
            error = manager.auth_failure(node_id) or conn.init_future.exception
            if _is_refusal(error):
                raise self._refused(error, where) from None
            raise TransientTxnError(f"cannot connect to {where}: {error}")
        if not conn.init_future.is_done:
            raise TransientTxnError(f"no connection to {where} after {timeout_s:.0f} s")

    @staticmethod
    def _address(client: KafkaNetClient, node_id) -> str:
        node = client.cluster.broker_metadata(node_id)
        return f"{node.host}:{node.port}" if node is not None else str(node_id)

    @demoting  # kafka-python's connection errors of this call logged at DEBUG
    def call(self, request, node_id=None, *, timeout_s: float = 10.0):
        """The answer to `request` from `node_id` (None: any bootstrap server). Thread-safe,
        and concurrent calls share the connection: each thread sends its request, then they
        take turns polling in short slices, so requests of several threads (the commits of a
        batch's partitions) are in flight together and whichever thread polls reads every
        answer that arrived."""
        with self._lock:
            client = self._net(timeout_s)
            if node_id is None:
                node_id = client.least_loaded_node(bootstrap_fallback=True)
            self._ready(client, node_id, timeout_s)
            where = self._address(client, node_id)
            future = client.send(node_id, request)
        deadline = time.monotonic() + timeout_s
        while not future.is_done:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            with self._lock:
                if not future.is_done:
                    client.poll(timeout_ms=max(1, int(min(left, POLL_SLICE_S) * 1000)),
                                future=future)
        if future.succeeded():
            return future.value
        if future.failed():
            error = future.exception
            if _is_refusal(error):
                raise self._refused(error, where)
            # the request went out and the broker hung up instead of answering
            closed = isinstance(error, _errors().KafkaConnectionError)
            raise TransientTxnError(f"{request.name} to {where} failed: {error}",
                                    closed_by_broker=closed)
        raise TransientTxnError(f"{request.name} to {where}: no answer in {timeout_s:.0f} s")

    def cached_coordinator(self, transactional_id: str):
        with self._lock:
            return self._coordinators.get(transactional_id)

    def forget_coordinator(self, transactional_id: str) -> None:
        with self._lock:
            self._coordinators.pop(transactional_id, None)

    def coordinator(self, response, transactional_id: str):
        """The node id of a FindCoordinator answer, known to the client from now on."""
        with self._lock:
            node = self._net(10.0).cluster.add_coordinator(
                response, "transaction", transactional_id, synthesize_node_id=False)
            self._coordinators[transactional_id] = node
            return node

    def learn_brokers(self, response) -> None:
        with self._lock:
            self._net(10.0).cluster.update_metadata(response)


def _is_refusal(error: BaseException | None) -> bool:
    """TLS or SASL said no: a definite answer, unlike a dropped connection."""
    if isinstance(error, (ssl.SSLError, _errors().SaslAuthenticationFailedError,
                          _errors().UnsupportedSaslMechanismError,
                          _errors().IllegalSaslStateError)):
        return True
    # kafka-python reports a failed TLS handshake as a connection error with its reason
    return isinstance(error, _errors().KafkaConnectionError) and "handshake failed" in str(
        error).lower()


_CLIENTS: dict[tuple, CommitClient] = {}
#: How long one thread polls the commit client's connections before letting another poll.
POLL_SLICE_S = 0.05
_CLIENTS_LOCK = threading.Lock()


def commit_client(cluster: Cluster) -> CommitClient:
    """This process's client for `cluster`; options are checked (and refused) on first use."""
    conf = {"bootstrap.servers": cluster} if isinstance(cluster, str) else dict(cluster)
    key = tuple(sorted(conf.items()))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = CommitClient(conf)
        return client


def check_cluster(cluster: Cluster, timeout_s: float = 10.0) -> None:
    """Once per process and configuration: connect and authenticate now, so that wrong credentials, an untrusted certificate or the
    wrong protocol fail the query at its start, naming the options, within seconds. A cluster
    that does not answer at all is retried until `timeout_s`, then refused the same way."""
    from kafka.protocol.metadata.metadata import MetadataRequest

    client = commit_client(cluster)
    if client.verified:
        return
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.call(MetadataRequest(topics=[], allow_auto_topic_creation=False, version=4),
                        timeout_s=max(1.0, min(5.0, deadline - time.monotonic())))
            client.verified = True
            return
        except TransientTxnError as e:
            if time.monotonic() > deadline:
                raise client._refused(e, client.conf["bootstrap.servers"]) from None
            time.sleep(0.2)


# -- ending a transaction -------------------------------------------------------------------


def find_transaction_coordinator(
    cluster: Cluster, transactional_id: str, timeout_s: float = 10.0
):
    """The coordinator's node id (known to the commit client from then on)."""
    from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest

    client = commit_client(cluster)
    r = client.call(FindCoordinatorRequest(key=transactional_id, key_type=1, version=1),
                    timeout_s=timeout_s)
    error = txn_error(r.error_code, f"FindCoordinator({transactional_id})")
    if error is not None:
        raise error
    return client.coordinator(r, transactional_id)


def end_transaction(
    cluster: Cluster, txn: PreparedTxn, *, commit: bool, timeout_s: float = 10.0
) -> None:
    """EndTxn at the coordinator. Idempotent: ending a completed transaction again with the same
    epoch returns no error. Raises TransientTxnError, or a TxnRequestError: TxnRefused (settle
    from the output), TxnAuthorizationError, or another definite error named by Kafka.
    The coordinator found for the id last time is asked directly; any failure that may mean it
    moved (no answer, NOT_COORDINATOR, ...) forgets it, and the retry asks FindCoordinator."""
    from kafka.protocol.producer.transaction import EndTxnRequest

    client = commit_client(cluster)
    node = client.cached_coordinator(txn.transactional_id)
    if node is None:
        node = find_transaction_coordinator(cluster, txn.transactional_id, timeout_s)
    what = (f"EndTxn({'commit' if commit else 'abort'}) of {txn.transactional_id} "
            f"(producer id {txn.producer_id}, epoch {txn.producer_epoch})")
    try:
        r = client.call(
            EndTxnRequest(
                transactional_id=txn.transactional_id,
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                committed=commit,
                version=END_TXN_VERSION,
            ),
            node, timeout_s=timeout_s,
        )
        error = txn_error(r.error_code, what)
    except BaseException:  # unreachable, unknown node, dropped connection: ask again next time
        client.forget_coordinator(txn.transactional_id)
        raise
    if isinstance(error, TransientTxnError):
        client.forget_coordinator(txn.transactional_id)
    if error is not None:
        raise error


def fence_transactional_id(
    cluster: Cluster, transactional_id: str, transaction_timeout_ms: int,
    *, timeout_s: float = 10.0, deadline_s: float = 30.0,
) -> None:
    """InitProducerId for `transactional_id`, as a new producer's `init_transactions` does: the
    coordinator bumps the epoch and aborts the id's open transaction, if any. Raw, so that it
    costs two round trips and no librdkafka instance. Version 3 (Kafka 2.5+) with producer id
    and epoch -1 (the embedded demo broker, Tansu 0.6.0, answers versions 0-2 with
    UNKNOWN_SERVER_ERROR)."""
    from kafka.protocol.producer.transaction import InitProducerIdRequest

    deadline = time.monotonic() + deadline_s
    while True:
        try:
            node = find_transaction_coordinator(cluster, transactional_id, timeout_s)
            r = commit_client(cluster).call(
                InitProducerIdRequest(transactional_id=transactional_id,
                                      transaction_timeout_ms=transaction_timeout_ms,
                                      producer_id=-1, producer_epoch=-1,
                                      version=INIT_PRODUCER_ID_VERSION),
                node, timeout_s=timeout_s,
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
