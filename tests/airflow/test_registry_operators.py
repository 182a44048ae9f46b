"""The registry is the one list of algorithms: every algorithm has exactly one operator class in operators/join.py."""

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
    operator = join.OPERATORS[name]
    assert getattr(join, operator.__name__) is operator and operator.__module__ == join.__name__
    assert operator.algorithm_name == name and algorithm.paper in operator.__doc__
    assert not hasattr(algorithm, "operator_name"), "the core names no operator: operators/ does"
    with DAG(f"registry_{name.replace('-', '_')}", schedule=None):
        task = operator(task_id="join", **JOIN)
    assert task.job_dict(resolve=False)["steps"][0]["algorithm"] == name
    with pytest.raises(SpecError, match=rf"^other: algorithm: {operator.__name__} always runs '{name}'; "
                                        r"use SemiStreamJoinOperator\(algorithm=\.\.\.\) to choose one$"):
        operator(task_id="other", algorithm="inlj", **JOIN)


def test_one_operator_per_algorithm_and_the_derived_lists_follow_the_classes():
    names = [operator.__name__ for operator in join.OPERATORS.values()]
    assert len(set(names)) == len(names) == len(ALGORITHMS) and set(join.OPERATORS) == set(ALGORITHMS)
    assert set(CACHE_ALGORITHMS) == {n for n, cls in ALGORITHMS.items() if issubclass(cls, FrontStage)}
    assert {"hybridjoin", "cachejoin-pq", "inlj"} <= set(AUTO_CANDIDATES) and "inlist-lru" not in AUTO_CANDIDATES


def test_an_operator_of_an_unknown_algorithm_is_refused_where_it_is_written():
    with pytest.raises(TypeError, match=r"^NoSuchOperator: algorithm 'nosuch' is not one of \['cachejoin', "):
        class NoSuchOperator(join._OneAlgorithmOperator, algorithm="nosuch"): ...
