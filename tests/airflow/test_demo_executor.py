"""The demo's executor (:mod:`airflow_provider_semijoin.demo_executor`): its end stops every
worker even when one can no longer take its stop message - real worker processes, one of them
frozen with SIGSTOP (alive, never reading the queue again), where Airflow's own ``end()`` joins
it forever."""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from airflow_provider_semijoin import demo_executor
from airflow_provider_semijoin.demo_executor import EndingLocalExecutor


@pytest.mark.timeout(120)  # Airflow's own LocalExecutor.end() never returns here: the timeout fails the test
def test_the_demo_executor_ends_every_worker_when_one_cannot_take_its_stop_message(monkeypatch):
    monkeypatch.setattr(demo_executor, "END_WAIT_S", 2.0)
    executor = EndingLocalExecutor(parallelism=2)
    executor.start()
    pids = [proc.pid for proc in executor.workers.values()]
    assert len(pids) == 2
    os.kill(pids[0], signal.SIGSTOP)
    executor.end()
    alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert alive == []
