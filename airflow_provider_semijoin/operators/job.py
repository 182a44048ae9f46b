"""The long-running task every semi-join operator is: run a Spark streaming job, report as it goes.

:class:`SemiJoinJobOperator` is thin, like Airflow's Spark operators: ``execute`` builds the
:class:`~..job.spec.JobSpec` (subclasses say how, resolving connection ids through the hooks
at run time), then runs it

* in this process (:func:`..spark.run_job` on the local session of
  :class:`~..hooks.spark.SemiJoinSparkHook`) when the Spark connection is ``local[...]`` or none;
* through ``spark-submit`` of the packaged driver otherwise, reading its ``SEMIJOIN_PROGRESS``
  lines as they are printed.

Either way the job runs in a worker thread and this task's main thread forwards every progress
record to the task log and to the XComs of :mod:`..core.progress` (``semijoin_info`` once,
``semijoin_metrics`` the latest record, ``semijoin_history`` bounded), pushes the link to the UI
plugin's live page while the task runs (Airflow computes extra links only after a task ends),
and watches the deadline-miss ratio. ``on_kill`` asks the query to stop between micro-batches
(the stop event in-process; the stop file for spark-submit, then a kill after
``[semijoin] kill_grace_s``). The final summary is the return value.
"""

from __future__ import annotations

import json
import math
import os
import queue
import re
import threading
import time
from pathlib import Path

from airflow.sdk import BaseOperator, BaseOperatorLink
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from ..config import number_option, work_folder
from ..core.deadline_watch import check_miss_ratio, check_threshold
from ..core.errors import ConfigError, SemiJoinError
from ..core.files import write_private_json
from ..core.progress import (SUMMARY_PREFIX, XCOM_HISTORY, XCOM_INFO, XCOM_LATEST, ProgressHistory, ProgressRecord,
                             json_after, parse_line)
from ..hooks.master import run_time_connections
from ..hooks.spark import SemiJoinSparkHook
from ..job.assemble import JOB_OPTIONS
from ..job.rowbytes import estimated_row_bytes, planned_row_bytes
from ..urls import task_page_url
from .options import declare_options, spec_options, take_options

_TEMPLATE = re.compile(r"{{|{%")


class SemiJoinMetricsLink(BaseOperatorLink):
    """"Semi-join metrics": the live page of the task in the UI plugin (under ``[api] base_url``'s path)."""

    name = "Semi-join metrics"

    def get_link(self, operator, *, ti_key) -> str:
        return task_page_url(ti_key.dag_id, ti_key.run_id, ti_key.task_id, ti_key.map_index)


