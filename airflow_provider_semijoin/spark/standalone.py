"""A real Spark standalone cluster on this machine: a master and N workers started with
``spark-class`` from the pip ``pyspark`` package (it has no ``sbin/start-*.sh``), on free
ports, stopped by the process groups it started. The tests and the partitions measurement run
``spark-submit`` (or a session) against it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

START_TIMEOUT_S = 60  # for the master, and again per worker


def spark_home() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_env() -> dict:
    """The environment of spark-class / spark-submit: this interpreter for the Python workers."""
    return {**os.environ, "SPARK_HOME": spark_home(), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}


def start_daemon(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen([f"{spark_home()}/bin/spark-class", *args], env=spark_env(), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def master_state(ui_port: int) -> dict | None:
    """The master's state from its UI, None while it cannot say: not listening yet, or - seen on
    a loaded machine, a page before the master is up - answering with something not JSON."""
    try:
        return json.load(urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2))
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def standalone_cluster(folder: Path, workers: int = 1, cores: int = 2, memory: str = "1g"):
    """Yields ``(master URL, master UI port)`` once ``workers`` workers have registered; the
    daemons' logs and work folders (``work``, ``work1``...) are under ``folder``."""
    port, master_ui = free_port(), free_port()
    daemons = [start_daemon(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                        "--webui-port", str(master_ui)], folder / "master.log")]
    url = f"spark://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while master_state(master_ui) is None and time.monotonic() < deadline:
            time.sleep(0.5)
        for i in range(workers):
            daemons.append(start_daemon(
                ["org.apache.spark.deploy.worker.Worker", "--cores", str(cores), "--memory", memory,
                 "--webui-port", str(free_port()), "--work-dir", str(folder / f"work{i or ''}"), url],
                folder / f"worker{i or ''}.log"))
        deadline = time.monotonic() + START_TIMEOUT_S * workers
        while time.monotonic() < deadline:
            if (master_state(master_ui) or {}).get("aliveworkers", 0) >= workers:
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"the standalone workers did not register: {(folder / 'worker.log').read_text()[-2000:]}")
        yield url, master_ui
    finally:
        for daemon in daemons:
            os.killpg(daemon.pid, signal.SIGTERM)
        for daemon in daemons:
            daemon.wait(timeout=30)
