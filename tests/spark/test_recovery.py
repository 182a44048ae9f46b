"""Kill the driver (SIGKILL, the whole process group) mid-stream, restart from the checkpoint:
the sinks hold every input tuple exactly once."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys

import pyarrow as pa
from spark_jobs import SELECT, assert_sinks_equal_oracle, generator_job, write_master

from airflow_provider_semijoin.core.progress import parse_line
from airflow_provider_semijoin.spark.driver import SUMMARY_PREFIX
from airflow_provider_semijoin.spark.spec import JobSpec


def start_driver(spec_file) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "airflow_provider_semijoin.spark.driver", "--spec", str(spec_file), "--master", "local[2]"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )


def test_sigkill_mid_stream_then_restart_is_exactly_once(tmp_path, sqlite_backend):
    store = write_master(sqlite_backend, 400)
    data = generator_job(tmp_path, sqlite_backend.url, store.table, total_rows=12_000).to_dict()
    data["source"]["rows_per_second"] = 2_000.0
    data["trigger_interval_s"] = 0.3
    facts = f"sqlite:///{tmp_path / 'facts.db'}"
    data["sinks"]["matched"] = {"kind": "table", "url": facts, "table": "fact"}
    spec = JobSpec.from_dict(data)
    spec_file = tmp_path / "job.json"
    spec_file.write_text(json.dumps(spec.to_dict()))

    first = start_driver(spec_file)
    seen = []
    for line in first.stdout:
        record = parse_line(line)
        if record is not None:
            seen.append(record["batch_id"])
            if len(seen) == 3:  # the batch's sinks are written; Spark has not committed it yet
                os.killpg(first.pid, signal.SIGKILL)
                break
    first.wait(timeout=60)
    assert first.returncode == -signal.SIGKILL and len(seen) == 3

    second = start_driver(spec_file)
    try:
        out, _ = second.communicate(timeout=240)
    finally:  # the driver's JVM is in its process group: never leave it behind
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    assert second.returncode == 0, out[-2000:]
    replayed = [parse_line(line)["batch_id"] for line in out.splitlines() if parse_line(line)]
    assert replayed[0] in (seen[-1], seen[-1] + 1)  # a killed batch is replayed, not skipped
    summary = json.loads(next(line for line in out.splitlines() if line.startswith(SUMMARY_PREFIX))[len(SUMMARY_PREFIX):])
    assert summary["stopped_by"] == "end_of_input"

    rows = sqlite3.connect(tmp_path / "facts.db").execute(
        f"SELECT sj_id, tid, nk, {', '.join(SELECT)} FROM fact"
    ).fetchall()
    matched = pa.table({name: [r[i] for r in rows] for i, name in enumerate(["sj_id", "tid", "nk", *SELECT])})
    assert len(set(matched["sj_id"].to_pylist())) == matched.num_rows  # no tuple twice
    assert_sinks_equal_oracle(store, spec, matched=matched)