def has_template(value) -> bool:
    """True when ``value`` (or anything inside it) holds a Jinja expression still to render."""
    if isinstance(value, str):
        return bool(_TEMPLATE.search(value))
    if isinstance(value, dict):
        return any(has_template(k) or has_template(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(has_template(v) for v in value)
    return False


def json_safe(value):
    """``value`` with non-finite floats (an infinite predicted rate, a NaN ratio) as None: XCom is JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


class SemiJoinJobOperator(BaseOperator):
    """Base of the semi-join operators: runs the JobSpec :meth:`build_job` returns.

    :param spark_conn_id: Spark connection (None: ``[semijoin] spark_conn_id``, empty = local).
    :param spark_conf: Spark properties for the session or spark-submit.
    :param checkpoint: Spark checkpoint folder (default: per task under ``[semijoin] work_folder``;
        a restarted task resumes where it stopped, exactly once).
    :param stop: when the query stops: ``duration_s``, ``max_batches``, ``end_of_input``.
    :param deadline_max_latency_s: every tuple's deadline is its arrival plus this (SSIJ IV-F).
    :param deadline_column: or a stream column holding each tuple's absolute deadline.
    :param deadline_miss_threshold: the task watches the share of tuples that missed their
        deadline over the last ``deadline_window_s`` seconds; above this ratio (with at least
        ``deadline_min_tuples`` tuples in the window) it ``fail``\\ s (stops the query and fails
        the task) or ``warn``\\ s (logs once per breach), as ``on_deadline_breach`` says.
    :param trigger_interval_s, partitions, arrival_column, db_retry_max_s, work_ahead, data_path: the job
        spec's options (:data:`..job.assemble.JOB_OPTIONS`, every field of
        :class:`~..job.spec.JobSpec` but those above, the source, the steps and the sinks), at
        the spec's defaults; ``db_retry_max_s`` at ``[semijoin] db_retry_max_s``.
    """

    template_fields = ("checkpoint", "stop", "spark_conf")
    operator_extra_links = (SemiJoinMetricsLink(),)
    ui_color = "#e8d7f5"

    @declare_options(JOB_OPTIONS, {})
    def __init__(
        self,
        *,
        spark_conn_id: str | None = None,
        spark_conf: dict | None = None,
        checkpoint: str | None = None,
        stop: dict | None = None,
        deadline_max_latency_s: float | None = None,
        deadline_column: str | None = None,
        deadline_miss_threshold: float | None = None,
        deadline_window_s: float = 60.0,
        deadline_min_tuples: int = 100,
        on_deadline_breach: str = "fail",
        **kwargs,
    ) -> None:
        options = take_options(kwargs, JOB_OPTIONS, {})
        super().__init__(**kwargs)
        for name, value in options.items():
            setattr(self, name, value)
        self.spark_conn_id = spark_conn_id
        self.spark_conf = spark_conf or {}
        self.checkpoint = checkpoint
        self.stop = stop or {}
        self.deadline_max_latency_s = deadline_max_latency_s
        self.deadline_column = deadline_column
        self.deadline_miss_threshold = deadline_miss_threshold
        self.deadline_window_s = deadline_window_s
        self.deadline_min_tuples = deadline_min_tuples
        self.on_deadline_breach = on_deadline_breach
        if on_deadline_breach not in ("fail", "warn"):
            raise ConfigError(f"on_deadline_breach: {on_deadline_breach!r} is not one of ['fail', 'warn']")
        if deadline_miss_threshold is not None:
            check_threshold(deadline_miss_threshold, deadline_window_s, deadline_min_tuples,
                            ("deadline_miss_threshold", "deadline_window_s", "deadline_min_tuples"))
            if deadline_max_latency_s is None and deadline_column is None:
                raise ConfigError("deadline_miss_threshold: given, but the tuples have no deadline "
                                  "(set deadline_max_latency_s or deadline_column)")
        self._stop_event = threading.Event()
        self._killed = False
        self._spark_hook: SemiJoinSparkHook | None = None
        self._stop_file: Path | None = None
        self._job_spec = None  # the spec execute ran, for OpenLineage

    # -- the spec ------------------------------------------------------------------------------
    def connections(self, *, resolve: bool):
        """Connection ids -> URLs and defaults: through the hooks at run time (``resolve``), placeholders at parse time."""
        from ..job.assemble import Connections

        return run_time_connections() if resolve else Connections()

    def assemble(self, *, resolve: bool, source, steps: list[dict], sinks) -> dict:
        """The job spec as data, with this task's name, checkpoint, stop, deadline and options
        (:func:`..job.assemble.job_dict`, the one place a spec is assembled)."""
        from ..job.assemble import job_dict, spec_name

        deadline = None
        if self.deadline_max_latency_s is not None or self.deadline_column is not None:
            deadline = {"max_latency_s": self.deadline_max_latency_s, "column": self.deadline_column}
        return job_dict(
            name=spec_name(self.dag_id if self.has_dag() else "dag", self.task_id),
            source=source, steps=steps, sinks=sinks,
            output_folder=self.output_folder() if resolve else None,
            checkpoint=self.checkpoint or (str(work_folder() / "checkpoints" / self.dag_id / self.task_id) if resolve else None),
            stop=dict(self.stop), deadline=deadline, options=spec_options(self, JOB_OPTIONS, {}),
            connections=self.connections(resolve=resolve),
        )

    def job_dict(self, *, resolve: bool) -> dict:
        """The job spec as data: with connection URLs (``resolve``) or placeholders (parse time)."""
        raise NotImplementedError

    def build_job(self):
        from ..job.spec import JobSpec

        return JobSpec.from_dict(self.job_dict(resolve=True))

    def output_folder(self) -> Path:
        return work_folder() / "output" / self.dag_id / self.task_id

    # -- running ---------------------------------------------------------------------------------
    def execute(self, context):
        ti = context["ti"]
        spec = self._job_spec = self.build_job()
        self._spark_hook = SemiJoinSparkHook(self.spark_conn_id, conf=self.spark_conf)
        self._stop_file = work_folder() / "stop" / f"{spec.name}-{os.getpid()}-{threading.get_ident()}"
        self._stop_file.unlink(missing_ok=True)
        spec.stop.stop_file = str(self._stop_file)
        link = task_page_url(ti.dag_id, ti.run_id, ti.task_id, ti.map_index)
        ti.xcom_push(key=SemiJoinMetricsLink().xcom_key, value=link)
        ti.xcom_push(key=XCOM_INFO, value=json_safe(self.job_info(spec, link)))
        self.log.info("Semi-join %s starts on Spark master %s: %s", spec.name, self._spark_hook.master,
                      json.dumps(spec.describe(), default=str))
        records: queue.Queue = queue.Queue()
        outcome: dict = {}
        worker = threading.Thread(target=self._run, args=(spec, records, outcome), name=f"semijoin-{spec.name}", daemon=True)
        worker.start()
        history = ProgressHistory(int(number_option("history_points")), number_option("history_max_age_s"))
        breach = None
        while worker.is_alive() or not records.empty():
            try:
                record = records.get(timeout=0.5)
            except queue.Empty:
                continue
            self.log.info("%s", ProgressRecord.from_dict(record).to_line())
            history.append(record)
            ti.xcom_push(key=XCOM_LATEST, value=json_safe(record))
            ti.xcom_push(key=XCOM_HISTORY, value=history.to_dict())
            breach = breach or self._check_deadlines(history)
        worker.join()
        self._stop_file.unlink(missing_ok=True)
        if "error" in outcome:
            error = outcome["error"]
            raise error if isinstance(error, SemiJoinError) else AirflowException(f"the semi-join failed: {error}")
        summary = outcome.get("summary") or {}
        self.log.info("Semi-join %s finished: %s", spec.name, json.dumps(summary, default=str))
        if self._killed:
            raise AirflowException(
                f"the semi-join was stopped by on_kill after {summary.get('batches', 0)} micro-batches "
                f"({summary.get('input_rows', 0)} tuples, every one of them written exactly once)"
            )
        if breach is not None and self.on_deadline_breach == "fail":
            raise AirflowFailException(breach)
        return json_safe(summary)

    def get_openlineage_facets_on_complete(self, task_instance):
        """Lineage for Airflow's OpenLineage provider: the stream source and master tables read, the
        matched and dead-letter sinks written (:mod:`.lineage`)."""
        from .lineage import operator_lineage

        return operator_lineage(self._job_spec or self.build_job())

    def job_info(self, spec, link: str) -> dict:
        """``semijoin_info``: what runs, with which parameters and memory split (no credentials)."""
        described = spec.describe()
        steps, added_columns = [], 0
        for index, (step, shown) in enumerate(zip(spec.steps, described["steps"])):
            row_bytes = estimated_row_bytes(spec.source, added_columns, spec.deadline is not None)
            split, planned_by = self._memory_split(spec.checkpoint, index, step, row_bytes)
            steps.append({**shown, "memory_bytes": step.memory_bytes, "estimated_row_bytes": round(row_bytes, 1),
                          "memory_split": split, "memory_split_planned_by": planned_by})
            added_columns += len(step.master.select)
        first = steps[0]
        return {
            "algorithm": "+".join(s["algorithm"] for s in steps),
            "params": first["params"],
            "memory_bytes": first["memory_bytes"],
            "memory_split": first["memory_split"],
            "steps": steps,
            "source": described["source"],
            "stop": described["stop"],
            "deadline": described["deadline"],
            "spark_master": self._spark_hook.master,
            "started": time.time(),
            "link": link,
        }

    @staticmethod
    def _memory_split(checkpoint: str, index: int, step, row_bytes: float) -> tuple[dict, str]:
        """How step ``index`` divides its budget: the algorithm's structures at its share, and the
        rows of the tuples it holds (``carried_rows_bytes``: the rest); and who planned it. The plan
        the job's runner kept for the step as it is now (:mod:`..job.kept_plans`: ``runner``), read
        without opening R; where there is none, planned here as the job will
        (:func:`..core.session.sized_for_rows`, rows of about ``row_bytes`` where they do not
        spill: ``worker``), on R's statistics."""
        from ..core.joins.registry import planner
        from ..core.session import sized_for_rows
        from ..core.stores import open_store
        from ..job.kept_plans import kept_plan

        kept = kept_plan(checkpoint, index, step)
        if kept is not None:
            return kept["memory_split"], "runner"
        with open_store(step.master.url, step.master.table, step.master.key, step.master_select) as store:
            algorithm, share = sized_for_rows(planner(step.algorithm, store, step.params), step.memory_bytes,
                                              planned_row_bytes(step.retries, row_bytes))
            return {**algorithm.memory_split(), "carried_rows_bytes": step.memory_bytes - share}, "worker"

    def _run(self, spec, records: queue.Queue, outcome: dict) -> None:
        try:
            if self._spark_hook.is_local:
                from ..spark import run_job

                session = self._spark_hook.get_session(f"semijoin-{spec.name}", spec.partitions)
                outcome["summary"] = run_job(spec, spark=session, on_progress=records.put, stop_event=self._stop_event)
            else:
                outcome["summary"] = self._submit(spec, records)
        except BaseException as exc:  # handed to the main thread, which raises it
            outcome["error"] = exc

    def _submit(self, spec, records: queue.Queue) -> dict:
        """spark-submit the driver; its progress lines become records, and its summary the result:
        the file it writes (whole or not at all), or where there is none its summary line."""
        spec_file = work_folder() / "specs" / f"{spec.name}-{os.getpid()}.json"
        summary_file = spec_file.with_name(f"{spec_file.stem}.summary.json")
        summary_file.unlink(missing_ok=True)  # one left by a killed task of the same name and process id
        spec_file.parent.mkdir(parents=True, exist_ok=True)
        write_private_json(spec_file, spec.to_dict())  # the master URLs with their passwords
        found: dict = {}

        def on_line(line: str) -> bool:
            record = parse_line(line)
            if record is not None:
                records.put(record)
                return True
            summary = json_after(line, SUMMARY_PREFIX)
            if summary is not None:
                found["summary"] = summary
                return True
            if line.startswith("semijoin: error: "):
                found["error"] = line[len("semijoin: error: "):]
            return False

        try:
            self._spark_hook.submit(str(spec_file), name=spec.name, on_line=on_line, summary_file=str(summary_file))
            if summary_file.exists():
                found["summary"] = json.loads(summary_file.read_text())
        except AirflowException:
            if "error" in found:
                raise ConfigError(found["error"]) from None
            raise
        finally:
            spec_file.unlink(missing_ok=True)
            summary_file.unlink(missing_ok=True)
        if "summary" not in found:
            raise AirflowException("spark-submit ended without the driver's summary (no summary file, no readable "
                                   "SEMIJOIN_SUMMARY line)")
        return found["summary"]

    def _check_deadlines(self, history: ProgressHistory) -> str | None:
        if self.deadline_miss_threshold is None:
            return None
        breach = check_miss_ratio(
            history.to_dict(), self.deadline_miss_threshold, self.deadline_window_s, self.deadline_min_tuples
        )
        if breach is None:
            return None
        self.log.warning("Deadline alert: %s", breach)
        if self.on_deadline_breach == "fail":
            self._request_stop()
        return breach

    def _request_stop(self) -> None:
        self._stop_event.set()
        if self._stop_file is not None:
            self._stop_file.parent.mkdir(parents=True, exist_ok=True)
            self._stop_file.touch()

    def on_kill(self) -> None:
        """Stop the query between micro-batches; a spark-submit job gets ``kill_grace_s`` to do so."""
        self._killed = True
        self._request_stop()
        hook = self._spark_hook
        if hook is not None and not hook.is_local:
            timer = threading.Timer(number_option("kill_grace_s"), hook.on_kill)
            timer.daemon = True
            timer.start()
