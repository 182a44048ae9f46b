"""``partitions: N`` is exact on any keys (issue 54): a two-step surrogate-key job - gappy integer
keys, string keys, unknown keys in R's gaps and below and above its range, null keys, keys R
cannot hold - over N parts, with the cut points moving as the hot range moves, parts whose
worker lost them, crashes with and without a replay of the batch, and tuples held for a retry.

The parts run in this process (``BatchProcessor(..., spark=None)``): the driver's routing and
state, and the requests of each call through :func:`..spark.partitioned.serve` - the function
Spark's tasks run - as its tasks would get them. Every tuple leaves exactly once, as
the oracle (:func:`..core.oracle.hash_join`, a plain hash join of each dimension) says.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.core.joins.registry import ALGORITHMS
from airflow_provider_semijoin.core.oracle import hash_join
from airflow_provider_semijoin.core.stores import store_for
from airflow_provider_semijoin.job.spec import JobSpec
from airflow_provider_semijoin.spark import partitioned
from airflow_provider_semijoin.spark.partitioned import RangePartitioner
from airflow_provider_semijoin.spark.joinstate import StateFiles
from airflow_provider_semijoin.spark.runner import BatchProcessor
from airflow_provider_semijoin.spark.sinks import read_parquet_sink
from spark_jobs import Clock, close_parts_held_here, killed_then_finished, pyspark_workers, run_driver

UNKNOWN = -1  # the unknown member's surrogate key, on both steps
GRACE_S = 2.5  # retry: how long a tuple whose product is unknown waits for it




def dimensions(backend, seed: int, n_customers: int, n_products: int) -> tuple[np.ndarray, list[str], tuple[str, str]]:
    """R_customer: gappy integer keys from 1000 on; R_product: string keys ``P-<digits>``; and
    the two tables' names."""
    rng = np.random.default_rng(seed)
    customers = np.sort(1000 + np.cumsum(rng.integers(1, 60, n_customers)))
    products = sorted({f"P-{d:0{rng.integers(3, 7)}d}" for d in rng.integers(0, 10**6, n_products)})
    customer = backend.make_master(pa.table({"cust_nk": pa.array(customers, pa.int64()),
                                             "customer_sk": pa.array(np.arange(1, len(customers) + 1), pa.int64())}), "cust_nk")
    product = backend.make_master(pa.table({"prod_nk": pa.array(products, pa.string()),
                                            "product_sk": pa.array(np.arange(1, len(products) + 1), pa.int64())}), "prod_nk")
    return customers, products, (customer.table, product.table)


