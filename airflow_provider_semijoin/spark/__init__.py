"""Spark Structured Streaming runner for the join engine (imports pyspark lazily).

Its public surface is what the Airflow layer may use (tests/test_packaging.py holds it so):
:func:`run_job`, which runs a :class:`~..job.spec.JobSpec` in a Spark session. It is imported
when first asked for, so importing this package (the hooks do where DAGs are parsed; the driver
and the executors' Python workers do) loads none of the runtime. What the Airflow layer knows
of a job without running it is the job spec's (:mod:`..job`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .runner import run_job

__all__ = ["run_job"]


def __getattr__(name: str):
    if name == "run_job":
        from .runner import run_job

        return run_job
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
