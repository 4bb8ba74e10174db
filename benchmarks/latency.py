"""Per-batch and end-to-end latency at a steady trickle, side by side in one Spark session.

A producer thread writes `rate` records/s (default 200) into a 2-partition input topic all along,
each value stamped with its produce time (ns since the epoch) and a sequence number. Each
`kafka-eos` pipeline gets an input topic of its own, created just before its query starts (the
producer moves to it): the embedded broker's fetches cost time in proportion to the partition's
length (Tansu, measured: 6 ms at 2,000 one-record batches, 34 ms at 8,000, 57 ms at 16,000,
113 ms at 32,000; Kafka's offset index makes them constant), so one topic filled all along would
charge the pipelines run last for the broker's storage, not for their own work. One after the
other, in the same Spark session (local[2], the same 1 s processing-time trigger):

* `rate` -> `noop`: Spark's own floor for a micro-batch here (no Kafka, no Python);
* `rate` -> `delta-eos`;
* `kafka-eos` -> Spark's built-in parquet sink;
* `kafka-eos` -> `kafka-eos` sink, exactly-once;
* `kafka-eos` -> `delta-eos`.

Each runs `warmup` batches (not measured), then `batches` measured ones: their p50 / p90 of
Spark's own `durationMs.triggerExecution`, and the ratio to the floor's p50 measured in the same
session. End to end, for the two exactly-once pipelines, for every record produced while the
measured batches ran: its visibility time minus its produce time, where visibility is

* for `delta-eos`, the modification time of the `_delta_log/<version>.json` file of the first
  version whose add actions carry the record (a reader sees the version once that file exists);
* for the `kafka-eos` sink, the time a `read_committed` consumer on the output topic (started
  before the query, `fetch.wait.max.ms` 10) received the record (it only gets it once the
  transaction's COMMIT marker is written); the produce time travels in the record's value.

A pipeline whose query fails is retried once from a fresh checkpoint; the failure is kept in
the results (`failed_attempts`), and a second failure is reported as the pipeline's result.

The query keeps running until a batch that started after the measured window has completed, so
every record of the window had its chance to become visible; records that did not are counted
(`missing`). Timed, but never asserted on (docs/design.md#performance-method).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile
import threading
import time
from datetime import datetime
from urllib.parse import unquote

import pyarrow.parquet as pq
from confluent_kafka import Consumer, Producer, TopicPartition

from benchmarks.common import load_average, pct, ratio
from integration_tests.support.kafka_data import create_topic, delete_topic, unique_topic

#: The pipelines, in the order they run and are reported.
PIPELINES = {
    "rate_noop": "rate source -> noop (Spark's floor)",
    "python_floor": "Python source, ready rows -> Python sink doing nothing",
    "rate_delta_eos": "rate source -> delta-eos",
    "kafka_eos_parquet": "kafka-eos -> Spark's parquet sink",
    "kafka_eos_kafka_eos": "kafka-eos -> kafka-eos sink, exactly-once",
    "kafka_eos_delta_eos": "kafka-eos -> delta-eos",
    "driver_kafka_eos_kafka_eos": "kafka-eos readMode=driver -> kafka-eos sink, exactly-once",
    "driver_kafka_eos_delta_eos": "kafka-eos readMode=driver -> delta-eos",
    "rate_noop_again": "rate source -> noop again (Spark's floor, warm)",
}
#: Spark's floor: rate -> noop, measured first and again last; the lower p50 of the two is the
#: floor every ratio is taken against (the JVM warms up over a session: a floor measured only
#: first, cold, is up to twice the warm one, and would flatter every ratio).
FLOOR_PIPELINES = ("rate_noop", "rate_noop_again")
#: target name: (pipeline, the most its per-batch p50 may be, as a multiple of the floor's)
TARGETS = {
    "kafka_eos_delta_eos_p50_vs_floor": ("kafka_eos_delta_eos", 3.0),
    "kafka_eos_kafka_eos_p50_vs_floor": ("kafka_eos_kafka_eos", 3.5),
    "kafka_eos_delta_eos_p50_vs_floor[readMode=driver]": ("driver_kafka_eos_delta_eos", 3.0),
    "kafka_eos_kafka_eos_p50_vs_floor[readMode=driver]": ("driver_kafka_eos_kafka_eos", 3.5),
}
STAMP_BYTES = 32  # b"<19-digit ns> <12-digit sequence>"


# -- the producer and the output consumer -------------------------------------------------------


class TrickleProducer(threading.Thread):
    """`rate` records/s, alternating over the partitions, each stamped with its produce time.
    `topic` may be changed while it runs: the next record goes to the new topic."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int, value_bytes: int):
        super().__init__(daemon=True, name="latency-producer")
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.pad = b"x" * max(0, value_bytes - STAMP_BYTES)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                                  "enable.idempotence": True})
        self.stop_event = threading.Event()
        self.produced = 0
        self.errors = 0

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.errors += 1

    def run(self) -> None:
        interval = 1.0 / self.rate
        start = time.monotonic()
        seq = 0
        while not self.stop_event.is_set():
            due = start + seq * interval
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
                continue
            value = b"%019d %012d" % (time.time_ns(), seq) + self.pad
            self.producer.produce(self.topic, value=value, key=b"k%d" % seq,
                                  partition=seq % self.partitions, on_delivery=self._delivered)
            self.producer.poll(0)
            seq += 1
            self.produced = seq
        self.producer.flush(30)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(60)


