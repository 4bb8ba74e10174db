"""The crash matrix's lanes: one per sink, all run by one killed-and-restarted pipeline
(integration_tests/template/test_crash_matrix.py).

A lane is one query of the pipeline (`eos_pipeline.py ... --also ...`): its input, its sink's
arguments, the kill point it parks at in each batch, what it checks right after each kill (the
state the point must leave, before recovery touches it) and at the end (every input record
exactly once, nothing left open or prepared). Its checkpoint folder's name scopes its faults
(sinks/faults.py), and the pipeline's rendezvous kills the process group only once every lane
is parked at its own point of the batch: each lane dies at exactly its protocol point, and a
row of the matrix costs one Spark start for every sink instead of one each.

The checks are the ones each sink's own matrix made when it ran alone; the helpers they share
with the sinks' other tests (a frozen broker, a frozen PostgreSQL, a vacuumed decided batch)
live here too.
"""

from __future__ import annotations

import collections
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
from confluent_kafka import Producer
from deltalake import DeltaTable

from connectors.local.kafka_oracle import committed, read_partition
from integration_tests.support.delta_oracle import (
    assert_exactly_once,
    last_spark_batch,
    orphan_files,
    table_records,
    txn_versions,
)
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.postgres import prepared_transactions, query
from sinks.postgres import gid_batch, gid_prefix
from sinks.txn_log import TransactionLog

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"

#: Run k of the sequence is killed at POINTS[k] of batch k; run k+1 recovers it. The last run
#: (number len(POINTS)) goes to the end of the input and fails a task of its first new batch
#: (TASK_FAIL_BATCH), which Spark retries.
POINTS = ["task_write", "after_precommit", "after_decision", "after_store_commit",
          "after_some_commits", "after_commit"]
TASK_FAIL_BATCH = len(POINTS)
#: The run that recovers after_decision starts its Python workers without Spark's daemon
#: (spark.python.use.daemon=false: `python -m ...`), where the old stack-walking role check
#: never recovered, and a crash after a partition's EndTxn and before its committed marker
#: duplicated that partition. The other runs keep the daemon.
NO_DAEMON_RUNS = (3,)
#: Packed tasks (docs/source.md#tasks-sized-by-data-not-by-partitions): each batch's 3 ranges
#: are read by 2 Spark tasks, one of them reading 2 partitions, so every kill point is recovered
#: with a Spark partition that carries several input partitions (the sink decides per (batch,
#: Spark partition): a replay must put the same ranges in the same Spark partition).
PACKED = ["--source-option", "targetTasksPerBatch=2"]
#: What the source's batch metrics line says of such a batch.
PACKED_LINE = '"tasks": 2'
PARTITIONS = 3
LOST = "were lost before their commit"


def lines_of(log: str, describe: str) -> list[str]:
    """The pipeline log's lines about one sink (its `describe()` text)."""
    return [line for line in log.splitlines() if describe in line]


@dataclass
class Lane:
    """One sink's query in the matrix."""

    name: str  # the checkpoint folder's name: the scope of the lane's faults
    work: Path
    args: list[str] = field(default_factory=list)

    @property
    def checkpoint(self) -> str:
        return str(self.work / self.name)

    def point(self, batch: int) -> str:
        """The point this lane parks at in `batch`'s kill."""
        return POINTS[batch]

    def query_args(self) -> list[str]:
        return [*self.args, "--checkpoint", self.checkpoint]

    def after_kill(self, point: str, batch: int) -> None:
        """What the kill must have left, before the next run recovers it."""

    def verify(self, log: str) -> None:
        """The end state after the last recovery."""

    def pending_batches(self) -> list[str]:
        log_dir = os.path.join(self.checkpoint, "eos-sink")
        return [b for b in os.listdir(log_dir) if b.isdigit()
                and not os.path.exists(os.path.join(log_dir, b, "done"))]


# -- kafka-eos ------------------------------------------------------------------------------


