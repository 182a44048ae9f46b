"""Kill the driver (SIGKILL, the whole process group) mid-stream, restart from the checkpoint:
the sinks hold every input tuple exactly once."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
import kill_driver
from spark_jobs import SELECT, assert_sinks_equal_oracle, driver_summary, generator_job, write_master

from airflow_provider_semijoin.core.progress import parse_line
from airflow_provider_semijoin.spark.joinstate import StateFiles
from airflow_provider_semijoin.spark.sinks import read_parquet_sink
from airflow_provider_semijoin.job.spec import JobSpec
from airflow_provider_semijoin.workloads.zipf import zipf_rows


def start_driver(spec_file) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "airflow_provider_semijoin.spark.driver", "--spec", str(spec_file), "--master", "local[2]"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )


def test_sigkill_mid_stream_then_restart_is_exactly_once(tmp_path, sqlite_backend):
    store = write_master(sqlite_backend, 400)
    data = generator_job(tmp_path, sqlite_backend.url, store.table, total_rows=12_000).to_dict()
    data["source"]["rows_per_second"] = 4_000.0
    data["source"]["max_rows_per_batch"] = 1_000  # at least 12 micro-batches however slow the machine
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
    summary = driver_summary(out)
    assert summary["stopped_by"] == "end_of_input"

    rows = sqlite3.connect(tmp_path / "facts.db").execute(
        f"SELECT sj_id, tid, nk, {', '.join(SELECT)} FROM fact"
    ).fetchall()
    matched = pa.table({name: [r[i] for r in rows] for i, name in enumerate(["sj_id", "tid", "nk", *SELECT])})
    assert len(set(matched["sj_id"].to_pylist())) == matched.num_rows  # no tuple twice
    assert_sinks_equal_oracle(store, spec, matched=matched)


KILL_POINTS = ("batch", "sinks", "state")  # during a batch; between sinks and state; between state and commit
KILLS = int(os.environ.get("SEMIJOIN_TEST_KILLS", "3"))  # 10 for the acceptance run (about 15 min on 2 cores)


def record_kills(algorithm: str, run: dict) -> None:
    """What a run of the SIGKILL test did (its kills, the sinks' exactly-once count, the verdict),
    into ``$SEMIJOIN_ARTIFACTS/recovery/sigkill.json`` (default tests/artifacts; one entry per
    algorithm, replaced by a later run) and as Markdown tables in ``sigkill.md``. Written only:
    the test's assertions decide."""
    folder = Path(os.environ.get("SEMIJOIN_ARTIFACTS", Path(__file__).parents[1] / "artifacts")) / "recovery"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sigkill.json"
    runs = json.loads(path.read_text()) if path.exists() else {}
    runs[algorithm] = {**run, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path.write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n")
    lines = []
    for name, r in sorted(runs.items()):
        lines += [f"### {name}: {r['kills_planned']} kills in {r['batches']} micro-batches of {r['batch_rows']} tuples "
                  f"({r['at']})", "", "| # | kill point | batch id | state kept of batch | tuples inside the join, kept in the state | exit |",
                  "|---:|---|---:|---:|---:|---|"]
        lines += [f"| {i} | {k['point']} | {k['batch_id']} | {k['state_batch']} | {k['tuples_inside']} | {k['exit']} |"
                  for i, k in enumerate(r["kills"], 1)]
        final = r.get("final")
        if final:
            lines += ["", "| input tuples | fact rows | dead letters | out (distinct) | duplicates | lost | stopped by | verdict |",
                      "|---:|---:|---:|---:|---:|---:|---|---|",
                      f"| {final['input_tuples']} | {final['fact_rows']} | {final['dead_letters']} | {final['distinct_out']} "
                      f"| {final['duplicates']} | {final['lost']} | {final['stopped_by']} | {r['verdict']} |"]
        lines.append("")
    (folder / "sigkill.md").write_text("\n".join(lines))


def run_until_killed(spec_file, point: str, batch_id: int) -> subprocess.Popen:
    driver = subprocess.Popen(
        [sys.executable, kill_driver.PATH, f"{point}:{batch_id}", "--spec", str(spec_file), "--master", "local[2]"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    try:
        driver.wait(timeout=600)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    return driver


@pytest.mark.acceptance  # one kill and a restart: test_sigkill_mid_stream_then_restart_is_exactly_once, first tier
@pytest.mark.timeout(600 + KILLS * 400)
@pytest.mark.parametrize("algorithm, params, trigger_s", [("meshjoin", {"page_rows": 16, "partition_pages": 4}, 0.2),
                                                          ("hybridjoin", {"page_rows": 16, "rider_repeats": 0}, 0.01)])
def test_sigkill_at_random_points_of_a_carried_run_is_exactly_once(tmp_path, sqlite_backend, algorithm, params,
                                                                   trigger_s):
    """3 x KILLS micro-batches of a join whose tuples stay inside across batches (MESHJOIN: for
    its cycle; HYBRIDJOIN: until their page comes round, the join working ahead between
    batches, so a kill at ``sinks`` or ``state`` lands while its thread steps, and the next
    batch takes what it completed); the driver
    kills itself (SIGKILL, its whole process group) at KILLS random (point, batch) pairs, every
    named point among them, and is started again each time: the fact table and the dead letter
    equal the oracle, no tuple twice, and the tuples inside at each kill (in the checkpoint's
    state) come out once."""
    batches = 3 * KILLS  # kills from the fourth batch on: the first two are the warm-up and the first tuple
    store = write_master(sqlite_backend, 2000)
    data = generator_job(tmp_path, sqlite_backend.url, store.table, algorithm=algorithm, total_rows=300 * batches,
                         master_rows=2000, params=params).to_dict()
    data["source"]["rows_per_second"] = 1e6  # a backlog: every batch is capped at max_rows_per_batch
    data["source"]["max_rows_per_batch"] = 300
    data["trigger_interval_s"] = trigger_s  # HYBRIDJOIN: a slice takes its batch in, a page comes round, no more
    # (HYBRIDJOIN without riders while the stream goes on, one page a step as in the papers: with them
    # a 300-tuple batch can ride out whole, and a kill on a loaded machine found nothing inside - CI)
    data["steps"][0]["max_queue_time_s"] = None  # tuples wait for MESHJOIN's cycle, however long
    data["sinks"]["matched"] = {"kind": "table", "url": f"sqlite:///{tmp_path / 'facts.db'}", "table": "fact"}
    spec = JobSpec.from_dict(data)
    spec_file = tmp_path / "job.json"
    spec_file.write_text(json.dumps(spec.to_dict()))
    rng = random.Random(11)
    points = list(KILL_POINTS) + [rng.choice(KILL_POINTS) for _ in range(KILLS - len(KILL_POINTS))]
    rng.shuffle(points)
    kills = list(zip(points, sorted(rng.sample(range(3, batches - 2), KILLS))))
    state = StateFiles(tmp_path / "checkpoint" / "sj_state", 10)
    inside = []
    run = {"kills_planned": KILLS, "batches": batches, "batch_rows": data["source"]["max_rows_per_batch"], "seed": 11, "kills": [],
           "verdict": "incomplete (the test stopped before its end)"}
    for point, batch_id in kills:
        driver = run_until_killed(spec_file, point, batch_id)
        kept = state.read(0, batch_id + 1)
        run["kills"].append({"point": point, "batch_id": batch_id, "exit": driver.returncode,
                             "state_batch": None if kept is None else kept[0],
                             "tuples_inside": None if kept is None else kept[1].num_rows})
        record_kills(algorithm, run)
        assert driver.returncode == -signal.SIGKILL, (point, batch_id, driver.returncode)
        assert kept is not None and kept[0] == (batch_id if point == "state" else batch_id - 1), (point, batch_id)
        inside.append(kept[1].num_rows)
    assert min(inside) > 0  # every kill left tuples inside the join: they survive in the state

    second = start_driver(spec_file)
    try:
        out, _ = second.communicate(timeout=600)
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    assert second.returncode == 0, out[-2000:]
    summary = driver_summary(out)
    rows = sqlite3.connect(tmp_path / "facts.db").execute(f"SELECT sj_id, tid, nk, {', '.join(SELECT)} FROM fact").fetchall()
    matched = pa.table({name: [r[i] for r in rows] for i, name in enumerate(["sj_id", "tid", "nk", *SELECT])})
    dead = read_parquet_sink(spec.sinks.dead_letter.path)
    left = Counter([int(t) for t in matched["tid"].to_pylist()] + [int(i) for i in dead["sj_id"].to_pylist()])
    tids = zipf_rows(0, spec.source.total_rows, spec.source.master_rows, missing=spec.source.missing,
                      seed=spec.source.seed)["tid"].to_pylist()
    run["final"] = {"input_tuples": len(tids), "fact_rows": matched.num_rows, "dead_letters": dead.num_rows,
                    "distinct_out": len(left), "duplicates": sum(1 for n in left.values() if n > 1),
                    "lost": sum(1 for t in tids if left[t] == 0), "stopped_by": summary["stopped_by"]}
    run["verdict"] = "the oracle's assertions failed"
    record_kills(algorithm, run)
    assert (summary["stopped_by"], summary["drained"], summary["queue_tuples"]) == ("end_of_input", "end_of_input", 0)
    assert len(set(matched["sj_id"].to_pylist())) == matched.num_rows  # no tuple twice
    assert_sinks_equal_oracle(store, spec, matched=matched)
    run["verdict"] = "exactly once: the sinks equal the oracle"
    record_kills(algorithm, run)
