"""A semi-join DAG for the monitor's browser test: a real join that publishes contract C's XComs.

Stands in for the provider's operators until they land: ``live_join`` joins a generated stream
with a SQLite master table through the engine (``core.runner.run_join``), one micro-batch per
``trigger_s`` like a Spark trigger, for ``duration_s`` seconds, and after every micro-batch pushes
the progress record and the bounded history through the task runtime (``ti.xcom_push``).

The stream: Zipf-skewed keys (exponent 1, 2% absent from the master) arriving in self-similar
bursts (HYBRIDJOIN appendix) at ``rate`` tuples/s on average. A micro-batch takes the tuples that
arrived since the previous one; the engine measures each tuple's latency from its arrival to its
completion and counts a deadline miss past ``max_latency_s``. One CACHEJOIN serves the whole
run, so its cache of master rows carries over from batch to batch.
"""

from __future__ import annotations

import pendulum

from airflow.sdk import DAG, get_current_context, task

ALGORITHM = "cachejoin"
MASTER_ROWS = 50_000
MEMORY_BYTES = 128 << 10  # about 2% of the master table


@task
def live_join(duration_s: float, master_db: str, rate: float, trigger_s: float = 1.0, max_latency_s: float = 1.5):
    import time

    import numpy as np

    from airflow_provider_semijoin.core.joins import create, describe
    from airflow_provider_semijoin.core.progress import (
        XCOM_HISTORY,
        XCOM_INFO,
        XCOM_LATEST,
        ProgressHistory,
        ProgressRecord,
    )
    from airflow_provider_semijoin.core.runner import run_join
    from airflow_provider_semijoin.core.stores import open_store
    from airflow_provider_semijoin.workloads import bursty_arrivals, generate_master, zipf_stream

    ti = get_current_context()["ti"]
    url = f"sqlite:///{master_db}"
    generate_master(url, "product", MASTER_ROWS, seed=0)
    n = int(rate * (duration_s + 2 * trigger_s))
    stream = zipf_stream(n, MASTER_ROWS, exponent=1.0, missing=0.02, seed=1)
    arrival = bursty_arrivals(n, mean_rate=rate, sources=6, seed=2)  # seconds from the start
    with open_store(url, "product", "nk", ["sk", "name"]) as store:
        algorithm = create(ALGORITHM, store, MEMORY_BYTES)  # one for the run: its cache survives batches
        start = algorithm.stats()
        ti.xcom_push(
            XCOM_INFO,
            {
                "algorithm": ALGORITHM,
                "paper": next(a["paper"] for a in describe() if a["name"] == ALGORITHM),
                "params": start["settings"],
                "memory_budget_bytes": MEMORY_BYTES,
                "memory_split": start["memory_split"],
                "master": f"SQLite table product, {MASTER_ROWS:,} rows",
                "stream": f"Zipf exponent 1, 2% absent keys, bursty arrivals at {rate:,.0f} tuples/s",
                "trigger_s": trigger_s,
                "max_latency_s": max_latency_s,
            },
        )
        history = ProgressHistory()
        totals = dict(total_input_rows=0, total_matched=0, total_unmatched=0, total_deadline_misses=0)
        hits, probes = 0, 0
        began = time.time()
        taken = 0
        batch_id = 0
        while time.time() - began < duration_s:
            time.sleep(max(0.0, began + (batch_id + 1) * trigger_s - time.time()))
            upto = int(np.searchsorted(arrival, time.time() - began, side="right"))
            batch = stream.slice(taken, upto - taken)
            arrived = began + arrival[taken:upto]
            run = run_join(algorithm, batch, "nk", clock=time.time, arrival=arrived, max_latency_s=max_latency_s)
            stats = run.stats
            assert stats["exactly_once"]["ok"], stats["exactly_once"]
            batch_probes, batch_hits = stats["cache_probes"] - probes, stats["cache_hits"] - hits
            hits, probes = stats["cache_hits"], stats["cache_probes"]
            totals["total_input_rows"] += batch.num_rows
            totals["total_matched"] += stats["tuples_matched"]
            totals["total_unmatched"] += stats["tuples_unmatched"]
            totals["total_deadline_misses"] += stats["deadline_misses"]
            record = ProgressRecord(
                algorithm=ALGORITHM,
                batch_id=batch_id,
                time=time.time(),
                input_rows=batch.num_rows,
                matched=stats["tuples_matched"],
                unmatched=stats["tuples_unmatched"],
                output_rows=stats["output_rows"],
                service_rate_tps=stats["service_rate_tps"],
                batch_duration_s=stats["wall_s"],
                queue_tuples=algorithm.pending,  # 0: each micro-batch is drained before the next
                peak_queue_tuples=batch.num_rows,  # all of them waited in the buffer at the trigger
                cache_hit_ratio=round(batch_hits / batch_probes, 4) if batch_probes else None,
                disk_queries=stats["disk_queries"],
                disk_rows=stats["disk_rows"],
                latency_ms_p50=stats["latency_ms_p50"],
                latency_ms_p99=stats["latency_ms_p99"],
                deadline_misses=stats["deadline_misses"],
                memory_bytes=algorithm.structure_bytes(),
                unmatched_by_reason=stats["unmatched_by_reason"],
                master_versions=[stats["master_version"]],
                **totals,
            ).to_dict()
            history.append(record)
            ti.xcom_push(XCOM_LATEST, record)
            ti.xcom_push(XCOM_HISTORY, history.to_dict())
            taken = upto
            batch_id += 1
    return totals


@task
def summary():
    """Runs after the join: reads its last record back from XCom (its tab is empty until then)."""
    from airflow_provider_semijoin.core.progress import XCOM_LATEST

    latest = get_current_context()["ti"].xcom_pull(task_ids="live_join", key=XCOM_LATEST)
    return {
        "batches": latest["batch_id"] + 1,
        "input": latest["total_input_rows"],
        "unmatched": latest["total_unmatched"],
    }


with DAG(
    "semijoin_live_demo",
    schedule=None,
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    params={"duration_s": 40.0, "master_db": "", "rate": 5_000.0},
    render_template_as_native_obj=True,
    tags=["semijoin"],
):
    live_join(
        duration_s="{{ params.duration_s }}", master_db="{{ params.master_db }}", rate="{{ params.rate }}"
    ) >> summary()
