"""A stop arriving while Spark plans the next micro-batch ends the query cleanly: exit 0, no
ERROR, no Python traceback and no Java stack trace in the driver's log, and every tuple of the micro-batches it took is in
the sinks exactly once.

The driver runs in its own process (its JVM's log is the process's stderr), started by a small
launcher that registers a real Spark source before the driver's ``main``: the built-in
generator whose planning of the fourth micro-batch (``latestOffset``) requests the stop (the
job's stop file) and then takes a second and a half - so the stop is seen while Spark plans."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

from spark_jobs import assert_sinks_equal_oracle, driver_summary, generator_job, write_master

from airflow_provider_semijoin.core.progress import parse_line
from airflow_provider_semijoin.spark.sinks import read_parquet_sink
from airflow_provider_semijoin.job.spec import JobSpec

BATCH_ROWS = 300

LAUNCHER = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    from airflow_provider_semijoin.spark import driver
    from airflow_provider_semijoin.spark.session import get_spark
    from airflow_provider_semijoin.workloads.stream import generator_data_source

    generator = generator_data_source()

    class SlowPlanning(generator):
        @classmethod
        def name(cls):
            return "slow_planning_generator"

        def streamReader(self, schema):
            inner = super().streamReader(schema)
            stop_file, at_row = Path(self.options["stop_file"]), int(self.options["at_row"])
            latest = inner.latestOffset

            def planned(start, limit):
                if start["row"] >= at_row and not stop_file.exists():
                    stop_file.touch()  # the stop, while Spark plans this micro-batch
                    time.sleep(1.5)
                return latest(start, limit)

            inner.latestOffset = planned
            return inner

    get_spark("local[2]", app_name="semijoin-stop").dataSource.register(SlowPlanning)
    sys.exit(driver.main(sys.argv[1:]))
''')


def test_a_stop_while_spark_plans_the_next_batch_ends_without_an_error(tmp_path, sqlite_backend):
    store = write_master(sqlite_backend, 400)
    data = generator_job(tmp_path, sqlite_backend.url, store.table, total_rows=None, stop={"duration_s": 240}).to_dict()
    data["source"]["max_rows_per_batch"] = BATCH_ROWS
    generator, generated = JobSpec.from_dict(data).source, dict(data["source"])
    stop_file = tmp_path / "stop"
    data["source"] = {"kind": "spark", "format": "slow_planning_generator", "id_column": "tid", "options": {
        "settings": json.dumps(generator.settings()), "stop_file": str(stop_file), "at_row": 3 * BATCH_ROWS}}
    data["stop"] = {"stop_file": str(stop_file)}
    data["trigger_interval_s"] = 0.05
    spec = JobSpec.from_dict(data)
    spec_file, launcher = tmp_path / "job.json", tmp_path / "launch.py"
    spec_file.write_text(json.dumps(spec.to_dict()))
    launcher.write_text(LAUNCHER)
    with open(tmp_path / "driver.log", "w+") as log:
        driver = subprocess.Popen([sys.executable, str(launcher), "--spec", str(spec_file)], stdout=subprocess.PIPE,
                                  stderr=log, text=True, start_new_session=True,
                                  env={**os.environ, "PYSPARK_PYTHON": sys.executable})
        try:
            out, _ = driver.communicate(timeout=300)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
        log.seek(0)
        stderr = log.read()
    assert driver.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr and "ERROR" not in stderr and "\tat org.apache" not in stderr, stderr[-3000:]
    assert stop_file.exists()
    summary = driver_summary(out)
    assert summary["stopped_by"] == "stop_file"
    batches = [parse_line(line)["input_rows"] for line in out.splitlines() if parse_line(line)]
    took = summary["input_rows"]
    assert took == sum(batches) >= 3 * BATCH_ROWS
    written = read_parquet_sink(spec.sinks.matched.path).num_rows + read_parquet_sink(spec.sinks.dead_letter.path).num_rows
    assert written == took  # R's key is unique: one row per tuple
    data.update(source={**generated, "total_rows": took}, stop={"end_of_input": True})  # the tuples it took
    assert_sinks_equal_oracle(store, JobSpec.from_dict(data))
