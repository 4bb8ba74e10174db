"""Unit tests of `kafka-eos inspect` / `kafka-eos resolve` on checkpoints laid out as Spark and the
sink lay them out (no Spark, no broker): parsing, windows, errors, the running-query refusal, and
secrets kept out of every output. The end-to-end proofs are integration_tests/operations/test_operations.py.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from connectors.cli import EXIT_CANNOT_RUN, EXIT_QUERY_MAY_BE_RUNNING, EXIT_USAGE, main
from connectors.inspection import inspect_checkpoint
from connectors.core.redaction import redact, redact_text
from connectors.checkpoint_reader import parse_offsets_file
from sinks.txn_log import TransactionLog

PASSWORD = "s3cr3t-Pa55"
META = '{"batchWatermarkMs":0,"batchTimestampMs":1700000000000,"conf":{}}'


def spark_batch(ckpt, batch: int, offsets: dict, committed: bool) -> None:
    os.makedirs(os.path.join(ckpt, "offsets"), exist_ok=True)
    with open(os.path.join(ckpt, "offsets", str(batch)), "w") as f:
        f.write(f"v1\n{META}\n{json.dumps(offsets)}")
    if committed:
        os.makedirs(os.path.join(ckpt, "commits"), exist_ok=True)
        with open(os.path.join(ckpt, "commits", str(batch)), "w") as f:
            f.write('v1\n{"nextBatchWatermarkMs":0}')


def kafka_handle(p: int, began_ms: int, **extra) -> dict:
    return {"partitions": [["out", p]], "transactional_id": f"kafka-eos-abc-{p}-0",
            "producer_id": 10 + p, "producer_epoch": 3, "began_ms": began_ms,
            "timeout_ms": 900_000, "scan_from": [["out", p, 0]], **extra}


@pytest.fixture
def ckpt(tmp_path):
    """Batches 0-1 committed (by Spark and the sink), batch 2 decided and half committed."""
    path = str(tmp_path / "ckpt")
    os.makedirs(path)
    with open(os.path.join(path, "metadata"), "w") as f:
        f.write('{"id":"q-1"}')
    txlog = TransactionLog(path)
    now_ms = int(time.time() * 1000)
    for b, ends in enumerate([(10, 10), (20, 25), (30, 40)]):
        spark_batch(path, b, {"in": {"0": ends[0], "1": ends[1]}}, committed=b < 2)
        handles = {p: kafka_handle(p, now_ms - 60_000) for p in (0, 1)}
        for p, h in handles.items():
            txlog.record_prepared(b, p, 0, h)
        txlog.record_decision(b, handles)
        txlog.record_committed(b, [0] if b == 2 else [0, 1])
        if b < 2:
            txlog.record_done(b)
    old = time.time() - 3600  # written an hour ago: the query is not running
    for root, _, files in os.walk(path):
        for name in files:
            os.utime(os.path.join(root, name), (old, old))
    return path


def run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_offsets_file_with_kafka_eos_and_another_source():
    entry = parse_offsets_file(3, f'v1\n{META}\n{{"t": {{"0": 5, "1": 7}}}}\n{{"logOffset":4}}\n')
    assert entry.batch_timestamp_ms == 1700000000000
    assert entry.sources[0].partitions == {("t", 0): 5, ("t", 1): 7}
    assert entry.sources[1].partitions is None and entry.sources[1].raw == '{"logOffset":4}'
    with pytest.raises(ValueError, match="not a Spark offsets file"):
        parse_offsets_file(3, "garbage\n")


def test_inspect_reports_offsets_log_states_and_the_restart_plan(ckpt):
    report = inspect_checkpoint(ckpt)
    assert report["query_id"] == "q-1"
    assert report["spark"]["last_committed_batch"] == 1
    assert report["sink_log"]["pending"] == [2]
    b0, b1, b2 = report["batches"]
    assert b0["source"][0]["partitions"]["0"] == {"start": None, "end": 10, "count": None}
    assert b1["source"][0]["partitions"] == {"0": {"start": 10, "end": 20, "count": 10},
                                             "1": {"start": 10, "end": 25, "count": 15}}
    assert b2["source"][0]["total"] == 25
    assert b1["sink_log"]["done"] and b1["restart"] == ["nothing"]
    assert b2["sink_log"]["committed_partitions"] == [0]
    assert b2["restart"] == ["commit decided partition(s) 1", "mark the batch done",
                             "Spark replays it (committed partitions write nothing)"]
    (h1,) = b2["sink_log"]["handles"]["1"]
    assert h1["transactional_id"] == "kafka-eos-abc-1-0" and h1["producer_epoch"] == 3
    assert 59 <= h1["age_s"] <= 120 and not h1["timed_out"]
    (h0,) = b2["sink_log"]["handles"]["0"]
    assert "age_s" not in h0  # committed: no longer open, no timeout to watch


def test_inspect_flags_a_transaction_past_its_timeout(ckpt):
    report = inspect_checkpoint(ckpt, now=time.time() + 3600)
    (h1,) = report["batches"][-1]["sink_log"]["handles"]["1"]
    assert h1["timed_out"] and h1["timeout_left_s"] < 0


def test_inspect_windows(ckpt, capsys):
    assert [b["batch"] for b in inspect_checkpoint(ckpt, batches=1)["batches"]] == [2]
    # a pending batch is shown whatever the window
    assert [b["batch"] for b in inspect_checkpoint(ckpt, batches=0)["batches"]] == [2]
    assert [b["batch"] for b in inspect_checkpoint(ckpt, batches=None)["batches"]] == [0, 1, 2]
    rc, out, _ = run(capsys, "inspect", ckpt, "--batch", "1", "--json")
    assert rc == 0 and [b["batch"] for b in json.loads(out)["batches"]] == [1]
    rc, out, _ = run(capsys, "inspect", ckpt)
    assert rc == 0
    assert "batch 2: commit decided partition(s) 1; mark the batch done" in out
    assert "p1 decided kafka txn kafka-eos-abc-1-0 (producer 11, epoch 3) open" in out


def test_inspect_errors_name_what_is_wrong(tmp_path, ckpt, capsys):
    rc, _, err = run(capsys, "inspect", str(tmp_path / "nope"))
    assert rc == EXIT_CANNOT_RUN and "no such directory" in err
    os.makedirs(tmp_path / "empty")
    rc, _, err = run(capsys, "inspect", str(tmp_path / "empty"))
    assert rc == EXIT_CANNOT_RUN and "is not a Structured Streaming checkpoint" in err
    rc, _, err = run(capsys, "inspect", ckpt, "--batch", "9")
    assert rc == EXIT_CANNOT_RUN and "batch 9 has no record" in err and "0-2" in err


def test_resolve_dry_run_prints_the_plan_and_writes_nothing(ckpt, capsys):
    before = sorted(os.listdir(os.path.join(ckpt, "eos-sink", "2")))
    rc, out, _ = run(capsys, "resolve", ckpt)
    assert rc == 0 and "dry run" in out
    assert "batch 2 (kafka-eos): commit decided partition(s) 1; mark the batch done" in out
    assert sorted(os.listdir(os.path.join(ckpt, "eos-sink", "2"))) == before


def test_resolve_refuses_a_recently_written_checkpoint(ckpt, capsys):
    os.utime(os.path.join(ckpt, "offsets", "2"))  # written just now
    rc, _, err = run(capsys, "resolve", ckpt, "--apply", "--bootstrap", "localhost:1")
    assert rc == EXIT_QUERY_MAY_BE_RUNNING
    assert "offsets/2" in err and "may be running" in err and "--force" in err


def test_resolve_needs_the_store_and_says_which_flag(ckpt, capsys):
    rc, _, err = run(capsys, "resolve", ckpt, "--apply")
    assert rc == EXIT_CANNOT_RUN and "--bootstrap" in err


def test_secrets_are_refused_on_the_command_line(ckpt, capsys):
    for flag in ("--kafka-option", "--storage-option"):
        with pytest.raises(SystemExit) as exc:
            main(["resolve", ckpt, flag, f"sasl.password={PASSWORD}"])
        assert exc.value.code == EXIT_USAGE
        err = capsys.readouterr().err
        assert "never on the command line" in err and PASSWORD not in err


def test_no_password_in_any_output(tmp_path, capsys, monkeypatch):
    """Handles may carry connection strings and client settings: a password in a PostgreSQL
    URL, a SASL option or a JAAS line appears in no output of inspect or resolve."""
    path = str(tmp_path / "ckpt")
    spark_batch(path, 0, {"in": {"0": 5}}, committed=False)
    txlog = TransactionLog(path)
    handle = {"gid": "pg-eos-abc-0-0-0", "xid": 1234,
              "url": f"postgresql://bob:{PASSWORD}@db:5432/x",
              "conninfo": f"host=db user=bob password={PASSWORD}",
              "sasl.password": PASSWORD,
              "sasl.jaas.config": f'PlainLoginModule required username="u" password="{PASSWORD}";'}
    txlog.record_prepared(0, 0, 0, handle)
    txlog.record_decision(0, {0: handle})
    monkeypatch.setenv("PG_URL", f"postgresql://bob:{PASSWORD}@127.0.0.1:1/x?connect_timeout=2")
    outputs = []
    for args in (["inspect", path], ["inspect", path, "--json"], ["resolve", path],
                 ["resolve", path, "--json", "--pg-url-env", "PG_URL"],
                 ["resolve", path, "--apply", "--force", "--commit-timeout", "1",
                  "--pg-url-env", "PG_URL"]):
        rc, out, err = run(capsys, *args)
        outputs.append((args, rc, out + err))
    for args, rc, text in outputs:
        assert PASSWORD not in text, f"{args} printed the password"
    assert "pg-eos-abc-0-0-0" in outputs[0][2]  # the gid itself is shown
    assert outputs[-1][1] == EXIT_CANNOT_RUN and "cannot connect" in outputs[-1][2]


def test_redaction_rules():
    assert redact_text(f"postgresql://u:{PASSWORD}@h/db") == "postgresql://u:***@h/db"
    assert redact_text(f"password={PASSWORD} host=h") == "password=*** host=h"
    assert redact({"ssl.key.password": PASSWORD, "n": 1, "l": [f"x://a:{PASSWORD}@b"]}) == \
        {"ssl.key.password": "***", "n": 1, "l": ["x://a:***@b"]}
    assert redact_text("kafka-eos-abc-1-0 out-2") == "kafka-eos-abc-1-0 out-2"


def test_inspect_reads_a_checkpoint_on_s3(ckpt):
    """Through pyarrow.fs: the same checkpoint copied to an S3 bucket (a local S3 server)."""
    pytest.importorskip("moto")
    import pyarrow.fs as pafs

    from integration_tests.support.s3 import s3_server

    with s3_server() as s3:
        bucket = s3.create_bucket()
        fs = pafs.S3FileSystem(endpoint_override=s3.endpoint, access_key=s3.env["AWS_ACCESS_KEY_ID"],
                               secret_key=s3.env["AWS_SECRET_ACCESS_KEY"], scheme="http",
                               region=s3.env.get("AWS_REGION", "us-east-1"))
        pafs.copy_files(ckpt, f"{bucket}/ckpt", destination_filesystem=fs)
        report = inspect_checkpoint(f"s3://{bucket}/ckpt")
    assert report["sink_log"]["pending"] == [2]
    assert [b["batch"] for b in report["batches"]] == [0, 1, 2]
    assert report["batches"][1]["source"][0]["total"] == 25


def test_resolve_settles_a_batch_without_handles_with_no_store_flags(tmp_path, capsys):
    """A crash inside the log's garbage collection can leave a batch directory without handles:
    recovery forgets it, touching no store, and so does resolve (no store flag needed)."""
    path = str(tmp_path / "ckpt")
    spark_batch(path, 5, {"in": {"0": 50}}, committed=False)
    os.makedirs(os.path.join(path, "eos-sink", "5"))
    rc, out, err = run(capsys, "resolve", path, "--apply", "--force")
    assert rc == 0 and "batch 5 (no handles): forget the batch's records" in out, out + err
    assert not os.path.exists(os.path.join(path, "eos-sink", "5"))
    rc, out, _ = run(capsys, "resolve", path, "--apply", "--force")
    assert rc == 0 and "nothing to do" in out


@pytest.fixture
def killed_at_first_offsets(tmp_path):
    """A query SIGKILLed while Spark wrote batch 0's offsets (as the demo's chaos once did on a
    loaded machine): metadata, an empty commits/, and only Spark's temporary file (and its
    .crc) in offsets/. Spark 4 then refuses to start: offsets/ "should be empty on batch 0"."""
    path = tmp_path / "ckpt"
    (path / "offsets").mkdir(parents=True)
    (path / "commits").mkdir()
    (path / "metadata").write_text('{"id":"q-1"}')
    (path / "offsets" / ".0.7c4c1ae3-1634-485a-a554-f4557bce61e6.tmp").write_text(
        f"v1\n{META}\n" + '{"in":{"0":0}}')
    (path / "offsets" / "..0.7c4c1ae3-1634-485a-a554-f4557bce61e6.tmp.crc").write_bytes(b"c")
    old = time.time() - 3600
    for f in (path / "offsets").iterdir():
        os.utime(f, (old, old))
    return str(path)


def test_inspect_says_a_restart_fails_on_an_unfinished_first_offsets_write(killed_at_first_offsets):
    report = inspect_checkpoint(killed_at_first_offsets)
    assert report["restart"][0].startswith("fail: Spark refuses to start")
    assert ".0.7c4c1ae3-1634-485a-a554-f4557bce61e6.tmp" in report["restart"][0]
    assert "kafka-eos resolve --apply" in report["restart"][0]


def test_resolve_removes_an_unfinished_first_offsets_write(killed_at_first_offsets, capsys):
    offsets = os.path.join(killed_at_first_offsets, "offsets")
    rc, out, _ = run(capsys, "resolve", killed_at_first_offsets)
    assert rc == 0 and "would be removed" in out and len(os.listdir(offsets)) == 2
    rc, out, _ = run(capsys, "resolve", killed_at_first_offsets, "--apply")
    assert rc == 0 and "removed" in out
    assert os.listdir(offsets) == []
    assert inspect_checkpoint(killed_at_first_offsets)["restart"] == [
        "nothing: the checkpoint is settled"]


def test_a_logged_batch_keeps_spark_temporary_files_out_of_reach(ckpt, capsys):
    """With batches logged, a temporary file is Spark's own business (a write in progress, or
    one Spark ignores): neither reported nor removed."""
    tmp = os.path.join(ckpt, "offsets", ".3.abc.tmp")
    open(tmp, "w").close()
    assert not any(r.startswith("fail") for r in inspect_checkpoint(ckpt)["restart"])
    run(capsys, "resolve", ckpt)
    assert os.path.exists(tmp)


def test_resolve_leaves_a_first_offsets_write_that_may_be_in_progress(killed_at_first_offsets,
                                                                      capsys):
    """A temporary file written just now may be a starting query's: not removed without
    --force."""
    offsets = os.path.join(killed_at_first_offsets, "offsets")
    for name in os.listdir(offsets):
        os.utime(os.path.join(offsets, name))
    rc, _, err = run(capsys, "resolve", killed_at_first_offsets, "--apply")
    assert rc == EXIT_QUERY_MAY_BE_RUNNING and ".0.7c4c1ae3" in err
    assert len(os.listdir(offsets)) == 2


def test_inspect_text_names_a_few_partitions_of_a_wide_topic(tmp_path, capsys):
    """1,000 partitions: the text line of a batch names the 8 that moved most, and how many
    more; the JSON report keeps every partition."""
    path = str(tmp_path / "wide")
    os.makedirs(path)
    spark_batch(path, 0, {"wide": {str(p): 10 for p in range(1000)}}, committed=True)
    ends = {str(p): 10 + (50 if p in (7, 500, 999) else 1) for p in range(1000)}
    spark_batch(path, 1, {"wide": ends}, committed=True)
    old = time.time() - 3600
    for root, _, files in os.walk(path):
        for name in files:
            os.utime(os.path.join(root, name), (old, old))
    rc, out, _ = run(capsys, "inspect", path)
    assert rc == 0
    (line,) = [ln for ln in out.splitlines() if "source wide" in ln and "p7 10->60" in ln]
    assert "p500 10->60 (50)" in line and "p999 10->60 (50)" in line
    assert "and 992 more partitions; 1147 offsets" in line
    assert len(line) < 400
    report = inspect_checkpoint(path)
    (src,) = [b for b in report["batches"] if b["batch"] == 1][0]["source"]
    assert len(src["partitions"]) == 1000
