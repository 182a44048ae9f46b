"""The task of a surrogate-key pipeline: every step of the spec in one Spark streaming query."""

from __future__ import annotations

import math

from ..core.units import parse_bytes
from ..job.assemble import JOB_OPTIONS
from ..operators.job import SemiJoinJobOperator
from .spec import PipelineSpec


class SemiJoinPipelineOperator(SemiJoinJobOperator):
    """Run a :class:`~.spec.PipelineSpec` (its dict form, as the DAG factory passes it).

    Dimension connection ids become URLs, and ``algorithm: auto`` steps get the algorithm the
    cost model predicts fastest on their dimension table, when the task runs; the choice is
    logged and shown in ``semijoin_info``.
    """

    def __init__(self, *, pipeline: dict | PipelineSpec, **kwargs) -> None:
        spec = pipeline if isinstance(pipeline, PipelineSpec) else PipelineSpec(**pipeline)
        deadline = spec.deadline or {}
        kwargs.setdefault("spark_conn_id", spec.spark_conn_id)
        super().__init__(
            checkpoint=spec.checkpoint, stop=dict(spec.stop), deadline_max_latency_s=deadline.get("max_latency_s"),
            deadline_column=deadline.get("column"), **{option.name: getattr(spec, option.name) for option in JOB_OPTIONS},
            **kwargs,
        )
        self.pipeline = spec.to_dict()
        self.auto_choices: dict = {}

    def job_dict(self, *, resolve: bool) -> dict:
        spec = PipelineSpec(**self.pipeline)
        steps = spec.step_dicts(self.connections(resolve=resolve), self._choose if resolve else None)
        return self.assemble(resolve=resolve, source=spec.source, steps=steps, sinks=spec.sinks)

    def _choose(self, step, url: str, memory) -> str:
        from ..core.stores import open_store
        from ..job.assemble import Connections, source_dict
        from ..job.rowbytes import estimated_row_bytes, planned_row_bytes
        from ..job.sources import source_from_dict
        from ..job.spec import holds_for_retry
        from .auto import choose_algorithm

        spec = PipelineSpec(**self.pipeline)
        earlier = spec.steps[:[s.column for s in spec.steps].index(step.column)]
        source = source_from_dict(source_dict(spec.source, Connections()))  # its columns: no connection needed
        estimated = estimated_row_bytes(source, sum(len(s.dimension.select) for s in earlier),
                                        spec.deadline is not None)
        row_bytes = planned_row_bytes(holds_for_retry(step.on_missing, step.retry_grace_s), estimated)  # as the step's runner will plan it
        dimension = step.dimension
        with open_store(url, dimension.table, dimension.natural_key, dimension.select) as store:
            name, rates = choose_algorithm(store, parse_bytes(memory), step.skew, row_bytes)
        # a rate without bound (every tuple served from memory) is shown as such: JSON has no inf
        shown = {k: round(v, 1) if math.isfinite(v) else "unbounded" for k, v in rates.items()}
        self.auto_choices[step.column] = {"algorithm": name, "predicted_tps": shown,
                                          "estimated_row_bytes": round(estimated, 1)}
        self.log.info("Step %s: algorithm auto chose %s (predicted tuples/s at the share the carried rows of "
                      "~%.0f bytes leave it: %s)", step.column, name, row_bytes, shown)
        return name

    def job_info(self, spec, link: str) -> dict:
        return {**super().job_info(spec, link), "auto_choices": self.auto_choices}