def stream_batch(rng, first: int, n: int, customers: np.ndarray, products: list[str], hot: float, now: float) -> pa.Table:
    """``n`` tuples: most customers from a hot range around quantile ``hot`` of R (it moves:
    the cut points follow), 4% unknown in R's gaps, below and above its range, some null;
    products from R, unknown, too long for R, with a NUL byte, empty or null."""
    k = len(customers)
    if k:
        centre = int(hot * (k - 1))
        near = customers[np.clip(centre + rng.integers(-k // 20 - 1, k // 20 + 2, n), 0, k - 1)]
        anywhere = customers[rng.integers(0, k, n)]
        cust = np.where(rng.random(n) < 0.7, near, anywhere)
    else:
        cust = rng.integers(0, 5000, n)
    unknown = rng.random(n) < 0.04
    odd = np.stack([rng.integers(-10**6, 1000, n), rng.integers(int(cust.max(initial=0)) + 1, 2**62, n),
                    np.maximum(cust - 1, 0)])[rng.integers(0, 3, n), np.arange(n)]  # below, above, in a gap (or in R)
    cust = np.where(unknown, odd, cust)
    cust_nk = pa.array(cust, pa.int64(), mask=rng.random(n) < 0.03)
    strange = ["P-x", "A-1", "P-" + "9" * 40, "P-\x001", "", "zzz"]
    prod = [products[i] if products and r > 0.1 else (None if r < 0.03 else strange[i % len(strange)])
            for i, r in zip(rng.integers(0, max(len(products), 1), n), rng.random(n))]
    return pa.table({"tid": pa.array(np.arange(first, first + n), pa.int64()), "cust_nk": cust_nk,
                     "prod_nk": pa.array(prod, pa.string()), "sj_arrival": pa.array(np.full(n, now))})


def job(tmp_path, url: str, tables: tuple[str, str], algorithms: tuple[str, str], parts: int, page_rows: tuple[int, int],
        retry: bool, end_of_input: bool = False, data_path: str = "auto") -> JobSpec:
    """The landing folder -> customer (unknown member) -> product (dead letter, or retry) -> sinks."""
    def params(name: str, rows: int) -> dict:
        return {"page_rows": rows} if "page_rows" in ALGORITHMS[name].params else {}

    missing = {"on_missing": "retry", "retry_grace_s": GRACE_S} if retry else {"on_missing": "dead_letter"}
    return JobSpec.from_dict({
        "source": {"kind": "files", "path": str(tmp_path / "landing"), "format": "parquet", "id_column": "tid",
                   "max_files_per_trigger": 1},
        "steps": [
            {"column": "cust_nk", "master": {"url": url, "table": tables[0], "key": "cust_nk", "select": ["customer_sk"]},
             "algorithm": algorithms[0], "memory": "1M", "master_static": True, "max_queue_time_s": None,
             "on_missing": "unknown_member", "unknown_member": {"customer_sk": UNKNOWN}, "params": params(algorithms[0], page_rows[0])},
            {"column": "prod_nk", "master": {"url": url, "table": tables[1], "key": "prod_nk", "select": ["product_sk"]},
             "algorithm": algorithms[1], "memory": "1M", "master_static": True, "max_queue_time_s": None,
             **missing, "params": params(algorithms[1], page_rows[1])},
        ],
        "sinks": {"matched": {"path": str(tmp_path / "matched")}, "dead_letter": {"path": str(tmp_path / "dead")}},
        "checkpoint": str(tmp_path / "checkpoint"), "stop": {"end_of_input": end_of_input}, "trigger_interval_s": 1.0,
        "partitions": parts, "work_ahead": False, "data_path": data_path,
    })


def expected(backend, tables: tuple[str, str], stream: pa.Table) -> tuple[dict, dict]:
    """The oracle: ``tid -> (customer_sk, product_sk)`` of the matched sink and ``tid -> (step,
    reason)`` of the dead letter. A customer not in R or null takes the unknown member; a
    product not in R, null or bad goes to the dead letter (at once, or after the retry's grace)."""
    tids = stream["tid"].to_pylist()

    def one_step(table: str, column: str) -> tuple[dict, dict]:
        store = store_for(backend.connection, table, column)
        matched, unmatched = hash_join(store, stream, column)
        return {tids[i]: row[0] for i, row in matched}, {tids[i]: reason for i, reason in unmatched}

    customer, customer_missing = one_step(tables[0], "cust_nk")
    product, product_missing = one_step(tables[1], "prod_nk")
    rows, dead = {}, {}
    for tid in tids:
        if customer_missing.get(tid) == "bad_key":
            dead[tid] = (0, "bad_key")
        elif tid in product_missing:
            dead[tid] = (1, product_missing[tid])
        else:
            rows[tid] = (customer.get(tid, UNKNOWN), product[tid])
    return rows, dead


def sinks(spec: JobSpec) -> tuple[dict, dict, int]:
    matched, dead = read_parquet_sink(spec.sinks.matched.path), read_parquet_sink(spec.sinks.dead_letter.path)
    rows = {t: (c, p) for t, c, p in zip(matched["tid"].to_pylist(), matched["customer_sk"].to_pylist(),
                                          matched["product_sk"].to_pylist())} if matched.num_rows else {}
    left = {int(i): (s, r) for i, s, r in zip(dead["sj_id"].to_pylist(), dead["step"].to_pylist(),
                                              dead["reason"].to_pylist())} if dead.num_rows else {}
    return rows, left, matched.num_rows + dead.num_rows


# after a batch: nothing; a step's parts lost (by part number: their worker went away); a crash, then the
# next batch (Spark had committed this one) or this one again
EVENTS = st.one_of(st.just(("none",)), st.tuples(st.just("lose_part"), st.integers(0, 1), st.sets(st.integers(0, 3), min_size=1)),
                   st.tuples(st.sampled_from(["crash", "crash_replay"])))
BATCHES = st.lists(st.tuples(st.integers(0, 300), st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]), EVENTS), min_size=1, max_size=7)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**16), parts=st.integers(1, 4), other=st.sampled_from(sorted(ALGORITHMS)),
       sizes=st.tuples(st.integers(0, 3500), st.integers(0, 2500)),
       page_rows=st.tuples(st.integers(8, 200), st.integers(4, 100)), cut_page_rows=st.integers(8, 200), retry=st.booleans(),
       batches=BATCHES)
