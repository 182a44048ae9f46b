"""As-of lookups (:mod:`airflow_provider_semijoin.core.asof`): the matched pairs of a 1:K join
filtered to the version valid at each tuple's event time, against a brute-force oracle."""

import dataclasses
import datetime as dt

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.core.asof import (
    AsOf, _latest, dense_span, instants, latest_sorted, pick_versions, tuples_left)
from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.joins.base import JoinOutput
from airflow_provider_semijoin.core.reasons import Unmatched

AS_OF = AsOf("sold_at", "valid_from", "valid_to")
EPOCH = dt.datetime(2026, 1, 1)


def oracle(tuples, versions):
    """Per tuple id: the surrogate key of the winning valid version, or the reason label.
    ``tuples``: (id, key, t); ``versions``: (key, sk, vf, vt) - plain Python, the rules once more."""
    result = {}
    for tid, key, t in tuples:
        rows = [v for v in versions if v[0] == key]
        if not rows:
            continue  # not a matched tuple: the algorithm sent it unmatched already
        if t is None:
            result[tid] = "null_event_time"
            continue
        valid = [v for v in rows if v[2] is not None and v[2] <= t and (v[3] is None or t < v[3])]
        if not valid:
            result[tid] = "no_version_valid"
            continue
        far = float("inf")
        best = max(valid, key=lambda v: (v[2], far if v[3] is None else v[3], -v[1]))
        result[tid] = best[1]
    return result


def pairs(tuples, versions, rng):
    """What a 1:K join completes: every (tuple, row of its key) pair, in a shuffled order."""
    ids, rows, times = [], [], []
    for tid, key, t in tuples:
        for v in versions:
            if v[0] == key:
                ids.append(tid), rows.append(v), times.append(t)
    order = rng.permutation(len(ids))
    ids = np.array(ids, np.int64)[order] if ids else np.zeros(0, np.int64)
    rows = [rows[i] for i in order]
    times = [times[i] for i in order]
    master = pa.table({"sk": pa.array([r[1] for r in rows], pa.int64()),
                       "valid_from": pa.array([r[2] for r in rows], pa.int64()),
                       "valid_to": pa.array([r[3] for r in rows], pa.int64())})
    return JoinOutput(ids, master, np.zeros(0, np.int64), np.zeros(0, np.int8)), pa.array(times, pa.int64())


def outcome(out: JoinOutput) -> dict:
    got = {int(i): int(sk) for i, sk in zip(out.matched_ids, out.master["sk"].to_pylist())}
    for i, r in zip(out.unmatched_ids, out.unmatched_reason):
        assert int(i) not in got
        got[int(i)] = Unmatched(int(r)).label
    return got


version = st.tuples(st.integers(0, 3), st.integers(0, 10**6), st.one_of(st.none(), st.integers(0, 40)),
                    st.one_of(st.none(), st.integers(0, 40)))


@settings(max_examples=300, deadline=None)
@given(versions=st.lists(version, max_size=12),
       times=st.lists(st.tuples(st.integers(0, 4), st.one_of(st.none(), st.integers(-2, 42))), max_size=20),
       seed=st.integers(0, 2**31), spread=st.sampled_from([1, 1000]))
def test_pick_versions_matches_the_oracle(versions, times, seed, spread):
    """Gaps, overlaps, open and null bounds, out-of-order event times, shuffled pairs: one row per
    valid tuple, exactly the oracle's, every other matched tuple unmatched once with its reason;
    tuple ids consecutive (flagged) or far apart (sorted: :func:`dense_span`)."""
    versions = [(k, sk * 8 + k, vf, vt) for k, sk, vf, vt in versions]  # surrogate keys distinct enough
    tuples = [(i * spread, key, t) for i, (key, t) in enumerate(times)]
    out, event_time = pairs(tuples, versions, np.random.default_rng(seed))
    picked = pick_versions(out, event_time, AS_OF)
    assert outcome(picked) == oracle(tuples, versions)
    assert len(picked.matched_ids) == len(set(picked.matched_ids.tolist()))


# Microseconds since the epoch where the bounds below start: 1938 (before the epoch: a floor is not a
# truncation towards zero), 2026-01-01, and 2026-11-01 05:30 UTC (01:30 in New York: an hour that
# happens twice there, which a floor in local time could not place).
NANO_BASES = [-10**12, 1_767_225_600 * 10**6, 1_793_511_000 * 10**6]


