"""Helpers of the streaming tests: bounded generator jobs and the oracle check of their sinks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter

import pyarrow as pa
import kill_driver

from airflow_provider_semijoin.core.oracle import engine_pairs, hash_join
from airflow_provider_semijoin.core.progress import SUMMARY_PREFIX, json_after
from airflow_provider_semijoin.spark import partitioned
from airflow_provider_semijoin.spark.sinks import read_parquet_sink
from airflow_provider_semijoin.job.spec import JobSpec
from airflow_provider_semijoin.workloads.master import master_table
from airflow_provider_semijoin.workloads.zipf import zipf_rows

SELECT = ["name", "category"]


def close_parts_held_here() -> None:
    """The parts' sessions this process held (as a Spark worker would until it ends)."""
    while partitioned._PARTS:
        _, (_, session) = partitioned._PARTS.popitem()
        session.algorithm.store.close()


class Clock:
    """Epoch seconds that a test moves on between batches; each reading adds a millisecond (a
    slice's time runs out after a few dozen steps)."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def generator_job(tmp_path, url: str, table: str, *, algorithm="hybridjoin", total_rows=3000, master_rows=400,
                  missing=0.1, params=None, memory="1M", **extra) -> JobSpec:
    """A bounded generator stream -> one join step -> Parquet sinks, stopping at the end of input."""
    data = {
        "source": {"kind": "generator", "total_rows": total_rows, "rows_per_second": 50_000.0,
                   "master_rows": master_rows, "missing": missing, "seed": 1},
        "steps": [{"column": "nk", "master_static": True, "master": {"url": url, "table": table, "key": "nk", "select": SELECT},
                   "algorithm": algorithm, "memory": memory, "params": params or {}}],
        "sinks": {"matched": {"path": str(tmp_path / "matched")}, "dead_letter": {"path": str(tmp_path / "dead")}},
        "checkpoint": str(tmp_path / "checkpoint"),
        "stop": {"end_of_input": True},
        "trigger_interval_s": 0.2,
    }
    data.update(extra)
    return JobSpec.from_dict(data)


def landing_job(tmp_path, schema: str, steps: list[dict], partitions: int, **extra) -> JobSpec:
    """A landing folder of Parquet files (one per micro-batch, ``schema``) -> ``steps`` ->
    Parquet sinks, until the file ``stop`` appears in ``tmp_path``."""
    (tmp_path / "landing").mkdir()
    return JobSpec.from_dict({
        "source": {"kind": "files", "path": str(tmp_path / "landing"), "format": "parquet", "schema": schema,
                   "max_files_per_trigger": 1},
        "steps": steps,
        "sinks": {"matched": {"path": str(tmp_path / "matched")}, "dead_letter": {"path": str(tmp_path / "dead")}},
        "checkpoint": str(tmp_path / "checkpoint"),
        "stop": {"stop_file": str(tmp_path / "stop")},
        "partitions": partitions,
        "trigger_interval_s": 0.2,
        **extra,
    })


def write_master(backend, n_rows: int):
    """R of the generator's keys (odd keys, see workloads.master) on the test's backend."""
    return backend.make_master(master_table(n_rows), select=SELECT)


def sink_pairs(matched: pa.Table, dead: pa.Table) -> tuple[Counter, Counter]:
    """The sinks in the oracle's form: row id = the generator's tid."""
    unmatched = pa.table({"tid": pa.array([int(i) for i in dead["sj_id"].to_pylist()], pa.int64()), "reason": dead["reason"]})
    return engine_pairs(matched, unmatched, SELECT, "tid")


def assert_sinks_equal_oracle(store, spec: JobSpec, matched: pa.Table | None = None) -> None:
    """Every generated tuple left exactly once, and exactly as the plain hash join says."""
    source = spec.source
    stream = zipf_rows(0, source.total_rows, source.master_rows, missing=source.missing, seed=source.seed)
    expected = hash_join(store, stream, "nk")
    if matched is None:
        matched = read_parquet_sink(spec.sinks.matched.path)
    got = sink_pairs(matched, read_parquet_sink(spec.sinks.dead_letter.path))
    assert got[0] == expected[0]
    assert got[1] == expected[1]


def driver_summary(output: str) -> dict:
    """The summary a driver run as a plain process printed (its ``SEMIJOIN_SUMMARY`` line)."""
    return next(found for line in output.splitlines() if (found := json_after(line, SUMMARY_PREFIX)) is not None)


def run_driver(spec_file, kill: str | None = None) -> subprocess.CompletedProcess:
    """The packaged driver as a plain process on ``spec_file`` (``kill``: ``point:batch id`` where
    it kills itself, :mod:`kill_driver`); its stdout, and its exit code."""
    command = [kill_driver.PATH, kill] if kill else ["-m", "airflow_provider_semijoin.spark.driver"]
    process = subprocess.Popen(
        [sys.executable, *command, "--spec", str(spec_file), "--master", "local[2]"], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True, start_new_session=True, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    try:
        out, _ = process.communicate(timeout=400)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(process.args, process.returncode, out)


def killed_then_finished(spec: JobSpec, folder, points: tuple[str, ...], on_killed=None) -> None:
    """The packaged driver on ``spec``, killed with its JVM at each of ``points`` in turn
    (``point:batch id``; ``on_killed(point)`` looks at what it left), then run once more to its end."""
    spec_file = folder / "job.json"
    spec_file.write_text(json.dumps(spec.to_dict()))
    for point in points:
        killed = run_driver(spec_file, kill=point)
        assert killed.returncode == -signal.SIGKILL, killed.stdout[-2000:]
        if on_killed is not None:
            on_killed(point)
    done = run_driver(spec_file)
    assert done.returncode == 0, done.stdout[-2000:]


def pyspark_workers() -> list[int]:
    """The Python workers of this test process's Spark (forked by its ``pyspark.daemon``): processes
    below this one only, never those of the Spark of another test process (an xdist worker's)."""
    listed = subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True, text=True, check=True).stdout.splitlines()[1:]
    rows = [(int(pid), int(ppid), args) for pid, ppid, args in (line.split(None, 2) for line in listed if len(line.split()) > 2)]
    below, parents = set(), [os.getpid()]
    while parents:
        parent = parents.pop()
        children = [pid for pid, ppid, _ in rows if ppid == parent and pid not in below]
        below.update(children)
        parents.extend(children)
    daemons = {pid for pid, _, args in rows if "pyspark.daemon" in args and pid in below}
    return [pid for pid, ppid, args in rows if "pyspark.daemon" in args and ppid in daemons]