@example(seed=0, parts=2, other="cachejoin", sizes=(33, 1), page_rows=(8, 4), cut_page_rows=16, retry=False,
         batches=[(5, 0.0, ("none",)), (1, 0.0, ("crash",))])  # cachejoin: restored tuples went to their parts before the crash
def test_every_tuple_leaves_once_on_any_keys_at_any_partitions(tmp_path_factory, sqlite_backend, monkeypatch, algorithm, seed,
                                                                parts, other, sizes, page_rows, cut_page_rows, retry, batches):
    """``algorithm`` joins the customers, ``other`` the products."""
    tmp_path = tmp_path_factory.mktemp("parts")
    monkeypatch.setattr(partitioned, "CUT_PAGE_ROWS", cut_page_rows)  # many cut points over a small R
    backend = sqlite_backend
    try:
        customers, products, tables = dimensions(backend, seed, *sizes)
        spec = job(tmp_path, backend.url, tables, (algorithm, other), parts, page_rows, retry)
        clock = Clock()
        rng = np.random.default_rng(seed)
        processor = BatchProcessor(spec, None, False, clock)
        streamed, first = [], 0
        for batch_id, (n, hot, (happens, *lost)) in enumerate(batches):
            batch = stream_batch(rng, first, n, customers, products, hot, clock.now)
            streamed.append(batch)
            first += n
            cuts = [s.partitioned.partitioner.cuts for s in processor.steps if s.partitioned is not None]
            processor.process(batch, batch_id)
            if any(not np.array_equal(a, s.partitioned.partitioner.cuts) for a, s in zip(cuts, processor.steps)):
                event("the cut points moved")
            event(happens)
            if happens == "lose_part" and parts > 1:  # the worker that held them went away
                step, numbers = lost
                for part in numbers:
                    held = partitioned._PARTS.pop((processor.steps[step].partitioned.step_json, part), None)
                    if held is not None:
                        held[1].algorithm.store.close()
            elif happens.startswith("crash"):
                processor = BatchProcessor(spec, None, False, clock)  # the old one's memory is lost
                if happens == "crash_replay":
                    processor.process(batch, batch_id)  # Spark had not committed it
            clock.now += 1.0
        processor.request_drain("end_of_input")
        for batch_id in range(len(batches), len(batches) + 5):  # drained; a tuple held for a retry waits out its grace
            processor.process(stream_batch(rng, first, 0, customers, products, 0.0, clock.now), batch_id)
            clock.now += 1.0
        assert processor.drained == "end_of_input"
        assert all(s.carried.count == 0 and s.held is None for s in processor.steps)
        rows, dead = expected(backend, tables, pa.concat_tables(streamed))
        got_rows, got_dead, n_out = sinks(spec)
        assert n_out == first  # each tuple once (a tuple twice would be counted twice)
        assert got_rows == rows
        assert got_dead == dead
    finally:
        close_parts_held_here()