class CommittedReader(threading.Thread):
    """A read_committed consumer on the output topic: when each record became readable."""

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        super().__init__(daemon=True, name="latency-reader")
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"latency-{topic}",
            "isolation.level": "read_committed", "enable.auto.commit": False,
            "fetch.wait.max.ms": 10, "fetch.min.bytes": 1,
        })
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.stop_event = threading.Event()
        self.seen: dict[int, tuple[int, int]] = {}  # seq -> (produce ns, visible ns)
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.stop_event.is_set():
            msgs = self.consumer.consume(1000, timeout=0.05)
            now = time.time_ns()
            with self.lock:
                for m in msgs:
                    if m.error() is None and m.value() is not None:
                        ns, seq = _stamp(m.value())
                        self.seen.setdefault(seq, (ns, now))
        self.consumer.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)


def _stamp(value: bytes) -> tuple[int, int]:
    return int(value[:19]), int(value[20:32])


# -- one pipeline -------------------------------------------------------------------------------


def iso_seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def run_batches(query, *, warmup: int, batches: int, timeout_s: float) -> dict:
    """Let `warmup` batches with rows pass, then `batches` more; then keep the query until a
    batch that started after the measured window completed. Returns the measured progress and
    the window's wall-clock bounds."""
    seen: dict[int, dict] = {}
    deadline = time.monotonic() + timeout_s
    window_start = window_end = None

    def with_rows() -> list[dict]:
        return sorted((p for p in seen.values() if p["numInputRows"] > 0),
                      key=lambda p: p["batchId"])

    try:
        while True:
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(with_rows())} batches with rows in {timeout_s:.0f} s")
            for p in query.recentProgress:
                seen[p["batchId"]] = p
            done = with_rows()
            if window_start is None and len(done) >= warmup:
                window_start = time.time()
                first_measured = (done[-1]["batchId"] + 1) if done else 0
            if window_start is not None:
                measured = [p for p in done if p["batchId"] >= first_measured]
                if window_end is None and len(measured) >= batches:
                    window_end = time.time()
                if window_end is not None and any(
                        iso_seconds(p["timestamp"]) > window_end + 0.3 for p in seen.values()):
                    break
            time.sleep(0.1)
    finally:
        query.stop()
    measured = [p for p in with_rows() if p["batchId"] >= first_measured][:batches]
    return {"progress": measured, "window": (window_start, window_end)}


def _floor(results: dict) -> float | None:
    """The lower of the floor pipelines' p50s (FLOOR_PIPELINES)."""
    p50s = [results[n]["trigger_execution_ms_p50"] for n in FLOOR_PIPELINES
            if "trigger_execution_ms_p50" in results.get(n, {})]
    return min(p50s) if p50s else None


