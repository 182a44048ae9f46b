"""partitions = 2 on a real standalone cluster (a master and two workers of one core each,
started with spark-class): the packaged driver through spark-submit, one executor per worker,
each part on its own key range of R; the sinks equal the oracle. And the range partitioner's
cuts: key ranges that tile R and stay put while the stream's key distribution does."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from spark_jobs import assert_sinks_equal_oracle, generator_job, write_master

from airflow_provider_semijoin.core.progress import parse_line
from airflow_provider_semijoin.spark.driver import driver_path
from airflow_provider_semijoin.spark.partitioned import RangePartitioner
from airflow_provider_semijoin.job.spec import JobSpec
from airflow_provider_semijoin.spark.standalone import spark_env, spark_home, standalone_cluster
from airflow_provider_semijoin.workloads.zipf import zipf_rows


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cluster")
    with standalone_cluster(folder, workers=2, cores=1) as (url, _):
        yield url, folder


def submit(url: str, spec, folder) -> subprocess.CompletedProcess:
    spec_file = folder / "job.json"
    spec_file.write_text(json.dumps(spec.to_dict()))
    return subprocess.run(
        [f"{spark_home()}/bin/spark-submit", "--master", url, "--conf", "spark.executor.memory=512m",
         "--conf", "spark.executor.cores=1", "--conf", "spark.cores.max=2",
         "--conf", f"spark.executorEnv.PYSPARK_PYTHON={sys.executable}", driver_path(), "--spec", str(spec_file),
         "--summary", str(folder / "summary.json")],
        env=spark_env(), capture_output=True, text=True, timeout=400,
    )


@pytest.mark.mysql
@pytest.mark.parametrize("algorithm, backend_name", [  # the first tier runs one; the other in the acceptance tier
    pytest.param("hybridjoin", "mysql_backend", marks=pytest.mark.acceptance), ("ssij", "sqlite_backend")])
def test_two_parts_on_two_workers_are_exact(two_workers, tmp_path, request, algorithm, backend_name):
    url, cluster_folder = two_workers
    backend = request.getfixturevalue(backend_name)
    store = write_master(backend, 1000)
    spec = generator_job(tmp_path, backend.url, store.table, algorithm=algorithm, total_rows=4000, master_rows=1000,
                         partitions=2, memory="2M", params={"page_rows": 50})
    data = spec.to_dict()
    data["source"]["max_rows_per_batch"] = 1500  # three micro-batches at least
    spec = JobSpec.from_dict(data)
    done = submit(url, spec, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [parse_line(line) for line in done.stdout.splitlines() if parse_line(line)]
    summary = json.loads((tmp_path / "summary.json").read_text())  # whole: the JVM's log may run into the line
    assert summary["input_rows"] == 4000 == sum(r["input_rows"] for r in records) and len(records) >= 3
    assert [r["part_rebuilds"] for r in records] == [0] * len(records)  # each part's state found where it was left
    assert_sinks_equal_oracle(store, spec)
    app = max((cluster_folder / "work").glob("app-*"))  # this run's application: an executor on each worker
    assert list(app.iterdir()) and list((cluster_folder / "work1" / app.name).iterdir())


def test_key_ranges_tile_r_and_agree_with_the_parts_tuples_go_to(sqlite_backend):
    store = write_master(sqlite_backend, 4000)
    partitioner = RangePartitioner(store, 3, page_rows=100)
    stream = zipf_rows(0, 30_000, 4000, exponent=1.0, shape="noperm", seed=5)["nk"]
    cuts = []
    for at in range(0, 30_000, 5000):
        parts = partitioner.assign(stream[at : at + 5000])
        cuts.append(partitioner.cuts.tolist())
        ranges = partitioner.key_ranges()
        assert ranges[0][0] is None and ranges[-1][1] is None
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # they tile R, page-aligned
        assert all(r[0] in partitioner.page_map.bounds for r in ranges[1:])
        keys = stream[at : at + 5000].to_numpy()
        for part, (lo, hi) in enumerate(ranges):
            mine = keys[parts == part]
            assert ((lo is None or (mine >= lo).all()) and (hi is None or (mine < hi).all()))
    assert cuts[0] != RangePartitioner(store, 3, page_rows=100).cuts.tolist()  # the first keys cut at once (not every page alike)
    assert all(c == cuts[0] for c in cuts[1:])  # then stays: the same distribution, no rebuilt parts
    assert cuts[0][0] == 1  # the hot first page alone (about 59% of the tuples) is part 0
