"""delta-eos upsert mode end to end: Kafka change events -> `kafka-eos` -> `delta-eos` with
mergeKeys, killed at every protocol point of the template, judged against the fold of the
events computed here, independently of the sink.

The events are JSON `{"id", "seq", "op", "v"}` on a real Apache Kafka topic, keyed by id (so a
key's changes stay in one partition, in the order produced): updates, deletes, late changes
(a sequence below the key's latest, produced after it), late updates after a delete, and keys
re-created after their delete. One kill sequence on one checkpoint (sinks/faults.py points:
run k is SIGKILLed, driver JVM included, at point k of batch k+1, run k+1 recovers it), with
the run that recovers after_decision started without Spark's Python daemon, as the append
mode's crash matrix does; then the table must be exactly the fold: every key present with its
winning change's sequence and value, every deleted key absent, each batch in the table once
(one commit carries each batch's txn action).
"""

from __future__ import annotations

import json
import os
import random

from confluent_kafka import Producer
from deltalake import DeltaTable

from integration_tests.support.delta_oracle import last_spark_batch
from integration_tests.support.kafka_data import create_topic, unique_topic
from integration_tests.support.processes import WORKERS_LINE, log_tail, run_kill_sequence

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"
PARTITIONS, KEYS, EVENTS = 3, 45, 300  # 50 per trigger: 6 batches
KILL_POINTS = ["task_write", "after_precommit", "after_decision", "after_store_commit",
               "after_commit"]
#: Every run keeps Spark's worker daemon (integration_tests/delta_sink/test_delta_crash_matrix.py runs one
#: without it and says why). The role check a no-daemon run guards is the shared template's
#: (sinks/two_phase_commit.py: recovery runs when Spark pickles the tasks' writer, however its
#: workers start), run without the daemon by the Kafka 4.x and Delta append matrices; here
#: a no-daemon run would cost some 40 s of the suite's 40-minute budget for the same code.
NO_DAEMON_RUNS: tuple[int, ...] = ()

Change = tuple[int, int, str, str | None]  # (id, seq, op, v)


#: Keys deleted mid-stream and left alone after, then updated at the stream's end with a
#: sequence older than their delete (in later batches): only the tombstones keep them out.
DELETED_MID_STREAM, LATE_PER_KEY = 10, 3


def change_events(seed: int = 23) -> list[Change]:
    """The stream, in production order: per key a growing sequence, with one change in five
    late (below the key's latest) and one in five a delete; mid-stream, DELETED_MID_STREAM
    keys are deleted and then not changed again until the tail, where each gets LATE_PER_KEY
    updates older than its delete."""
    rng = random.Random(seed)
    latest = {k: 0 for k in range(KEYS)}
    events: list[Change] = []
    parked = range(KEYS - DELETED_MID_STREAM, KEYS)
    tail = DELETED_MID_STREAM * LATE_PER_KEY
    random_events = EVENTS - DELETED_MID_STREAM - tail
    for i in range(random_events):
        if i == random_events // 2:
            for k in parked:
                latest[k] += 1
                events.append((k, latest[k], "d", None))
        k = rng.randrange(KEYS if i < random_events // 2 else KEYS - DELETED_MID_STREAM)
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


def _table_rows(path: str) -> dict[int, tuple[int, str | None]]:
    t = DeltaTable(path).to_pyarrow_table(columns=["id", "seq", "v"])
    ids = t.column("id").to_pylist()
    assert len(ids) == len(set(ids)), f"a key twice in the table: {sorted(ids)}"
    return {r["id"]: (r["seq"], r["v"]) for r in t.to_pylist()}


def _txn_commits(path: str) -> dict[str, list[int]]:
    """appId -> the batch ids of the txn actions in the log, one per commit that carries one."""
    found: dict[str, list[int]] = {}
    log_dir = os.path.join(path, "_delta_log")
    for name in sorted(os.listdir(log_dir)):
        if name.endswith(".json"):
            with open(os.path.join(log_dir, name)) as f:
                for action in map(json.loads, f):
                    if "txn" in action:
                        found.setdefault(action["txn"]["appId"], []).append(action["txn"]["version"])
    return found


def test_upsert_killed_at_every_protocol_point_ends_with_the_fold(bootstrap, tmp_path):
    events = change_events()
    expected = fold(events)
    # the stream exercises what the semantics are about
    assert any(op == "d" for _, _, op, _ in events) and 0 < len(expected) < KEYS
    late_after_delete = [
        e for i, e in enumerate(events) if e[2] != "d" and any(
            d[0] == e[0] and d[2] == "d" and d[1] >= e[1] for d in events[:i])]
    assert len(late_after_delete) >= DELETED_MID_STREAM * LATE_PER_KEY
    assert not set(range(KEYS - DELETED_MID_STREAM, KEYS)) & set(expected)

    topic = unique_topic("upsert")
    create_topic(bootstrap, topic, PARTITIONS)
    produce_changes(bootstrap, topic, events)
    table, checkpoint, log = (str(tmp_path / "table"), str(tmp_path / "ckpt"),
                              str(tmp_path / "pipeline.log"))
    args = [
        "--bootstrap", bootstrap, "--topic", topic, "--checkpoint", checkpoint,
        "--table", table, "--changes",
        "--sink-option", "mergeKeys=id", "--sink-option", "sequenceBy=seq",
        "--sink-option", "applyAsDeletes=op = 'd'", "--sink-option", "exceptColumns=op",
        "--sink-option", "orphanFileRetention=0s",  # killed tasks' staged files: next start
    ]

    def no_key_twice(point: str, batch: int) -> None:
        if os.path.isdir(os.path.join(table, "_delta_log")):
            _table_rows(table)  # asserts one row per key, whatever was committed so far

    run_kill_sequence(PIPELINE, *args, log_path=log, points=KILL_POINTS,
                      after_each_kill=no_key_twice, no_daemon_runs=NO_DAEMON_RUNS)
    text = log_tail(log, 10**8)
    assert "without having recovered" not in text
    assert text.count(WORKERS_LINE.format("no-daemon")) == len(NO_DAEMON_RUNS)

    got = _table_rows(table)
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    wrong = sorted(k for k in set(got) & set(expected) if got[k] != expected[k])
    assert not (missing or extra or wrong), (
        f"the table is not the fold of the events: missing keys {missing}, keys that should be "
        f"deleted {extra}, wrong rows {[(k, got[k], expected[k]) for k in wrong]}")
    commits = _txn_commits(table)
    assert len(commits) == 1, f"one appId expected: {sorted(commits)}"
    (batches,) = commits.values()
    last = last_spark_batch(checkpoint)
    assert last >= len(KILL_POINTS), "every kill point should have met a batch"
    assert sorted(batches) == list(range(last + 1)), (
        f"each batch's txn action once (a batch applied twice, or one not recorded): {batches}")
    staging = os.path.join(table, "_eos_staging")
    leftover = [n for _, _, names in os.walk(staging) for n in names]
    assert leftover == [], f"staged files left behind: {leftover}"
    # what readers use agrees: another reader, and no hidden column leaked into the table
    import polars as pl

    frame = pl.read_delta(table)
    assert frame.height == len(expected) and set(frame.columns) == {"id", "seq", "v"}