def per_batch_latency(progress: list[dict]) -> dict:
    ms = [p["durationMs"]["triggerExecution"] for p in progress]
    add = [p["durationMs"].get("addBatch", 0) for p in progress]
    out = {
        "batches": len(ms),
        "rows_per_batch_p50": pct([p["numInputRows"] for p in progress], 0.5),
        "trigger_execution_ms_p50": pct(ms, 0.5),
        "trigger_execution_ms_p90": pct(ms, 0.9),
        "add_batch_ms_p50": pct(add, 0.5),
        # Where a batch's time goes (Spark's own phases): p50 of each.
        "phases_ms_p50": {
            phase: pct([p["durationMs"].get(phase, 0) for p in progress], 0.5)
            for phase in sorted({k for p in progress for k in p["durationMs"]})
            if phase != "triggerExecution"
        },
        "trigger_execution_ms": ms,
        "first_batch_id": progress[0]["batchId"] if progress else None,
    }
    return out


def end_to_end_latency(pairs: list[tuple[int, int]], window: tuple[float, float],
                       expected: set[int], seqs: set[int]) -> dict:
    lat = [(vis - ns) / 1e6 for ns, vis in pairs]
    return {
        "records": len(lat),
        "missing": len(expected - seqs),
        "window_s": round(window[1] - window[0], 1),
        "p50_ms": round(pct(lat, 0.5), 1),
        "p99_ms": round(pct(lat, 0.99), 1),
        "max_ms": round(max(lat), 1) if lat else float("nan"),
        "min_ms": round(min(lat), 1) if lat else float("nan"),
        "latency_ms": [round(x, 1) for x in lat],
    }


def delta_visibility(path: str) -> dict[int, tuple[int, int]]:
    """seq -> (produce ns, visible ns): the first version whose add actions carry the record,
    visible when its _delta_log JSON file was written."""
    out: dict[int, tuple[int, int]] = {}
    logs = sorted(glob.glob(os.path.join(path, "_delta_log", "*.json")))
    for log in logs:
        visible = os.stat(log).st_mtime_ns
        with open(log) as f:
            actions = [json.loads(line) for line in f if line.strip()]
        for rel in (a["add"]["path"] for a in actions if "add" in a):
            rel = unquote(rel)
            if rel.startswith("file://"):
                rel = rel[len("file://"):]
            values = pq.read_table(os.path.join(path, rel), columns=["value"])
            for v in values.column("value").to_pylist():
                ns, seq = _stamp(v)
                out.setdefault(seq, (ns, visible))
    return out


# -- the measurement ----------------------------------------------------------------------------


def window_seqs(produced: dict[int, int], window: tuple[float, float]) -> set[int]:
    lo, hi = (int(w * 1e9) for w in window)
    return {seq for seq, ns in produced.items() if lo <= ns <= hi}


class ProduceLog:
    """The input topic read back (read_uncommitted) after the run: seq -> produce ns."""

    @staticmethod
    def read(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-in-{topic}",
                      "enable.auto.commit": False})
        ends = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)]
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out, left = {}, sum(ends)
        deadline = time.monotonic() + 120
        while left > 0 and time.monotonic() < deadline:
            for m in c.consume(10_000, timeout=1.0):
                if m.error() is None:
                    ns, seq = _stamp(m.value())
                    out[seq] = ns
                    left -= 1
        c.close()
        return out


def _source_frame(spark, name: str, bootstrap: str, topic: str | None, *, rate: int,
                  partitions: int, trigger_s: float, source_options: dict | None):
    """The pipeline's streaming input: Spark's rate source, the Python floor's ticks, or
    `kafka-eos` on `topic` from its latest offsets."""
    if name.startswith("rate"):
        return (spark.readStream.format("rate").option("rowsPerSecond", rate)
                .option("numPartitions", partitions).load())
    if name == "python_floor":
        return (spark.readStream.format("bench-ticks")
                .option("rowsPerBatch", int(rate * trigger_s)).option("tasks", partitions)
                .load())
    mode = {"readMode": "driver"} if name.startswith("driver_") else {}
    return (spark.readStream.format("kafka-eos")
            .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .option("startingOffsets", "latest")
            .options(**mode, **(source_options or {})).load())


