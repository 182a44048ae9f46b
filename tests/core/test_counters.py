"""The algorithms' counters are declared per family (:class:`...joins.base.Counters` and its
subclasses): the stats report a family's counters by their names, a :func:`when_counted` one
only once it has counted, as the dict of counters they replace did."""

from __future__ import annotations

from dataclasses import fields

from airflow_provider_semijoin.core.joins import ALGORITHMS
from airflow_provider_semijoin.core.joins.base import CacheProbes, Counters
from airflow_provider_semijoin.core.joins.frontstage import FrontStageCounters
from airflow_provider_semijoin.core.joins.hybridjoin import HybridJoinCounters
from airflow_provider_semijoin.core.joins.ssij_state import SSIJCounters


def test_a_family_reports_its_own_counters_by_name_and_a_when_counted_one_from_its_first_count():
    assert Counters().own() == {}
    assert FrontStageCounters().own() == {"cache_hits": 0, "cache_probes": 0, "cache_admissions": 0, "cache_rounds": 0}
    hybrid = HybridJoinCounters()
    assert hybrid.own() == {}
    hybrid.in_loads += 1
    hybrid.rider_pages += 3
    assert hybrid.own() == {"in_loads": 1, "rider_pages": 3}
    assert set(SSIJCounters().own()) == {"online_phases", "join_phases", "forced_join_phases", "sequences",
                                         "pages_requested", "pages_read", "cache_hits", "cache_probes",
                                         "updates_installed", "invalidated_pages"}


def test_the_hit_ratio_is_hits_per_probe_and_none_before_a_probe():
    probes = CacheProbes()
    assert probes.hit_ratio is None
    probes.cache_probes, probes.cache_hits = 3, 2
    assert probes.hit_ratio == 0.6667


def test_every_algorithm_counts_in_declared_whole_number_counters():
    for name, cls in ALGORITHMS.items():
        assert issubclass(cls.counters_type, Counters), name
        assert all(f.type in ("int", int) for f in fields(cls.counters_type)), name
