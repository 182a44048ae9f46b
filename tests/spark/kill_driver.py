"""The packaged driver that kills itself, for the tests of exactly-once: ``python kill_driver.py
<point>:<batch id> --spec job.json ...`` runs :func:`...spark.driver.main` with a hook that sends
SIGKILL to the driver's whole process group (its JVM too) at that point of that micro-batch
(:class:`...spark.runner.BatchProcessor` names the points)."""

from __future__ import annotations

import os
import signal
import sys

from airflow_provider_semijoin.spark import driver

PATH = __file__


def kill_at(target: str):
    point, batch = target.split(":")

    def at_point(name: str, batch_id: int) -> None:
        if name == point and batch_id == int(batch):
            os.killpg(os.getpgrp(), signal.SIGKILL)

    return at_point


if __name__ == "__main__":
    sys.exit(driver.main(sys.argv[2:], at_point=kill_at(sys.argv[1])))