def landing_folder(tmp_path, customers, products) -> list[pa.Table]:
    """Six landing files of 700 tuples, the hot range moving from file to file (the cut points
    follow): low in R for three files, then high."""
    landing = tmp_path / "landing"
    landing.mkdir()
    rng = np.random.default_rng(7)
    streamed = [stream_batch(rng, 700 * day, 700, customers, products, hot, 0.0).drop_columns(["sj_arrival"])
                for day, hot in enumerate([0.1, 0.2, 0.15, 0.9, 0.95, 0.5])]
    for day, batch in enumerate(streamed):
        pq.write_table(batch, landing / f"day{day}.parquet")
    return streamed


def assert_exact(backend, tables, spec: JobSpec, streamed: list[pa.Table]) -> None:
    rows, dead = expected(backend, tables, pa.concat_tables(streamed))
    got_rows, got_dead, n_out = sinks(spec)
    assert n_out == sum(t.num_rows for t in streamed)  # each tuple once
    assert got_rows == rows
    assert got_dead == dead
    assert {reason for _, reason in dead.values()} == {"not_in_master", "null_key", "bad_key"}


@pytest.mark.parametrize("data_path", ["driver", "executors"])
@pytest.mark.parametrize("parts", [2, 4])
@pytest.mark.parametrize("algorithms", [("cachejoin-pq", "ssij"), ("meshjoin", "hybridjoin-pq")])
def test_the_surrogate_key_job_over_a_landing_folder_is_exact_at_partitions_n(spark, tmp_path, sqlite_backend, parts,
                                                                               algorithms, data_path):
    """The job of issue 54 through Spark: two steps over SQLite dimensions, one landing file a
    micro-batch, the hot range moving from file to file; the parts' rebuilding calls were sent a
    null product key and the micro-batch failed ('carried tuples have keys that cannot be in R').
    ``executors`` (what ``auto`` chooses for it): each step's parts on the executors, the
    customer step's rows passed on to the product step's parts through files."""
    from airflow_provider_semijoin.spark.runner import run_job

    customers, products, tables = dimensions(sqlite_backend, 7, 3000, 800)
    streamed = landing_folder(tmp_path, customers, products)
    spec = job(tmp_path, sqlite_backend.url, tables, algorithms, parts, (50, 20), retry=False, end_of_input=True,
               data_path=data_path)
    records = []
    summary = run_job(spec, spark=spark, on_progress=records.append)
    assert summary["input_rows"] == 4200 and summary["batches"] >= 6
    assert_exact(sqlite_backend, tables, spec, streamed)
    state = tmp_path / "checkpoint" / "sj_state"
    flows = sorted(p.name for p in (state / "flow").glob("step=0/batch=*/*"))  # the last batch's
    owners = [] if data_path == "driver" else [
        p for p, cut in enumerate(json.loads((state / "parts" / "executor_parts.json").read_text())["ranges"]) if cut is not None]
    assert flows == [f"part-{p}.parquet" for p in owners] and (data_path == "driver" or len(owners) > 1)
    assert {len(r["master_versions"]) for r in records} == {2}  # each step its own version of R


