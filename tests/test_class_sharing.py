"""The suite's class-data-sharing archive reaches the driver JVM's options only when named."""

from __future__ import annotations

from connectors.local.spark import SPARK_CDS_ENV, class_sharing_options


def test_no_archive_named_adds_no_option(monkeypatch):
    monkeypatch.delenv(SPARK_CDS_ENV, raising=False)
    assert class_sharing_options() == ""
    monkeypatch.setenv(SPARK_CDS_ENV, "")
    assert class_sharing_options() == ""


def test_a_named_archive_that_is_missing_adds_no_option(monkeypatch, tmp_path):
    monkeypatch.setenv(SPARK_CDS_ENV, str(tmp_path / "gone.jsa"))
    assert class_sharing_options() == ""


def test_a_named_archive_is_mapped_quietly_and_optionally(monkeypatch, tmp_path):
    archive = tmp_path / "driver.jsa"
    archive.write_bytes(b"x")
    monkeypatch.setenv(SPARK_CDS_ENV, str(archive))
    options = class_sharing_options().split()
    assert f"-XX:SharedArchiveFile={archive}" in options
    assert "-Xshare:auto" in options  # a JVM that cannot map it loads classes as usual