def assert_exactly_once_in_topic(bootstrap: str, out: str, expected,
                                 partitions: int = PARTITIONS) -> None:
    got = collections.Counter((r.key, r.value) for r in committed(bootstrap, out))
    want = collections.Counter((r.key, r.value) for r in expected)
    dupes = {k: n for k, n in got.items() if n > 1}
    assert not dupes, f"{len(dupes)} records committed more than once, e.g. {list(dupes)[:3]}"
    missing = sorted(set(want) - set(got))
    assert not missing, f"{len(missing)} records missing, e.g. {missing[:3]}"
    assert got == want
    for p in range(partitions):
        assert read_partition(bootstrap, out, p).open == [], f"open transaction left in {out}-{p}"


class KafkaLane(Lane):
    """Kafka -> kafka-eos -> kafka-eos on one cluster generation. On 4.x (transaction version
    2) the batch killed after_decision is also lost behind the sink's back before its
    recovery: another producer initialises each of its transactional ids, which aborts its
    prepared transactions (what transaction.timeout.ms does, without waiting for it); the
    recovery must detect that, log it and write the partitions again. On 3.9 the decided
    batches are committed through the classic protocol's EndTxn."""

    def __init__(self, name: str, work: Path, broker) -> None:
        super().__init__(name, work)
        self.bootstrap = broker.bootstrap_servers
        self.v3 = broker.node is not None and broker.node.generation.major == 3
        topic, self.out = unique_topic("kin"), unique_topic("kout")
        create_topic(self.bootstrap, topic, PARTITIONS)
        create_topic(self.bootstrap, self.out, PARTITIONS)
        #: 330 records at 50 per trigger: batches 0-6.
        self.expected = produce(self.bootstrap, topic, PARTITIONS, 110)
        self.prefix = unique_topic("lost")
        self.args = ["--bootstrap", self.bootstrap, "--topic", topic, "--out-topic", self.out,
                     "--transactional-id-prefix", self.prefix, *PACKED]

    def after_kill(self, point: str, batch: int) -> None:
        got = collections.Counter((r.key, r.value) for r in committed(self.bootstrap, self.out))
        assert not [k for k, n in got.items() if n > 1], f"a record twice after {point}@{batch}"
        if point == "after_decision" and not self.v3:
            for p in range(PARTITIONS):  # abort the decided batch's transactions
                tid = f"{self.prefix}-{p}-0"  # <prefix>-<partition>-<attempt>
                Producer({"bootstrap.servers": self.bootstrap,
                          "transactional.id": tid}).init_transactions(30)

    def verify(self, log: str) -> None:
        assert_exactly_once_in_topic(self.bootstrap, self.out, self.expected)
        assert not self.pending_batches(), f"{self.name}: batches left pending"
        mine = "\n".join(lines_of(log, f"kafka-eos[{self.prefix}"))
        lost = f"batch {POINTS.index('after_decision')}: partition(s) "
        assert (lost in mine and LOST in mine) != self.v3, mine[-4000:]


# -- delta-eos, append ----------------------------------------------------------------------


def verify_delta_append(table: str, checkpoint: str, expected) -> None:
    """Every record once by source position, the table's txn version at Spark's last batch,
    another reader agreeing, no orphan file, nothing pending in the transaction log."""
    assert_exactly_once(table, expected)
    versions = txn_versions(table)
    assert len(versions) == 1, f"one app id expected in the table's txn actions: {versions}"
    (version,) = versions.values()
    assert version == last_spark_batch(checkpoint)
    assert pl.read_delta(table).height == len(expected)  # another reader agrees
    assert orphan_files(table) == [], "files of aborted attempts were left behind"
    leftover = [b for b in os.listdir(os.path.join(checkpoint, "eos-sink")) if b.isdigit()]
    assert all(
        os.path.exists(os.path.join(checkpoint, "eos-sink", b, "done")) for b in leftover
    ), f"batches left pending in the transaction log: {leftover}"


def safe_records(table: str) -> list:
    try:
        return table_records(table)
    except Exception:  # no table yet
        return []


