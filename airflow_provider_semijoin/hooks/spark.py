"""Spark from the Spark connection: in-process local Spark, or ``spark-submit`` to a cluster.

The connection is Airflow's ``spark`` type (apache-spark provider); its master is read the way
:class:`SparkSubmitHook` reads it (``host`` holding a full master URL such as ``local[2]``,
``yarn`` or ``k8s://https://h:443``, or ``spark://host:port`` from a URI). A master ``local``
or ``local[...]``, or no connection at all, runs the job in the task's own process
(:meth:`SemiJoinSparkHook.get_session`); any other master (``spark://``, ``yarn``, ``k8s://``)
runs the packaged driver through :class:`SparkSubmitHook` (:meth:`SemiJoinSparkHook.submit`),
whose output lines are handed to a callback as they come. SparkSubmitHook comes with the optional
extra ``spark-submit`` (apache-airflow-providers-apache-spark), imported only for such a master:
in-process Spark needs pyspark alone. The hook checks that pyspark is whole before any work
(:func:`..spark.install_check.check_pyspark`).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from ..config import option, work_folder
from ..core.errors import ConfigError
from ..spark.install_check import check_pyspark
from ..spark.session import get_spark, python_environment

PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def master_of(conn) -> str:
    """The Spark master URL of an Airflow connection, as SparkSubmitHook resolves it."""
    host = conn.host or ""
    if conn.conn_type == "spark" and host and ("://" in host or not conn.port):
        master = host
    else:
        master = f"{conn.conn_type}://{host}"
    return f"{master}:{conn.port}" if conn.port else master


class SemiJoinSparkHook(BaseHook):
    """Where a semi-join's Spark job runs.

    :param spark_conn_id: a ``spark`` connection; None: ``[semijoin] spark_conn_id``, and when
        that is empty too, in-process Spark on ``[semijoin] local_master``.
    :param conf: Spark properties for the session or for ``spark-submit --conf``.
    :param submit_options: more keyword arguments of :class:`SparkSubmitHook` (``py_files``,
        ``executor_memory``, ``deploy_mode``...).
    """

    conn_name_attr = "spark_conn_id"
    default_conn_name = "spark_default"
    conn_type = "spark"
    hook_name = "Spark (semi-join)"

    def __init__(self, spark_conn_id: str | None = None, conf: dict | None = None, **submit_options) -> None:
        super().__init__()
        self.spark_conn_id = spark_conn_id if spark_conn_id is not None else (option("spark_conn_id") or None)
        self.conf = dict(conf or {})
        self.submit_options = submit_options
        self._submit_hook = None
        if self.spark_conn_id is None:
            self.master = option("local_master")
        else:
            try:
                self.master = master_of(self.get_connection(self.spark_conn_id))
            except AirflowNotFoundException:
                raise ConfigError(
                    f"spark_conn_id: connection {self.spark_conn_id!r} is not defined (add it, or leave "
                    "spark_conn_id empty for in-process local Spark)"
                ) from None
        check_pyspark()
        if not self.is_local and not has_spark_provider():
            raise ConfigError(
                f"spark_conn_id: master {self.master!r} runs through spark-submit, which needs the Spark "
                "provider (pip install 'airflow-provider-semijoin[spark-submit]')"
            )

    @property
    def is_local(self) -> bool:
        """True when the job runs in this process (master ``local`` or ``local[...]``)."""
        return self.master == "local" or self.master.startswith("local[")

    def get_session(self, app_name: str, partitions: int = 1):
        """The in-process SparkSession (the active one when there is one) for a job of ``partitions``
        parts (:func:`..spark.session.get_spark`)."""
        if not self.is_local:
            raise ConfigError(f"spark_conn_id: master {self.master!r} is not local; use submit()")
        return get_spark(self.master, app_name=app_name, conf=self.conf, partitions=partitions)

    def submit(self, spec_file: str, *, name: str, on_line: Callable[[str], bool], summary_file: str | None = None) -> None:
        """Run the driver on the cluster with ``--spec spec_file`` (and ``--summary summary_file``,
        where it writes its summary, whole or not at all); blocks until it ends.

        Each output line goes to ``on_line`` first; the lines it returns False for are logged
        by :class:`SparkSubmitHook` as usual (it consumes the progress lines itself).
        """
        from ..spark.driver import driver_path

        options = {"py_files": str(package_zip(work_folder())), **self.submit_options}
        self._submit_hook = tapped_submit_hook()(
            on_line,
            conn_id=self.spark_conn_id,
            conf=self.conf,
            name=name,
            application_args=["--spec", spec_file, *(["--summary", summary_file] if summary_file else [])],
            env_vars=python_environment(),
            **options,
        )
        self._submit_hook.submit(driver_path())

    def on_kill(self) -> None:
        """Kill the spark-submit process (and the driver on the cluster, as SparkSubmitHook does)."""
        if self._submit_hook is not None:
            self._submit_hook.on_kill()


def has_spark_provider() -> bool:
    """True when apache-airflow-providers-apache-spark (the ``spark-submit`` extra) is installed."""
    try:
        return importlib.util.find_spec("airflow.providers.apache.spark") is not None
    except ModuleNotFoundError:  # not even airflow.providers.apache
        return False


def package_zip(folder: Path) -> Path:
    """This package as a zip for ``--py-files``, so the cluster's Python workers can import it."""
    target = folder / "airflow_provider_semijoin.zip"
    sources = sorted(p for p in PACKAGE_ROOT.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    newest = max(p.stat().st_mtime for p in sources)
    if target.exists() and target.stat().st_mtime >= newest:
        return target
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sources:
            archive.write(path, Path(PACKAGE_ROOT.name) / path.relative_to(PACKAGE_ROOT))
    partial.replace(target)
    return target


@functools.cache
def tapped_submit_hook() -> type:
    """SparkSubmitHook whose output lines pass through ``on_line`` before it logs them (a class
    made on first use: the Spark provider is an optional extra)."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    class TappedSparkSubmitHook(SparkSubmitHook):
        def __init__(self, on_line: Callable[[str], bool], **kwargs) -> None:
            super().__init__(**kwargs)
            self._on_line = on_line

        def _process_spark_submit_log(self, itr: Iterator) -> None:
            super()._process_spark_submit_log(line for line in itr if not self._on_line(line.rstrip("\n")))

    return TappedSparkSubmitHook
