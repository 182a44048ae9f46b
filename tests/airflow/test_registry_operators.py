"""The registry is the one list of algorithms: every algorithm has its operator, made from it."""

from __future__ import annotations

import pytest
from airflow.sdk import DAG

from airflow_provider_semijoin.core.errors import SpecError
from airflow_provider_semijoin.core.joins.frontstage import FrontStage
from airflow_provider_semijoin.core.joins.registry import ALGORITHMS, AUTO_CANDIDATES, CACHE_ALGORITHMS
from airflow_provider_semijoin.operators import join

JOIN = dict(column="nk", master_table="r", master_key="nk", source={"kind": "generator", "total_rows": 10})


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_every_registry_algorithm_has_its_operator(name):
    algorithm = ALGORITHMS[name]
    assert "operator_name" in vars(algorithm), f"{algorithm.__name__} names no operator of its own"
    operator = getattr(join, algorithm.operator_name)
    assert join.OPERATORS[name] is operator and operator.__module__ == join.__name__
    assert algorithm.paper in operator.__doc__
    with DAG(f"registry_{name.replace('-', '_')}", schedule=None):
        task = operator(task_id="join", **JOIN)
    assert task.job_dict(resolve=False)["steps"][0]["algorithm"] == name
    with pytest.raises(SpecError, match=rf"^other: algorithm: {algorithm.operator_name} always runs '{name}'; "
                                        r"use SemiStreamJoinOperator\(algorithm=\.\.\.\) to choose one$"):
        operator(task_id="other", algorithm="inlj", **JOIN)


def test_operator_names_are_distinct_and_the_derived_lists_follow_the_classes():
    names = [cls.operator_name for cls in ALGORITHMS.values()]
    assert len(set(names)) == len(names) == len(ALGORITHMS)
    assert set(CACHE_ALGORITHMS) == {n for n, cls in ALGORITHMS.items() if issubclass(cls, FrontStage)}
    assert {"hybridjoin", "cachejoin-pq", "inlj"} <= set(AUTO_CANDIDATES) and "inlist-lru" not in AUTO_CANDIDATES
