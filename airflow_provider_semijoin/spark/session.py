"""Spark sessions for the streaming runner (NOTES-platform.md: Python workers need this venv)."""

from __future__ import annotations

import os
import sys

from .install_check import check_pyspark

DEFAULT_MASTER = "local[2]"
# Rows per Arrow batch when a micro-batch is collected to the driver (``toArrow``) and fed to Python
# tasks (Spark's default: 10,000). Measured with the Spark bench's CACHEJOIN pipeline (1M-tuple
# micro-batches, 2 runs each): Spark's JVM 0.61-0.65 -> 0.44 us of CPU a tuple, Spark's part of a
# micro-batch 0.84 -> 0.69 s, 610k-627k -> 664k-688k tuples/s.
ARROW_BATCH_ROWS = 250_000

# A task's result up to this size goes back with its status, not through the block manager (a
# fetch more per task): ``partitions = N``'s tasks return their parts' output, a few MB each.
DIRECT_RESULT_BYTES = "64m"

# Executors talk to their Python workers over Unix domain sockets, not TCP over loopback (Spark
# 4.1+). A Python task that does nothing ran 43-55 ms in its executor over TCP, against a job of
# 27 ms without Python; a job of two such tasks on the partitions bench's cluster took 87 ms,
# over Unix domain sockets 47 ms (median of 30): ``partitions = N`` pays one a micro-batch. Only
# sessions for ``partitions`` > 1 use them: over a Unix domain socket, a reused Python worker whose
# executor closes it at a stop fails to flush what it had buffered (EPIPE, where TCP takes the
# write), and PySpark's daemon prints that BrokenPipeError's traceback into the driver's log
# (``tests/spark/test_stop.py`` caught one in a CI run; a small job then stopped: 1 run in 4, 0 of 4 over TCP).
def unix_domain_sockets(partitions: int) -> str:
    """``spark.python.unix.domain.socket.enabled`` for a job of ``partitions`` parts."""
    return "true" if partitions > 1 else "false"


def python_environment() -> dict[str, str]:
    """Workers and the driver must run this interpreter, or they lack pyarrow and this package."""
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def submitted_conf() -> dict[str, str]:
    """What ``spark-submit`` set (its ``--conf``, ``spark-defaults.conf``) when it launched this
    process ({} otherwise): the JVM it started holds them as system properties."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return {}
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to the JVM spark-submit started
    return dict(SparkConf().getAll())


def get_spark(master: str | None = None, app_name: str = "semijoin", conf: dict | None = None, partitions: int = 1):
    """The active session, or a new one on ``master`` (default ``local[2]``) for jobs of
    ``partitions`` parts; first checks that pyspark is whole (:func:`.install_check.check_pyspark`).
    The product's defaults below give way to what ``spark-submit`` was told (a user's ``--conf``,
    the hook's ``conf`` on a cluster) and to ``conf``."""
    check_pyspark()
    os.environ.update(python_environment())
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit, which sets the master
        builder = builder.master(DEFAULT_MASTER)
    defaults = {
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": str(ARROW_BATCH_ROWS),
        "spark.python.worker.reuse": "true",
        "spark.python.unix.domain.socket.enabled": unix_domain_sockets(partitions),
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.sql.streaming.stopTimeout": "60s",
        "spark.task.maxDirectResultSize": DIRECT_RESULT_BYTES,
    }
    submitted = submitted_conf()
    for key, value in {**{k: v for k, v in defaults.items() if k not in submitted}, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