near_version = st.tuples(st.integers(0, 3), st.integers(0, 10**6), st.one_of(st.none(), st.integers(0, 8)),
                        st.one_of(st.none(), st.integers(0, 8)))


@settings(max_examples=300, deadline=None)
@given(versions=st.lists(near_version, max_size=12),
       times=st.lists(st.tuples(st.integers(0, 4), st.one_of(st.none(), st.tuples(st.integers(-1, 9),
                                                                                     st.integers(-999, 999)))),
                      max_size=20),
       seed=st.integers(0, 2**31), base=st.sampled_from(NANO_BASES),
       zone=st.sampled_from([None, "UTC", "America/New_York"]))
@example(versions=[(0, 1, 5, 10), (0, 2, 10, None)], times=[(0, (10, -1)), (0, (10, -500)), (0, (5, -999)), (0, (10, 1))],
         seed=0, base=NANO_BASES[0], zone=None)
def test_nanosecond_event_times_get_the_version_valid_at_their_instant(versions, times, seed, base, zone):
    """Issue 66: event times in nanoseconds (pandas' Parquet, SQL Server's datetime2(7)) 0-999 ns
    either side of bounds one microsecond apart get the oracle's version, the oracle comparing whole
    nanoseconds (a bound of b us is b * 1000 ns); a round to the nearest microsecond, a truncation
    before 1970 (the example) or a crash fails it."""
    micros = [(k, sk * 8 + k, None if vf is None else base + vf, None if vt is None else base + vt)
              for k, sk, vf, vt in versions]
    nanos = [(k, sk, None if vf is None else vf * 1000, None if vt is None else vt * 1000) for k, sk, vf, vt in micros]
    tuples = [(i, key, None if t is None else (base + t[0]) * 1000 + t[1]) for i, (key, t) in enumerate(times)]
    out, event_time = pairs(tuples, micros, np.random.default_rng(seed))
    master = out.master
    for name in AS_OF.version_columns:
        master = master.set_column(master.column_names.index(name), name, master[name].cast(pa.timestamp("us", zone)))
    picked = pick_versions(dataclasses.replace(out, master=master), event_time.cast(pa.timestamp("ns", zone)), AS_OF)
    assert outcome(picked) == oracle(tuples, nanos)


@pytest.mark.parametrize("zone", [None, "UTC", "America/New_York"])
def test_nanosecond_instants_are_floored_to_their_microsecond(zone):
    """Before the epoch too (towards minus infinity, not zero), and in an hour New York has twice."""
    ambiguous = NANO_BASES[2] * 1000
    values = pa.array([-1, -999, -1000, -1001, 0, 999, 1001, ambiguous + 999, None], pa.timestamp("ns", zone))
    micros, nulls = instants(values, True, "sold_at")
    assert micros.tolist() == [-1, -1, -1, -2, 0, 0, 1, ambiguous // 1000, 0]
    assert nulls.tolist() == [False] * 8 + [True]


def test_text_with_nanosecond_digits_is_floored_too():
    """ISO text with 7-9 fractional digits (a datetime2(7) export in JSON lines) is an instant."""
    micros, _ = instants(pa.array(["2026-01-01 00:00:00.0000009", "1969-12-31 23:59:59.999999999",
                                   "2026-01-01 00:00:00.000001"]), True, "sold_at")
    assert micros.tolist() == [1_767_225_600 * 10**6, -1, 1_767_225_600 * 10**6 + 1]


def sound(cuts: list[tuple[int, list[int], bool]]) -> list[tuple]:
    """A sound type-2 table: per key, versions from one sorted cut to the next, without overlaps,
    the last one open or closed."""
    versions, sks = [], iter(range(1, 10**6))
    for key, points, open_end in {k: (k, p, o) for k, p, o in cuts}.values():
        points = sorted(points)
        for i, start in enumerate(points[:-1]):
            versions.append((key, next(sks), start, None if open_end and i == len(points) - 2 else points[i + 1]))
    return versions


cuts = st.lists(st.tuples(st.integers(0, 3), st.lists(st.integers(0, 40), min_size=2, max_size=6, unique=True),
                          st.booleans()), max_size=4)


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(cuts.map(sound), st.lists(version, max_size=12)),
       times=st.lists(st.tuples(st.integers(0, 4), st.one_of(st.none(), st.integers(-2, 42))), max_size=20),
       seed=st.integers(0, 2**31), spread=st.sampled_from([1, 1000]))
