"""Deadline monitoring: the share of tuples that missed their deadline over a sliding window.

A join with per-tuple deadlines (SSIJ paper sec. IV-F: a deadline column, or arrival plus a
maximum latency) counts the tuples that left after their deadline in every progress record.
The window ratio is read from the ``semijoin_history`` XCom the join task keeps up to date: its
cumulative series (``total_deadline_misses``, ``total_input_rows``) make the count over the last
``window_s`` seconds exact even where the history has thinned its older points.

Two ways to act on it: the join operators' ``deadline_miss_threshold`` option (the task itself
stops and fails, or warns), and :class:`DeadlineMissSensor`, a task next to the join that fails
(an alert through the usual failure callbacks and notifiers) or lets an alert branch run.
"""

from __future__ import annotations

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from ..core.deadline_watch import check_miss_ratio, check_threshold, window_misses
from ..core.progress import XCOM_HISTORY

FINISHED = ("success", "failed", "skipped", "upstream_failed", "removed")


class DeadlineMissSensor(BaseSensorOperator):
    """Watch a running join task's deadline-miss ratio over a sliding window.

    :param join_task_id: the join task of the same DAG run (its ``semijoin_history`` XCom).
    :param threshold: ratio of missed deadlines in the window that counts as a breach.
    :param window_s: the window, in seconds of the join's progress records.
    :param min_tuples: the window must hold at least this many tuples to be judged.
    :param fail_on_breach: True (default): a breach fails this task (alert through its failure
        callbacks); it succeeds when the join ends without one. False: the sensor waits *for* a
        breach and succeeds on one (its XCom says what happened, for a downstream alert task);
        when the join ends without a breach it is skipped, and so is the alert.
    """

    template_fields = ("join_task_id",)
    ui_color = "#f5d7d7"

    def __init__(
        self,
        *,
        join_task_id: str,
        threshold: float,
        window_s: float = 60.0,
        min_tuples: int = 100,
        fail_on_breach: bool = True,
        **kwargs,
    ) -> None:
        kwargs.setdefault("poke_interval", 5)
        super().__init__(**kwargs)
        check_threshold(threshold, window_s, min_tuples)
        self.join_task_id = join_task_id
        self.threshold = threshold
        self.window_s = window_s
        self.min_tuples = min_tuples
        self.fail_on_breach = fail_on_breach

    def poke(self, context) -> PokeReturnValue:
        ti = context["ti"]
        # the join's state first: its last progress records are in XCom before it ends
        finished = self._join_state(ti) in FINISHED
        history = ti.xcom_pull(task_ids=self.join_task_id, key=XCOM_HISTORY)
        breach = check_miss_ratio(history, self.threshold, self.window_s, self.min_tuples)
        misses, tuples = window_misses(history, self.window_s)
        result = {"breach": breach, "misses": misses, "tuples": tuples, "window_s": self.window_s}
        self.log.info("Deadline misses of %s in the last %g s: %d of %d tuples", self.join_task_id, self.window_s, misses, tuples)
        if breach is not None:
            if self.fail_on_breach:
                raise AirflowFailException(f"{self.join_task_id}: {breach}")
            return PokeReturnValue(is_done=True, xcom_value=result)
        if finished:
            if self.fail_on_breach:
                return PokeReturnValue(is_done=True, xcom_value=result)
            raise AirflowSkipException(f"{self.join_task_id} ended without a deadline breach")
        return PokeReturnValue(is_done=False)

    def _join_state(self, ti) -> str | None:
        states = ti.get_task_states(dag_id=ti.dag_id, task_ids=[self.join_task_id], run_ids=[ti.run_id])
        state = states.get(ti.run_id, {}).get(self.join_task_id)
        return None if state is None else str(getattr(state, "value", state))