class DeltaLane(Lane):
    """Kafka -> kafka-eos -> delta-eos, one row per record. Delta commits a batch at once, so
    it has no after_some_commits: it parks after its store commit again in that batch."""

    def __init__(self, name: str, work: Path, bootstrap: str) -> None:
        super().__init__(name, work)
        topic = unique_topic("delta")
        create_topic(bootstrap, topic, PARTITIONS)
        self.expected = produce(bootstrap, topic, PARTITIONS, 110)
        self.table = str(work / f"{name}-table")
        self.args = ["--bootstrap", bootstrap, "--topic", topic, "--table", self.table,
                     # Files of killed tasks are removed at the next start, not an hour later.
                     "--sink-option", "orphanFileRetention=0s", *PACKED]

    def point(self, batch: int) -> str:
        point = POINTS[batch]
        return "after_store_commit" if point == "after_some_commits" else point

    def after_kill(self, point: str, batch: int) -> None:
        rows = safe_records(self.table)
        assert len({(p, o) for p, o, _, _ in rows}) == len(rows), \
            f"a record twice after {point}@{batch}"

    def verify(self, log: str) -> None:
        verify_delta_append(self.table, self.checkpoint, self.expected)


# -- delta-eos, upsert ----------------------------------------------------------------------

Change = tuple[int, int, str, str | None]  # (id, seq, op, v)
UPSERT_KEYS, UPSERT_EVENTS = 45, 300
#: Keys deleted mid-stream and left alone after, then updated at the stream's end with a
#: sequence older than their delete (in later batches): only the tombstones keep them out.
DELETED_MID_STREAM, LATE_PER_KEY = 10, 3


def change_events(seed: int = 23) -> list[Change]:
    """The stream, in production order: per key a growing sequence, with one change in five
    late (below the key's latest) and one in five a delete; mid-stream, DELETED_MID_STREAM
    keys are deleted and then not changed again until the tail, where each gets LATE_PER_KEY
    updates older than its delete."""
    rng = random.Random(seed)
    latest = {k: 0 for k in range(UPSERT_KEYS)}
    events: list[Change] = []
    parked = range(UPSERT_KEYS - DELETED_MID_STREAM, UPSERT_KEYS)
    tail = DELETED_MID_STREAM * LATE_PER_KEY
    random_events = UPSERT_EVENTS - DELETED_MID_STREAM - tail
    for i in range(random_events):
        if i == random_events // 2:
            for k in parked:
                latest[k] += 1
                events.append((k, latest[k], "d", None))
        k = rng.randrange(UPSERT_KEYS if i < random_events // 2
                          else UPSERT_KEYS - DELETED_MID_STREAM)
        latest[k] += rng.randint(1, 3)
        late = rng.random() < 0.2 and latest[k] > 4
        seq = latest[k] - rng.randint(1, 4) if late else latest[k]
        op = "d" if rng.random() < 0.2 else "u"
        events.append((k, seq, op, None if op == "d" else f"v{k}@{seq}"))
    for j in range(LATE_PER_KEY):
        for k in parked:
            seq = latest[k] - 1 - j
            events.append((k, seq, "u", f"v{k}@{seq} (late, after its delete)"))
    return events


def fold(events: list[Change]) -> dict[int, tuple[int, str | None]]:
    """Per key the change with the highest seq wins (a delete on a tie); deleted keys go."""
    best: dict[int, Change] = {}
    for e in events:
        old = best.get(e[0])
        if old is None or (e[1], e[2] == "d") > (old[1], old[2] == "d"):
            best[e[0]] = e
    return {k: (s, v) for k, (_, s, op, v) in best.items() if op != "d"}


