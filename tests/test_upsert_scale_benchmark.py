"""benchmarks/upsert_scale.py on a tiny table: each step runs (the sink's tasks and commit in
upsert and append mode, write_deltalake, delta-rs's MERGE alone) and the tables it measures
hold what the fold of the changes, counted independently of the sink, says. No timings are
asserted: only that each figure is there."""

from __future__ import annotations

from benchmarks import upsert_scale


def test_upsert_scale_measures_a_correct_upsert_and_append(tmp_path):
    rows, changes, keys = 5_000, 2_000, 200
    out = upsert_scale.measure(str(tmp_path), table_rows=rows, n_changes=changes, keys=keys,
                               task_batch_rows=500, small_table=False, log=lambda _m: None)
    t = out["table"]
    expected = t["expected"]
    assert expected["keys"] == keys
    assert expected["deleted"] > 0 and expected["inserted"] > 0 and expected["updated"] > 0
    assert t["base"]["rows"] == rows
    # the upsert and the MERGE alone give the same table: the fold's
    assert t["upsert"]["table_after"]["rows"] == expected["rows_after"]
    assert t["delta_rs_merge_alone"]["table_after"]["rows"] == expected["rows_after"]
    metrics = t["delta_rs_merge_alone"]["metrics"]
    assert (metrics["num_target_rows_inserted"], metrics["num_target_rows_updated"],
            metrics["num_target_rows_deleted"]) == (
        expected["inserted"], expected["updated"], expected["deleted"])
    assert t["delta_rs_merge_alone_streamed_exec"]["table_after"]["rows"] == expected["rows_after"]
    assert t["upsert_recent_keys"]["table_after"]["rows"] == t["upsert_recent_keys"][
        "expected"]["rows_after"]
    assert t["append"]["table_after"]["rows"] == rows + changes
    for step in (t["upsert"]["tasks"], t["upsert"]["commit"], t["append"]["commit"],
                 t["write_deltalake_append"]["append"], t["delta_rs_merge_alone"]["merge"],
                 t["upsert_recent_keys"]["commit"]):
        assert step["seconds"] >= 0 and step["peak_rss_mb"] >= step["rss_before_mb"] > 0
    assert out["summary"]["upsert_rows_per_s"] > 0 and out["summary"]["append_rows_per_s"] > 0
    assert "upsert: driver commit (MERGE)" in upsert_scale.table(out)
    assert list(tmp_path.iterdir()) == []  # tables, checkpoints and inputs cleaned up


def test_changes_are_distinct_per_key_and_on_the_asked_keys():
    recent = upsert_scale.changes(10_000, 3_000, 300, recent=True).column("id").to_pylist()
    assert min(recent) >= 9_000 and len(set(recent)) == 300
    data = upsert_scale.changes(10_000, 3_000, 300)
    pairs = list(zip(data.column("id").to_pylist(), data.column("seq").to_pylist()))
    assert data.num_rows == 3_000 and len(set(pairs)) == 3_000  # a sequence unique per key
    ids = set(data.column("id").to_pylist())
    assert len(ids) == 300
    assert len([i for i in ids if i >= 10_000]) == 30  # one key in ten is new
    assert min(s for _, s in pairs) > 0  # above the table's sequence