def _sink_writer(df, name: str, bootstrap: str, out_path: str, partitions: int):
    """(writer, reader, out_topic): the pipeline's sink; for `kafka-eos` output a fresh topic
    and a started CommittedReader that watches it, else None for both."""
    reader = out_topic = None
    if name in FLOOR_PIPELINES:
        writer = df.writeStream.format("noop")
    elif name == "python_floor":
        writer = df.writeStream.format("bench-noop")
    elif name.endswith("delta_eos"):
        writer = df.writeStream.format("delta-eos").option("path", out_path)
    elif name == "kafka_eos_parquet":
        writer = df.writeStream.format("parquet").option("path", out_path)
    elif name.endswith("kafka_eos_kafka_eos"):
        out_topic = unique_topic("bench-latency-out")
        create_topic(bootstrap, out_topic, partitions)
        reader = CommittedReader(bootstrap, out_topic, partitions)
        reader.start()
        writer = (df.select("key", "value").writeStream.format("kafka-eos")
                  .option("kafka.bootstrap.servers", bootstrap)
                  .option("topic", out_topic)
                  .option("deliveryGuarantee", "exactly-once")
                  .option("transactionalIdPrefix", out_topic))
    else:
        raise ValueError(f"unknown pipeline {name}")
    return writer, reader, out_topic


def _measured(run: dict, name: str, topic: str | None, load_start, out_path: str,
              reader: CommittedReader | None) -> dict:
    """One pipeline's figures from its run; `_visible` (record -> when it became visible) where
    its output is watched, for the end-to-end latency once every input is read back."""
    res = per_batch_latency(run["progress"])
    res["window"] = [round(w, 3) for w in run["window"]]
    if "kafka_eos_" in name:
        res["input_topic"] = topic
    res["load_average"] = {"start": load_start, "end": load_average()}
    if name.endswith("kafka_eos_delta_eos"):
        res["_visible"] = delta_visibility(out_path)
    elif reader is not None:
        with reader.lock:
            res["_visible"] = dict(reader.seen)
    return res


def _failure(name: str, e: Exception, load_start, started: float, log) -> dict:
    """A failed attempt as reported: its error, the load around it, how long it ran."""
    failure = {"error": f"{type(e).__name__}: {str(e)[:2000]}",
               "load_average": {"start": load_start, "end": load_average()},
               "duration_s": round(time.time() - started, 1)}
    log(f"  {name}: FAILED {type(e).__name__}: {str(e)[:600]}")
    return failure


def _remove(*paths: str) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


def _add_floor_ratios(results: dict, log) -> float | None:
    """Each pipeline's p50 as a multiple of the floor's; returns the floor."""
    floor = _floor(results)
    for name, res in results.items():
        if floor and name not in FLOOR_PIPELINES and "trigger_execution_ms_p50" in res:
            res["p50_vs_floor"] = ratio(res["trigger_execution_ms_p50"], floor)
            log(f"  {name}: {res['p50_vs_floor']}x the floor ({floor} ms)")
    return floor


def _add_end_to_end(results: dict, produced: dict[int, int], log) -> None:
    """Produce-to-visible latency of the records produced in each pipeline's measured window,
    for the pipelines whose output was watched."""
    for name, res in results.items():
        if "error" in res:
            continue
        visible = res.pop("_visible", None)
        if visible is None:
            continue
        expected = window_seqs(produced, tuple(res["window"]))
        pairs = [visible[s] for s in sorted(expected) if s in visible]
        res["end_to_end"] = end_to_end_latency(pairs, tuple(res["window"]), expected,
                                               set(visible))
        e = res["end_to_end"]
        log(f"  {name} end to end: p50 {e['p50_ms']} ms, p99 {e['p99_ms']} ms over "
            f"{e['records']} records ({e['missing']} missing)")


