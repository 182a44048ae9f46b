"""``semijoin demo --source redis``: the main job with its sales written to a Redis stream (the
local server) by a producer at the demo's rate, read by the pipeline's ``redis_stream`` source."""

from __future__ import annotations

import contextlib
import os
import re
import signal

import pytest
import redis

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.demo import pipeline_spec, redis_source, run_demo
from airflow_provider_semijoin.job.sources import source_from_dict


def test_the_demo_s_redis_source_carries_the_generator_s_columns_and_sales(tmp_path):
    spec = pipeline_spec(4000, 1000, 500, 2000.0)
    source = source_from_dict(redis_source(spec, "semijoin-demo-x"))
    generator = source_from_dict(spec["source"])
    assert source.stream_ddl == generator.stream_ddl  # tid, nk, qty, amount, customer_nk, sold_at, sj_arrival
    assert (source.total_rows, source.max_rows_per_batch, source.tuple_id_column) == (4000, 1000, "tid")
    with pytest.raises(ConfigError, match=r"^demo: --source 'kafka' is not one of \['generator', 'redis'\]$"):
        run_demo(tmp_path, stream_rows=4000, product_rows=1000, customer_rows=500, rows_per_second=2000.0, source="kafka")


@pytest.mark.acceptance
@pytest.mark.timeout(1500)
def test_the_demo_reads_its_sales_from_a_redis_stream_exactly_once(tmp_path, demo_run):
    """At a small size: the run succeeds, every sale leaves once with the customer version valid at
    its time (the demo's own oracle check), and the run's stream is deleted afterwards."""
    demo = demo_run.start(tmp_path / "home", "--source", "redis", "--stream-rows", "4000", "--product-rows", "1000",
                          "--customer-rows", "500", "--rate", "2000")
    try:
        out, _ = demo.communicate(timeout=1200)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(demo.pid, signal.SIGKILL)
    assert demo.returncode == 0, out[-3000:]
    stream = re.search(r"through Redis stream (semijoin-demo-\w+) at redis://127\.0\.0\.1:6379/0", out).group(1)
    assert re.search(r"^input    4,000 sales$", out, re.M)
    assert re.search(r"^check    exactly once against the as-of oracle .*: yes \(lost 0, duplicated 0, wrong keys 0", out, re.M)
    assert redis.Redis().exists(stream) == 0
