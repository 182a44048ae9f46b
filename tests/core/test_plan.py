"""Plans before structures (:mod:`airflow_provider_semijoin.core.joins.plan`): R's statistics are
read once, the split of M is arithmetic on them, and a step's algorithm is built once from its plan."""

from __future__ import annotations

import pytest

from airflow_provider_semijoin.core.errors import BudgetError, ConfigError
from airflow_provider_semijoin.core.joins import base
from airflow_provider_semijoin.core.joins.frontstage import FrontStage
from airflow_provider_semijoin.core.joins.registry import ALGORITHMS, create, planner
from airflow_provider_semijoin.core.session import sized_for_rows
from airflow_provider_semijoin.workloads import master_table

MEMORY = 2 << 20
PLANNED = list(ALGORITHMS)


@pytest.fixture
def store(sqlite_backend):
    return sqlite_backend.make_master(master_table(20_000, seed=3).select(["nk", "sk"]))


@pytest.fixture
def constructions(monkeypatch):
    """How many algorithms were constructed (a front stage and the algorithm it wraps: two)."""
    made = []
    init = base.JoinAlgorithm.__init__

    def counted(self, *args, **kwargs):
        made.append(self.name)
        init(self, *args, **kwargs)

    monkeypatch.setattr(base.JoinAlgorithm, "__init__", counted)
    return made


@pytest.mark.parametrize("name", PLANNED)
def test_a_step_sized_for_its_rows_builds_its_algorithm_once(store, constructions, name):
    """:func:`sized_for_rows` compares shares of M on plans, not on constructions."""
    plans = planner(name, store)
    constructions.clear()
    algorithm, share = sized_for_rows(plans, MEMORY, 150.0)
    wrapped = [algorithm.algorithm.name] if isinstance(algorithm, FrontStage) else []
    assert constructions == [name, *wrapped] and share < MEMORY


@pytest.mark.parametrize("name", PLANNED)
def test_a_plan_reads_nothing_of_r_and_the_algorithm_is_what_it_planned(store, name):
    plans = planner(name, store)
    plans.plan(MEMORY // 2), plans.min_memory()  # the page maps these budgets choose are read once, into the statistics
    before = (store.counters.queries, store.counters.rows)
    plan = plans.cls.plan(plans.stats, MEMORY // 2, plans.settings)
    plans.cls.min_memory(plans.stats, plans.settings)
    assert (store.counters.queries, store.counters.rows) == before
    algorithm = plans.build(plan)
    assert (algorithm.memory, algorithm.capacity_tuples) == (plan.memory, plan.capacity_tuples)
    assert algorithm.memory_split() == create(name, store, MEMORY // 2).memory_split()


@pytest.mark.parametrize("name", PLANNED)
def test_the_smallest_budget_is_planned_and_a_budget_too_small_is_a_budget_error(store, name):
    plans = planner(name, store)
    smallest = plans.min_memory()
    assert plans.build(plans.plan(smallest)).memory == smallest
    with pytest.raises(BudgetError, match=rf"^memory: 16 bytes is too small for {name}: "):
        plans.plan(16)


def test_a_budget_error_is_a_config_error_with_its_message(store):
    with pytest.raises(ConfigError, match=r"^memory: 16 bytes is too small for hybridjoin: one disk page"):
        create("hybridjoin", store, 16)