def measure(spark, bootstrap: str, work: str, *, batches: int = 30, warmup: int = 3,
            rate: int = 200, partitions: int = 2, trigger_s: float = 1.0, value_bytes: int = 100,
            pipelines: list[str] | None = None, retries: int = 1,
            source_options: dict | None = None, log=print) -> dict:
    pipelines = list(PIPELINES) if pipelines is None else pipelines
    if "python_floor" in pipelines:
        from benchmarks import noop_sink

        noop_sink.register(spark)
    inputs: list[str] = []

    def new_input() -> str:
        topic = unique_topic("bench-latency-in")
        create_topic(bootstrap, topic, partitions)
        inputs.append(topic)
        return topic

    producer = TrickleProducer(bootstrap, new_input(), partitions, rate, value_bytes)
    producer.start()
    trigger = f"{trigger_s:g} seconds"
    timeout_s = 120 + (warmup + batches) * trigger_s * 10
    results: dict = {}
    failures: dict[str, list[dict]] = {}
    from benchmarks.delta_long_run import quiet_sink_log

    sink_log, saved = quiet_sink_log()  # a line per batch and sink on stderr helps nobody
    try:
        queue = list(pipelines)
        while queue:
            name = queue.pop(0)
            started = time.time()
            ckpt = tempfile.mkdtemp(prefix="ckpt-", dir=work)
            out_path = tempfile.mkdtemp(prefix="out-", dir=work)
            topic = None
            if not name.startswith("rate") and name != "python_floor":
                # A fresh input (see the module's docstring), the producer writing to it
                # before the query looks for its latest offsets.
                producer.topic = topic = new_input()
            df = _source_frame(spark, name, bootstrap, topic, rate=rate, partitions=partitions,
                               trigger_s=trigger_s, source_options=source_options)
            writer, reader, out_topic = _sink_writer(df, name, bootstrap, out_path, partitions)
            query = (writer.option("checkpointLocation", ckpt)
                     .trigger(processingTime=trigger).start())
            load_start = load_average()
            try:
                run = run_batches(query, warmup=warmup, batches=batches, timeout_s=timeout_s)
            except Exception as e:  # reported; retried once; the other pipelines still run
                failure = _failure(name, e, load_start, started, log)
                if reader is not None:
                    reader.stop()  # before its topic goes: librdkafka crashed otherwise (seen)
                if out_topic is not None:
                    delete_topic(bootstrap, out_topic)
                _remove(out_path, ckpt)
                failures.setdefault(name, []).append(failure)
                if len(failures[name]) <= retries:
                    queue.insert(0, name)
                else:
                    results[name] = dict(failure, failed_attempts=failures[name])
                continue
            finally:
                if reader is not None:
                    time.sleep(0.5)
                    reader.stop()
            res = _measured(run, name, topic, load_start, out_path, reader)
            if reader is not None:
                delete_topic(bootstrap, out_topic)
            _remove(out_path, ckpt)
            res["duration_s"] = round(time.time() - started, 1)
            if name in failures:  # the attempts that failed before this one
                res["failed_attempts"] = failures[name]
            results[name] = res
            log(f"  {name}: p50 {res['trigger_execution_ms_p50']} ms, p90 "
                f"{res['trigger_execution_ms_p90']} ms over {res['batches']} batches"
                f" ({res['duration_s']} s)")
    finally:
        producer.stop()
        sink_log.handlers[:], level, sink_log.propagate = saved
        sink_log.setLevel(level)
    floor = _add_floor_ratios(results, log)
    produced: dict[int, int] = {}
    for topic in inputs:
        produced.update(ProduceLog.read(bootstrap, topic, partitions))
        delete_topic(bootstrap, topic)
    _add_end_to_end(results, produced, log)
    return {
        "rate_records_per_s": rate,
        "partitions": partitions,
        "trigger_s": trigger_s,
        "value_bytes": value_bytes,
        "warmup_batches": warmup,
        "measured_batches": batches,
        "produced": producer.produced,
        "produce_errors": producer.errors,
        "source_options": source_options or {},
        "input_topics": "one per kafka-eos pipeline, the producer writing to it all along",
        "floor_p50_ms": floor,
        "pipelines": results,
        "targets": evaluate(results),
    }


def evaluate(pipelines: dict) -> dict:
    out = {}
    for name, (pipeline, most) in TARGETS.items():
        res = pipelines.get(pipeline)
        if res is None or "p50_vs_floor" not in res:
            if res is not None:  # failed, or no floor to compare with
                out[name] = {"value": None, "target": f"<= {most}", "met": False,
                             "error": res.get("error", "no floor measured")}
            continue
        value = res["p50_vs_floor"]
        out[name] = {"value": value, "target": f"<= {most}", "met": value <= most}
    return out