@pytest.mark.timeout(900)
def test_the_job_restarted_after_a_kill_sends_the_carried_tuples_to_the_parts_of_its_own_cut_points(tmp_path, sqlite_backend):
    """The driver killed once batch 3's state is written, before Spark commits it: the restarted
    driver (its cut points start anew) replays batch 3 from the state after batch 2, whose
    tuples were assigned to parts by the first driver's cuts, moved since by the hot range; a
    tuple sent to the part of its old cut left not_in_master though its key is in R."""
    customers, products, tables = dimensions(sqlite_backend, 7, 20_000, 800)  # 20 pages of the cut points
    streamed = landing_folder(tmp_path, customers, products)
    spec = job(tmp_path, sqlite_backend.url, tables, ("meshjoin", "hybridjoin-pq"), 2, (50, 20), retry=False,
               end_of_input=True, data_path="driver")
    spec_file = tmp_path / "job.json"
    spec_file.write_text(json.dumps(spec.to_dict()))
    assert run_driver(spec_file, kill="state:3").returncode == -signal.SIGKILL
    _, state = StateFiles(tmp_path / "checkpoint" / "sj_state", 10).read(0, 3)
    fresh = RangePartitioner(store_for(sqlite_backend.connection, tables[0], "cust_nk"), 2, partitioned.CUT_PAGE_ROWS)
    assert (fresh.part_of(state["cust_nk"]) != state["sj_part"].to_numpy()).any()  # the cuts had moved
    assert run_driver(spec_file).returncode == 0
    assert_exact(sqlite_backend, tables, spec, streamed)


def executors_job(tmp_path, sqlite_backend) -> tuple:
    """The job of issue 54 on the executors (``hybridjoin`` customers, ``cachejoin`` products, two
    parts each), each step's parts stepping 2.5 ms a batch while tuples wait: most stay inside,
    carried to the next batch, so a replay must start from each step's state before the batch."""
    customers, products, tables = dimensions(sqlite_backend, 7, 20_000, 800)
    streamed = landing_folder(tmp_path, customers, products)
    spec = job(tmp_path, sqlite_backend.url, tables, ("hybridjoin", "cachejoin"), 2, (50, 20), retry=False,
               end_of_input=True, data_path="executors")
    return tables, streamed, dataclasses.replace(spec, trigger_interval_s=0.01)


def owners(spec: JobSpec) -> int:
    """How many parts, of all the steps, hold a key range."""
    state = Path(spec.checkpoint) / "sj_state"
    return sum(cut is not None for folder in ("parts", "parts-step1")
               for cut in json.loads((state / folder / "executor_parts.json").read_text())["ranges"])


@pytest.mark.timeout(900)
def test_the_pipeline_on_the_executors_leaves_each_tuple_once_through_a_killed_driver(tmp_path, sqlite_backend):
    """The driver and its JVM killed after batch 2's parts of both steps wrote their files, before
    their state after it was committed (nor the batch by Spark: it is replayed through both steps,
    each step's parts rebuilt from their state files of batch 1), then before batch 4; a third
    driver ends the stream."""
    tables, streamed, spec = executors_job(tmp_path, sqlite_backend)
    killed_then_finished(spec, tmp_path, ("sinks:2", "batch:4"))
    assert_exact(sqlite_backend, tables, spec, streamed)


def test_the_pipeline_on_the_executors_rebuilds_every_step_s_parts_after_its_python_workers_died(tmp_path, sqlite_backend,
                                                                                                 spark):
    """Every Python worker killed after batch 2 (they held both steps' parts): batch 3 rebuilds
    every part of both steps from its state file, counted once each, and each tuple leaves once."""
    from airflow_provider_semijoin.spark.runner import run_job

    tables, streamed, spec = executors_job(tmp_path, sqlite_backend)
    killed, records = [], []

    def at_point(point: str, batch_id: int) -> None:
        if point == "state" and batch_id == 2:
            killed.extend(pyspark_workers())
            for pid in killed:
                os.kill(pid, signal.SIGKILL)

    run_job(spec, spark=spark, on_progress=records.append, at_point=at_point)
    assert killed and max(r["queue_tuples"] for r in records[:3]) > 0
    assert records[3]["part_rebuilds"] == owners(spec) >= 3 and sum(r["part_rebuilds"] for r in records) == owners(spec)
    assert_exact(sqlite_backend, tables, spec, streamed)
