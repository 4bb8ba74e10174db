"""`kafka-eos broker` as a user runs it: real Apache Kafka from its Maven jars (the suite's cache),
whose end offsets and read_committed a user's own checks can trust, where the embedded broker
misled them (a partition produced with linger.ms read short; a read_committed consumer counted
aborted records). Stopped with Ctrl-C, it leaves no JVM behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def test_kafka_eos_broker_is_apache_kafka_until_ctrl_c(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "connectors", "broker", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (lines and lines[-1].startswith("Running")):
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
        text = "\n".join(lines)
        assert "Kafka: Apache Kafka 4.4.0 (one KRaft node, from its Maven jars) at 127.0.0.1:" \
            in text, f"{text}\n{proc.stderr.read() if proc.poll() is not None else ''}"
        assert "embedded" not in text
        bootstrap = next(ln for ln in lines if ln.startswith("bootstrap servers: ")).split(": ")[1]

        topic = "first"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        # 5,000 records in multi-record batches (linger.ms): the end offset says 5,000
        plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
        for i in range(5000):
            plain.produce(topic, str(i).encode())
        plain.flush(30)
        # and an aborted transaction after them, which read_committed must hide
        txp = Producer({"bootstrap.servers": bootstrap, "transactional.id": "t1"})
        txp.init_transactions(30)
        txp.begin_transaction()
        for i in range(658):
            txp.produce(topic, b"aborted")
        txp.flush(30)
        txp.abort_transaction(30)

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                             "isolation.level": "read_committed", "enable.auto.commit": False})
        # abort_transaction returns once the coordinator decided; it writes the ABORT marker
        # after that, and until then the read_committed end (the last stable offset) is 5,000
        # (seen once in CI): wait for the marker, then the end says records plus marker.
        until = time.monotonic() + 30
        while True:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
            if high != 5000 or time.monotonic() > until:
                break
            time.sleep(0.2)
        assert (low, high) == (0, 5000 + 658 + 1)  # records, and the ABORT marker
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = 0
        until = time.monotonic() + 60
        while seen < 5000 and time.monotonic() < until:
            for m in consumer.consume(1000, 1):
                if not m.error():
                    assert m.value() != b"aborted"
                    seen += 1
        assert seen == 5000 and not [m for m in consumer.consume(100, 2) if not m.error()]
        consumer.close()
        jvms = _children(proc.pid, "kafka.Kafka")
        assert len(jvms) == 1
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    assert "kafka-eos broker: stopped" in out
    assert not [pid for pid in jvms if os.path.exists(f"/proc/{pid}")], "the JVM outlived it"


def _children(ppid: int, marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except OSError:
            continue
        if parent == ppid and marker in cmdline:
            found.append(int(entry))
    return found
