"""Plans before structures (:mod:`airflow_provider_semijoin.core.joins.plan`): R's statistics are
read once, the split of M is arithmetic on them, and a step's algorithm is built once from its plan."""

from __future__ import annotations

import pytest

from airflow_provider_semijoin.core.errors import BudgetError, ConfigError
from airflow_provider_semijoin.core.joins.frontstage import FrontStage
from airflow_provider_semijoin.core.joins.registry import ALGORITHMS, create, planner
from airflow_provider_semijoin.core.session import planned_for_rows, sized_for_rows
from airflow_provider_semijoin.workloads import master_table

MEMORY = 2 << 20
PLANNED = list(ALGORITHMS)


@pytest.fixture
def store(sqlite_backend):
    return sqlite_backend.make_master(master_table(20_000, seed=3).select(["nk", "sk"]))


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
def test_the_planned_split_is_the_split_of_the_algorithm_built_from_the_plan(store, name):
    """What the cost models read of a plan (``auto`` predicts from it) is what the algorithm built
    from it reports."""
    plans = planner(name, store)
    plan = plans.plan(MEMORY)
    planned, built = plans.cls.planned_split(plan), plans.build(plan).memory_split()
    assert planned == {field: built[field] for field in planned}
    assert planned or name == "inlj"  # (INLJ has one tuple and no split)


SETTINGS = [(name, {}) for name in PLANNED] + [
    ("hybridjoin", {"page_rows": 64}), ("inlist", {"batch_rows": 50}), ("inlist-lru", {"batch_rows": 50}),
    ("meshjoin", {"partition_pages": 3}), ("cachejoin", {"cache_keys": 100}), ("ssj", {"cache_keys": 100}),
    ("ssij", {"sb_thresh": 40}), ("ssij", {"max_scan": 1, "ib_size": 30}),
]


@pytest.mark.parametrize("name, params", SETTINGS)
def test_the_smallest_budget_is_exact_and_a_byte_less_is_a_budget_error(store, name, params):
    """:meth:`~.base.JoinAlgorithm.min_memory` in closed form: the plan of it is accepted (and built),
    the plan of one byte less is refused, in the algorithm's words."""
    plans = planner(name, store, params)
    smallest = plans.min_memory()
    assert plans.build(plans.plan(smallest)).memory == smallest
    with pytest.raises(BudgetError, match=rf"^memory: {smallest - 1} bytes is too small for {name}: "):
        plans.plan(smallest - 1)
    with pytest.raises(BudgetError, match=rf"^memory: 16 bytes is too small for {name}: "):
        plans.plan(16)


def test_the_smallest_index_join_needs_a_tuple_and_its_rows_not_kilobytes(store):
    """INLJ holds one tuple and its key's rows: a few hundred bytes (a search from 64 KiB down
    to a quarter of it had said about 16 KiB)."""
    assert planner("inlj", store).min_memory() < 1024


@pytest.mark.parametrize("name", [n for n in PLANNED if issubclass(ALGORITHMS[n], FrontStage)])
def test_a_front_stage_plans_its_wrapped_algorithms_smallest_budget_once(store, monkeypatch, name):
    """A front stage's plan asks for the wrapped algorithm's smallest budget at every budget it plans:
    it is planned once per settings, on the statistics the planner keeps."""
    plans = planner(name, store)
    inner, asked = ALGORITHMS[name].inner, []
    floor = inner.min_memory.__func__

    def counted(cls, stats, settings):
        asked.append(dict(settings))
        return floor(cls, stats, settings)

    monkeypatch.setattr(inner, "min_memory", classmethod(counted))
    for memory in (MEMORY, MEMORY // 2, MEMORY // 4, MEMORY // 3):
        plans.plan(memory)
    assert len(asked) == len({tuple(sorted(s.items())) for s in asked}) >= 1


def test_a_budget_error_is_a_config_error_with_its_message(store):
    with pytest.raises(ConfigError, match=r"^memory: 16 bytes is too small for hybridjoin: one disk page"):
        create("hybridjoin", store, 16)


@pytest.mark.parametrize("name", ["meshjoin", "hybridjoin", "cachejoin", "ssij"])
def test_rows_that_leave_less_than_the_smallest_budget_get_the_smallest_plan(store, name):
    """:func:`planned_for_rows`: wide rows of many tuples would leave the structures less than the
    smallest budget; they get exactly that one (:meth:`~.plan.Planner.min_memory`), the rest holds rows."""
    plans = planner(name, store)
    smallest = plans.min_memory()
    plan, share = planned_for_rows(plans, 4 * smallest, smallest)
    assert plan.memory == share == smallest
