"""Structured Streaming into mere: exactly once per micro-batch, across restarts."""

from __future__ import annotations

import json
from pathlib import Path

import mere
import mere.spark


def add_input(directory: Path, name: str, ids: range) -> None:
    directory.mkdir(exist_ok=True)
    lines = [json.dumps({"id": i, "note": f"n{i}"}) for i in ids]
    (directory / f"{name}.json").write_text("\n".join(lines) + "\n")


def run_once(spark, source: Path, checkpoint: Path, sink) -> None:
    stream = spark.readStream.schema("id long, note string").json(str(source))
    query = (
        sink(stream.writeStream)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def forget_last_batch(checkpoint: Path) -> None:
    """Simulate a crash after the sink committed a batch but before Spark recorded it."""
    commits = [p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    commits.sort(key=lambda p: int(p.name))
    last = commits[-1]
    last.unlink()
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)


def test_foreach_batch_restart_is_exactly_once(spark, uri, tmp_path):
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    write = mere.spark.foreach_batch(uri, "events", app_id="events-ingest")

    def sink(writer):
        return writer.foreachBatch(write)

    add_input(source, "a", range(0, 10))
    run_once(spark, source, checkpoint, sink)
    db = mere.connect(uri)
    version = db.version
    assert db.table("events").scan().num_rows == 10
    assert db.snapshot().app_version("events-ingest") == 0

    forget_last_batch(checkpoint)
    run_once(spark, source, checkpoint, sink)  # the restart replays batch 0
    assert db.version == version
    assert db.table("events").scan().num_rows == 10

    add_input(source, "b", range(10, 15))
    run_once(spark, source, checkpoint, sink)
    assert db.table("events").scan().num_rows == 15
    assert db.snapshot().app_version("events-ingest") == 1


def test_streaming_data_source_restart_is_exactly_once(spark, uri, tmp_path):
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"

    def sink(writer):
        return (
            writer.format("mere")
            .option("database", uri)
            .option("txnAppId", "events-stream")
            .option("table", "events")
        )

    add_input(source, "a", range(0, 10))
    run_once(spark, source, checkpoint, sink)
    db = mere.connect(uri)
    version = db.version
    assert db.table("events").scan().num_rows == 10

    forget_last_batch(checkpoint)
    run_once(spark, source, checkpoint, sink)
    assert db.version == version
    assert db.table("events").scan().num_rows == 10
    assert db.snapshot().app_version("events-stream") == 0
    table = db.snapshot().table("events")
    on_disk = {p for p in Path(uri, "tables").rglob("*") if p.is_file()}
    assert on_disk == {Path(uri, table.meta.prefix, a.path) for a in table.files}