def produce_changes(bootstrap: str, topic: str, events: list[Change]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    failed: list[str] = []
    for k, seq, op, v in events:
        producer.produce(topic, key=str(k).encode(), partition=k % PARTITIONS,
                         value=json.dumps({"id": k, "seq": seq, "op": op, "v": v}).encode(),
                         on_delivery=lambda err, _msg: failed.append(str(err)) if err else None)
        producer.poll(0)
    assert producer.flush(30) == 0 and not failed, failed


def upsert_rows(path: str) -> dict[int, tuple[int, str | None]]:
    t = DeltaTable(path).to_pyarrow_table(columns=["id", "seq", "v"])
    ids = t.column("id").to_pylist()
    assert len(ids) == len(set(ids)), f"a key twice in the table: {sorted(ids)}"
    return {r["id"]: (r["seq"], r["v"]) for r in t.to_pylist()}


def txn_commits(path: str) -> dict[str, list[int]]:
    """appId -> the batch ids of the txn actions in the log, one per commit that carries one
    (the demo's verification reads them the same way)."""
    from connectors.demo.verify import txn_versions as per_commit

    return per_commit(path)


class UpsertLane(DeltaLane):
    """Kafka change events -> kafka-eos -> delta-eos with mergeKeys, judged against the fold
    of the events computed here, independently of the sink: updates, deletes, late changes (a
    sequence below the key's latest, produced after it), late updates after a delete, and
    keys re-created after their delete, each key's changes in one partition in order."""

    def __init__(self, name: str, work: Path, bootstrap: str) -> None:
        Lane.__init__(self, name, work)
        self.events = change_events()
        self.expected = fold(self.events)
        # the stream exercises what the semantics are about
        assert any(op == "d" for _, _, op, _ in self.events)
        assert 0 < len(self.expected) < UPSERT_KEYS
        late_after_delete = [
            e for i, e in enumerate(self.events) if e[2] != "d" and any(
                d[0] == e[0] and d[2] == "d" and d[1] >= e[1] for d in self.events[:i])]
        assert len(late_after_delete) >= DELETED_MID_STREAM * LATE_PER_KEY
        assert not set(range(UPSERT_KEYS - DELETED_MID_STREAM, UPSERT_KEYS)) & set(self.expected)
        topic = unique_topic("upsert")
        create_topic(bootstrap, topic, PARTITIONS)
        produce_changes(bootstrap, topic, self.events)
        self.table = str(work / f"{name}-table")
        self.args = [
            "--bootstrap", bootstrap, "--topic", topic, "--table", self.table, "--changes",
            "--max-per-trigger", "40",  # 300 events: batches 0-7
            "--sink-option", "mergeKeys=id", "--sink-option", "sequenceBy=seq",
            "--sink-option", "applyAsDeletes=op = 'd'", "--sink-option", "exceptColumns=op",
            "--sink-option", "orphanFileRetention=0s",  # killed tasks' staged files: next start
        ]

    def after_kill(self, point: str, batch: int) -> None:
        if os.path.isdir(os.path.join(self.table, "_delta_log")):
            upsert_rows(self.table)  # asserts one row per key, whatever was committed so far

    def verify(self, log: str) -> None:
        got = upsert_rows(self.table)
        expected = self.expected
        missing = sorted(set(expected) - set(got))
        extra = sorted(set(got) - set(expected))
        wrong = sorted(k for k in set(got) & set(expected) if got[k] != expected[k])
        assert not (missing or extra or wrong), (
            f"the table is not the fold of the events: missing keys {missing}, keys that "
            f"should be deleted {extra}, wrong rows {[(k, got[k], expected[k]) for k in wrong]}")
        commits = txn_commits(self.table)
        assert len(commits) == 1, f"one appId expected: {sorted(commits)}"
        (batches,) = commits.values()
        last = last_spark_batch(self.checkpoint)
        assert last >= len(POINTS), "every kill point should have met a batch"
        assert sorted(batches) == list(range(last + 1)), (
            f"each batch's txn action once (a batch applied twice, or one not recorded): "
            f"{batches}")
        staging = os.path.join(self.table, "_eos_staging")
        leftover = [n for _, _, names in os.walk(staging) for n in names]
        assert leftover == [], f"staged files left behind: {leftover}"
        # what readers use agrees: another reader, and no hidden column leaked into the table
        frame = pl.read_delta(self.table)
        assert frame.height == len(expected) and set(frame.columns) == {"id", "seq", "v"}
        assert not self.pending_batches(), f"{self.name}: batches left pending"


# -- postgres-eos ---------------------------------------------------------------------------


def pg_table_rows(postgres, table: str) -> list[tuple]:
    """(partition, offset, key, value) of every row, duplicates kept; [] before the table exists."""
    exists = query(postgres, "SELECT to_regclass(%s) IS NOT NULL", (table,))[0][0]
    if not exists:
        return []
    return sorted(query(postgres, f'SELECT partition, "offset", key, value FROM {table}'))


def ours(postgres, checkpoint: str) -> dict[str, int]:
    """This pipeline's prepared transactions (gid -> batch), by its checkpoint's gid prefix."""
    prefix = gid_prefix(checkpoint)
    found = {gid: gid_batch(prefix, gid) for gid, _ in prepared_transactions(postgres)}
    return {gid: batch for gid, batch in found.items() if batch is not None}


def records_through(checkpoint: str, batch: int, expected) -> list[tuple]:
    """The input records of batches 0..`batch`, by the end offsets Spark logged for `batch`."""
    if batch < 0:
        return []
    with open(os.path.join(checkpoint, "offsets", str(batch))) as f:
        ends = json.loads(f.read().strip().splitlines()[-1])
    return sorted(
        (r.partition, r.offset, r.key.decode(), r.value.decode())
        for r in expected if r.offset < ends[r.topic][str(r.partition)]
    )


def assert_once(rows: list[tuple], want: list[tuple], what: str) -> None:
    counts = collections.Counter((p, o) for p, o, _, _ in rows)
    dupes = [k for k, n in counts.items() if n > 1]
    assert not dupes, f"{what}: {len(dupes)} records written more than once, e.g. {dupes[:5]}"
    missing = sorted(set(want) - set(rows))
    assert not missing, f"{what}: {len(missing)} records missing, e.g. {missing[:5]}"
    assert rows == want, what


def verify_postgres(postgres, checkpoint: str, log_path: str, expected, table) -> None:
    """Every input record in the table once (by source partition and offset, with its key and
    value), no prepared transaction left, every batch of the log done, no password in the log."""
    want = sorted((r.partition, r.offset, r.key.decode(), r.value.decode()) for r in expected)
    assert_once(pg_table_rows(postgres, table), want, "at the end")
    # This query's, by its gids' prefix: the server is the session's, and another test's
    # leftovers (a failed crash matrix's prepared transactions, in CI on 2026-11-28) are not
    # this one's to answer for.
    assert ours(postgres, checkpoint) == {}, "prepared transactions left behind"
    txlog = TransactionLog(checkpoint)
    assert txlog.pending() == [], f"batches left pending in the transaction log: {txlog.pending()}"
    with open(log_path, errors="replace") as f:
        assert postgres.password not in f.read(), "the password leaked into the log"


class PostgresLane(Lane):
    """Kafka -> kafka-eos -> postgres-eos against a real PostgreSQL, checked row by row: at
    each kill, that the recovery of the previous row is complete (every input record of the
    batches before it in the table once, no prepared transaction of theirs left) and that the
    kill left what its point must leave (prepared transactions in `pg_prepared_xacts`, decision
    and committed records in the transaction log, rows visible in the table). A prepared
    transaction rolled back behind the sink's back after the decision (the lost-transaction
    rule of docs/design.md#commit-protocol) must be detected and its partition rewritten."""

    def __init__(self, name: str, work: Path, bootstrap: str, postgres, log_path: str) -> None:
        super().__init__(name, work)
        self.postgres, self.log_path = postgres, log_path
        topic = unique_topic("pgin")
        create_topic(bootstrap, topic, PARTITIONS)
        #: 105 records, 5 per partition and batch: 7 batches, every task writes rows.
        self.expected = produce(bootstrap, topic, PARTITIONS, 35)
        self.table = f"crash_{topic.replace('-', '_')}"
        # A task per partition (its row-by-row checks count a prepared transaction per
        # partition); the upsert lane runs the records-sized default plan.
        self.args = ["--bootstrap", bootstrap, "--topic", topic, "--pg-table", self.table,
                     "--max-per-trigger", "15", "--source-option", "targetTasksPerBatch=8"]
        self.previous: str | None = None

    def after_kill(self, point: str, batch: int) -> None:
        self.check_recovered(batch)
        self.check_point(point, batch)
        if point == "after_decision":  # an administrator rolls back one decided transaction
            (lost,) = [g for g, b in ours(self.postgres, self.checkpoint).items()
                       if b == batch and g.endswith("-0-0")]  # partition 0, attempt 0
            query(self.postgres, f"ROLLBACK PREPARED '{lost}'")
        self.previous = point

    def check_recovered(self, batch: int) -> None:
        """Batches before `batch` (the last of them recovered from the previous kill) are in,
        once."""
        before = records_through(self.checkpoint, batch - 1, self.expected)
        what = (f"after recovering from the kill at {self.previous}" if self.previous
                else "before any kill")
        # rows of the batch killed now are check_point's; these must all be there, once
        rows = pg_table_rows(self.postgres, self.table)
        assert_once([r for r in rows if r in set(before)], before, what)
        left = sorted(g for g, b in ours(self.postgres, self.checkpoint).items() if b < batch)
        assert not left, f"{what}: prepared transactions of recovered batches left behind: {left}"

    def check_point(self, point: str, batch: int) -> None:
        """What the server, the transaction log and Spark's commit log must hold right after
        the kill at `point` of `batch`, before recovery touches anything."""
        ckpt = self.checkpoint
        state = TransactionLog(ckpt).state(batch)
        prepared = [g for g, b in ours(self.postgres, ckpt).items() if b == batch]
        rows = pg_table_rows(self.postgres, self.table)
        before = records_through(ckpt, batch - 1, self.expected)  # committed by earlier batches
        through = records_through(ckpt, batch, self.expected)  # ... and by the killed one
        where = f"kill at {point} of batch {batch}"
        assert len(set(rows)) == len(rows), f"{where}: a record is in the table twice"
        assert set(before) <= set(rows) <= set(through), where
        assert not os.path.exists(os.path.join(ckpt, "commits", str(batch))), where
        if point == "task_write":  # killed inside a task: nothing of the batch decided or visible
            assert not state.decisions and rows == before, where
        elif point == "after_precommit":  # every task prepared; nothing decided or visible
            assert len(state.prepared) == PARTITIONS and not state.decisions, (where, state)
            assert len(prepared) == PARTITIONS and rows == before, (where, prepared)
        elif point == "after_decision":  # decided, nothing committed
            assert len(state.decided()) == PARTITIONS and not state.committed, (where, state)
            assert len(prepared) == PARTITIONS and rows == before, (where, prepared)
        elif point == "after_store_commit":  # partition 0 committed in the store, no marker yet
            assert not state.committed and len(state.decided()) == PARTITIONS, (where, state)
            assert len(prepared) == PARTITIONS - 1, (where, prepared)
            assert before != rows != through, where
        elif point == "after_some_commits":  # one partition committed, the others prepared
            assert len(state.committed) == 1, (where, state)
            assert len(prepared) == PARTITIONS - 1, (where, prepared)
            assert before != rows != through, where
        elif point == "after_commit":  # all in; only Spark's own commit log is missing
            assert len(state.committed) == PARTITIONS and state.done, (where, state)
            assert prepared == [] and rows == through, (where, prepared)
        else:
            raise AssertionError(f"no check for {point}")

    def verify(self, log: str) -> None:
        self.check_recovered(TASK_FAIL_BATCH)
        verify_postgres(self.postgres, self.checkpoint, self.log_path, self.expected, self.table)
        mine = "\n".join(lines_of(log, self.table))
        assert LOST in mine, "the rolled-back transaction was not detected"