def test_the_fast_path_picks_what_the_sort_picks(data, times, seed, spread):
    """Where no tuple has two valid versions (a sound table: most examples) the valid pairs are
    taken as they are, without the sort; the general sort picks the same, and on overlapping
    versions both take the sort."""
    versions = [(k, sk * 8 + k, vf, vt) for k, sk, vf, vt in data]
    out, event_time = pairs([(i * spread, key, t) for i, (key, t) in enumerate(times)], versions,
                            np.random.default_rng(seed))
    t, t_null = instants(event_time, False, "t")
    vf, vf_null = instants(out.master["valid_from"], False, "valid_from")
    vt, vt_null = instants(out.master["valid_to"], False, "valid_to")
    valid = np.flatnonzero(~t_null & ~vf_null & (vf <= t) & (vt_null | (t < vt)))
    general = latest_sorted(out, valid, vf, vt, vt_null, AS_OF) if len(valid) else valid
    for span in (dense_span(out.matched_ids), None):
        assert _latest(out, valid, vf, vt, vt_null, AS_OF, span).tolist() == general.tolist()


@settings(max_examples=300, deadline=None)
@given(ids=st.lists(st.integers(0, 60), max_size=40), kept=st.sets(st.integers(0, 60)),
       untimed=st.sets(st.integers(0, 60)), offset=st.sampled_from([0, 10**12]))
def test_the_tuples_left_are_the_same_by_flags_and_by_a_sort(ids, kept, untimed, offset):
    """Which tuples left without a version, and which of them for a null event time: a flag per
    id over the ids' span, or a sort - the same answer, in id order."""
    ids_array = np.array(ids, np.int64) + offset
    kept_ids = np.array(sorted(set(ids) & kept - untimed), np.int64) + offset
    untimed_ids = np.array(sorted(set(ids) & untimed), np.int64) + offset
    expected = sorted(set(ids) - set(kept_ids - offset))
    for span in ({*ids} and (min(ids) + offset, max(ids) - min(ids) + 1) or None, None):
        left, null_time = tuples_left(ids_array, kept_ids, untimed_ids, span)
        assert (left - offset).tolist() == expected
        assert null_time.tolist() == [i in untimed for i in expected]


def test_the_ids_span_decides_flags_or_a_sort():
    assert dense_span(np.array([7, 5, 9, 5], np.int64)) == (5, 5)
    assert dense_span(np.array([0, 10**9], np.int64)) is None
    assert dense_span(np.zeros(0, np.int64)) is None


def test_the_winner_does_not_depend_on_the_order_of_the_pairs():
    """Two overlapping versions with the same valid_from: the later valid_to, then the smaller
    surrogate key, whichever order the algorithm produced them in."""
    versions = [(1, 30, 0, 10), (1, 20, 0, None), (1, 10, 0, None)]
    for seed in range(6):
        out, times = pairs([(0, 1, 5)], versions, np.random.default_rng(seed))
        assert pick_versions(out, times, AS_OF).master["sk"].to_pylist() == [10]


def test_timestamps_text_and_epoch_seconds_compare_as_one_type():
    """A stream timestamp against SQLite's ISO text and a number of epoch seconds: microseconds."""
    start = EPOCH.replace(tzinfo=dt.timezone.utc).timestamp()
    master = pa.table({"sk": [1, 2], "valid_from": ["2026-01-01 00:00:00", "2026-01-02 00:00:00"],
                       "valid_to": pa.array([start + 86400, None], pa.float64())})
    out = JoinOutput(np.array([0, 0, 1, 1], np.int64), master.take([0, 1, 0, 1]), np.zeros(0, np.int64),
                     np.zeros(0, np.int8))
    sold = pa.array([EPOCH + dt.timedelta(hours=23, minutes=59, seconds=59, microseconds=999999)] * 2
                    + [EPOCH + dt.timedelta(days=1)] * 2, pa.timestamp("us", "UTC"))
    picked = pick_versions(out, sold, AS_OF)
    assert dict(zip(picked.matched_ids.tolist(), picked.master["sk"].to_pylist())) == {0: 1, 1: 2}


def test_a_value_that_is_not_an_instant_is_one_sentence():
    with pytest.raises(ConfigError, match=r"^as_of: column 'valid_from' holds a value that is not a date or time"):
        instants(pa.array(["yesterday"]), True, "valid_from")
    with pytest.raises(ConfigError, match=r"^as_of: column 'valid_to' is binary; expected a timestamp, date or number$"):
        instants(pa.array([b"x"]), True, "valid_to")
