"""The plan each step of a job runs with, kept beside the job's checkpoint (DESIGN.md, "Plans
before structures": the operator's display and the runner share the plan).

The Spark runner writes a step's plan once its algorithm is sized (:class:`..spark.step.JoinStep`):
the memory split of the algorithm built from it and the rows' share. The Airflow worker shows it
(:meth:`..operators.job.SemiJoinJobOperator.job_info`) from here without opening the master
database, which it opens only where no plan is kept for the step as it is now.

A kept plan is keyed by what it depends on that the worker knows without R: the step's spec
(algorithm, parameters, memory, R's table, key and columns, on-missing policy:
:func:`plan_key`). R's statistics it was planned on are recorded with
it (``stats_stamp``, a digest), not compared: that would need R.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..core.files import write_private_json
from .spec import StepSpec

PLANS_FOLDER = "sj_plans"  # under the job's checkpoint, beside the state (``sj_state``)


def plan_key(step: StepSpec) -> str:
    """What a step's plan depends on that the worker knows: a digest of its spec, R named by its
    table, key and columns - not by the URL of its connection (a connection moved to another
    host, a failover or a proxy, reads the same R; the URL's password stays out)."""
    described = step.describe()
    described["master"] = {k: v for k, v in described["master"].items() if k != "url"}
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()[:32]


def stats_stamp(stats) -> str:
    """A digest of R's statistics a plan was computed from (:class:`..core.joins.plan.RStats`)."""
    return hashlib.sha256(repr(stats).encode()).hexdigest()[:16]


def plan_file(checkpoint: str, index: int) -> Path:
    return Path(checkpoint) / PLANS_FOLDER / f"step{index}.json"


def keep_plan(checkpoint: str, index: int, step: StepSpec, planned: dict) -> None:
    """Keep ``planned`` (the memory split, the row bytes and R's statistics stamp it was planned
    with) for step ``index`` of the job checkpointed at ``checkpoint``, whole or not at all."""
    path = plan_file(checkpoint, index)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private_json(path, {"key": plan_key(step), **planned})


def kept_plan(checkpoint: str, index: int, step: StepSpec) -> dict | None:
    """The plan kept for step ``index`` as ``step`` is now; None where there is none (the job has
    not run yet, or its step was changed since: another key)."""
    try:
        kept = json.loads(plan_file(checkpoint, index).read_text())
    except (OSError, ValueError):
        return None
    return kept if isinstance(kept, dict) and kept.get("key") == plan_key(step) else None
