"""Issue 55: as-of lookups on a MariaDB system-versioned R (``WITH SYSTEM VERSIONING``), through
the core path - a registry algorithm's equality join of a store that reads R ``FOR SYSTEM_TIME
ALL`` with its periods (:mod:`airflow_provider_semijoin.core.stores.system_time`), then
:func:`..core.asof.pick_versions` - against the database's own
``JOIN r FOR SYSTEM_TIME ALL ON s.nk = r.nk AND s.t >= r.ROW_START AND s.t < r.ROW_END``.

R's versions are made by real INSERTs, UPDATEs and DELETEs at controlled system times (``SET
@@timestamp`` in the writer's session): several versions per key, keys deleted (a version
ending with no successor) and some inserted again later (a gap), event times in no order."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_semijoin.core.asof import AsOf, pick_versions
from airflow_provider_semijoin.core.errors import ConfigError, StoreError
from airflow_provider_semijoin.core.joins import ALGORITHMS, create
from airflow_provider_semijoin.core.joins.base import JoinOutput
from airflow_provider_semijoin.core.reasons import Unmatched
from airflow_provider_semijoin.core.runner import run_join
from airflow_provider_semijoin.core.stores import install_changes, open_store
from airflow_provider_semijoin.core.stores.capture import enable_capture
from airflow_provider_semijoin.core.stores.system_time import PERIOD_NAMES, check_declared

from system_versioned import at, databases_join, epoch, expected, stream, versioned_dimension  # tests/ is on sys.path

pytestmark = pytest.mark.mysql

AS_OF = AsOf("sold_at", *PERIOD_NAMES)
ALGORITHMS_TRIED = ["inlj", "hybridjoin", "meshjoin", "cachejoin", "ssij"]


def as_of_join(store, name: str, tuples: pa.Table) -> dict:
    """tid -> sk, or the reason label, of ``name``'s equality join of ``store`` then the pick."""
    params = {p: v for p, v in {"page_rows": 4, "partition_pages": 2}.items() if p in ALGORITHMS[name].params}
    run = run_join(create(name, store, 1 << 20, params), tuples, "nk")
    assert run.stats["exactly_once"]["ok"], run.stats["exactly_once"]
    matched = run.matched
    out = JoinOutput(np.asarray(matched["tid"], np.int64), matched.select(store.select), np.zeros(0, np.int64),
                     np.zeros(0, np.int8))
    picked = pick_versions(out, matched["sold_at"], AS_OF)
    got = {int(t): int(sk) for t, sk in zip(picked.matched_ids, picked.master["sk"].to_pylist())}
    for tid, reason in [*zip(picked.unmatched_ids.tolist(), (Unmatched(int(r)).label for r in picked.unmatched_reason)),
                        *zip(run.unmatched["tid"].to_pylist(), run.unmatched["reason"].to_pylist())]:
        assert tid not in got
        got[int(tid)] = reason
    assert sorted(got) == tuples["tid"].to_pylist()  # every tuple once
    return got


@pytest.fixture
def dimension(mysql_backend):
    rng = np.random.default_rng(55)
    table = versioned_dimension(mysql_backend, rng)
    return table, stream(rng)


@pytest.mark.parametrize("name", ALGORITHMS_TRIED)
def test_each_tuple_gets_the_version_whose_system_period_holds_its_event_time(mysql_backend, mysql_url, dimension,
                                                                              name):
    table, tuples = dimension
    want = expected(mysql_backend, table, tuples)
    assert {"no_version_valid", "null_event_time", "not_in_master"} <= set(want.values())  # every case is there
    current = dict(mysql_backend.execute(f"SELECT nk, sk FROM `{table}`"))
    nk_of = dict(zip(tuples["tid"].to_pylist(), tuples["nk"].to_pylist()))
    assert sum(isinstance(sk, int) and sk != current.get(nk_of[t]) for t, sk in want.items()) > 20  # history answers
    with open_store(mysql_url, table, "nk", ["sk", *PERIOD_NAMES]) as store:
        assert not store.key_unique and store.max_rows_per_key > 1
        assert as_of_join(store, name, tuples) == want


def test_the_database_agrees_tuple_by_tuple_for_system_time_as_of(mysql_backend, dimension):
    """The oracle itself, checked against ``FOR SYSTEM_TIME AS OF`` one tuple at a time."""
    table, tuples = dimension
    joined = databases_join(mysql_backend, table, tuples)
    mysql_backend.execute("SET time_zone = '+00:00'")
    try:
        for r in tuples.to_pylist()[:60]:
            if r["sold_at"] is None:
                continue
            rows = mysql_backend.execute(f"SELECT sk FROM `{table}` FOR SYSTEM_TIME AS OF TIMESTAMP %s WHERE nk = %s",
                                         (r["sold_at"].strftime("%Y-%m-%d %H:%M:%S.%f"), r["nk"]))
            assert [sk for (sk,) in rows] == ([joined[r["tid"]]] if r["tid"] in joined else []), r
    finally:
        mysql_backend.execute("SET time_zone = DEFAULT")


def test_an_equality_lookup_of_a_system_versioned_table_sees_its_current_rows(mysql_backend, mysql_url, dimension):
    table, tuples = dimension
    current = {int(nk): int(sk) for nk, sk in mysql_backend.execute(f"SELECT nk, sk FROM `{table}`")}
    with open_store(mysql_url, table, "nk", ["sk"]) as store:
        run = run_join(create("hybridjoin", store, 1 << 20, {"page_rows": 4}), tuples, "nk")
    got = dict(zip(run.matched["tid"].to_pylist(), run.matched["sk"].to_pylist()))
    assert got == {r["tid"]: current[r["nk"]] for r in tuples.to_pylist() if r["nk"] in current}
    assert len(run.matched) == len(got)  # one row a tuple: no history


def test_key_ranges_of_a_system_versioned_table_together_give_the_whole(mysql_backend, mysql_url, dimension):
    """``restrict`` (a partition's key range): each part's answer for its keys, the parts the whole."""
    table, tuples = dimension
    want = expected(mysql_backend, table, tuples)
    got = {}
    for lo, hi in ((None, 24), (24, None)):
        part = tuples.filter(pa.array([(lo is None or k >= lo) and (hi is None or k < hi)
                                       for k in tuples["nk"].to_pylist()]))
        with open_store(mysql_url, table, "nk", ["sk", *PERIOD_NAMES]) as store:
            store.restrict(lo, hi)
            got.update(as_of_join(store, "meshjoin", part))
    assert got == want


def test_captured_changes_are_seen_and_an_older_version_reads_every_version_as_it_was(mysql_backend, mysql_url,
                                                                                       dimension):
    """Capture triggers on a system-versioned R (MariaDB accepts them): a plain UPDATE and a
    DELETE are versions; the next join sees them, a read at the version before sees R ALL as it
    was (the before-images keep every version with its period)."""
    table, tuples = dimension
    with open_store(mysql_url, table, "nk", ["sk", *PERIOD_NAMES]) as store:
        enable_capture(store)
        store.look_for_change_tables()
        algorithm = create("cachejoin", store, 1 << 20, {"page_rows": 4})
        before = expected(mysql_backend, table, tuples)
        assert as_of_join(store, "cachejoin", tuples) == before
        version = store.version()
        live = [int(nk) for (nk,) in mysql_backend.execute(f"SELECT nk FROM `{table}` ORDER BY nk")]
        at(mysql_backend, 100, f"UPDATE `{table}` SET sk = sk + 5000 WHERE nk = %s", (live[0],))
        at(mysql_backend, 101, f"DELETE FROM `{table}` WHERE nk = %s", (live[1],))
        after = expected(mysql_backend, table, tuples)
        assert after != before
        run = run_join(algorithm, tuples, "nk")  # the warm algorithm, after the commits
        out = JoinOutput(np.asarray(run.matched["tid"], np.int64), run.matched.select(store.select),
                         np.zeros(0, np.int64), np.zeros(0, np.int8))
        picked = pick_versions(out, run.matched["sold_at"], AS_OF)
        assert dict(zip(picked.matched_ids.tolist(), picked.master["sk"].to_pylist())) == {
            t: sk for t, sk in after.items() if isinstance(sk, int)}
        with store.reading_at(version):
            assert as_of_join(store, "inlj", tuples) == before
    with open_store(mysql_url, table, "nk", ["sk"]) as current:  # the before-images' history: not for it
        with current.reading_at(version), current.snapshot():
            rows = current.lookup_many(np.array(live[:2]))
        assert len(rows) == 2


def test_an_install_through_the_provider_keeps_every_version_for_reads_at_the_version_before(mysql_backend,
                                                                                             mysql_url, dimension):
    """``install_changes`` on a system-versioned R (no triggers: it writes the before-images
    itself): the next read sees the new versions, one at the version before sees R ALL as it
    was, and a store of current rows its current rows as they were."""
    table, tuples = dimension
    live = [int(nk) for (nk,) in mysql_backend.execute(f"SELECT nk FROM `{table}` ORDER BY nk")][:2]
    before = expected(mysql_backend, table, tuples)
    current_before = dict(mysql_backend.execute(f"SELECT nk, sk FROM `{table}` WHERE nk IN (%s, %s)", live))
    with open_store(mysql_url, table, "nk", ["sk", *PERIOD_NAMES]) as store, \
            open_store(mysql_url, table, "nk", ["sk"]) as current:
        version = store.version()
        mysql_backend.execute(f"SET @@timestamp = {epoch(100)}")  # the install's system time: day 100
        try:
            install_changes(mysql_backend.connection, table, "nk", pa.table({
                "op": ["U", "D"], "nk": pa.array(live, pa.int64()), "id": [live[0], None], "sk": [77_777, None]}))
        finally:
            mysql_backend.execute("SET @@timestamp = DEFAULT")
        after = expected(mysql_backend, table, tuples)
        assert after != before and 77_777 in after.values()
        assert as_of_join(store, "hybridjoin", tuples) == after
        with store.reading_at(version):
            assert as_of_join(store, "hybridjoin", tuples) == before
        with current.reading_at(version), current.snapshot():
            rows = current.lookup_many(np.array(live))
        assert dict(zip(rows.keys.tolist(), rows.rows["sk"].to_pylist())) == current_before


def test_a_declaration_that_does_not_fit_the_table_is_one_sentence(mysql_backend, mysql_url, dimension):
    table, _ = dimension
    plain = mysql_backend.table_name()
    mysql_backend.execute(f"CREATE TABLE `{plain}` (nk BIGINT PRIMARY KEY, sk BIGINT, vf DATETIME, vt DATETIME)")
    by_trx = mysql_backend.table_name()
    mysql_backend.execute(f"CREATE TABLE `{by_trx}` (nk BIGINT PRIMARY KEY, sk BIGINT, s BIGINT UNSIGNED GENERATED "
                          "ALWAYS AS ROW START, e BIGINT UNSIGNED GENERATED ALWAYS AS ROW END, PERIOD FOR "
                          "SYSTEM_TIME (s, e)) ENGINE=InnoDB WITH SYSTEM VERSIONING")
    with open_store(mysql_url, table, "nk", ["sk"]) as store:
        with pytest.raises(ConfigError, match=rf"^as_of: table '{table}' is system-versioned \(period columns "
                                              r"'ROW_START', 'ROW_END'\); expected system_time: true instead of "
                                              r"valid_from/valid_to 'vf', 'vt', which would see its current rows only$"):
            check_declared(store.connection, table, False, ("vf", "vt"))
        with pytest.raises(ConfigError, match=rf"^as_of.system_time: table '{plain}' is not system-versioned \(its "
                                              r"TABLE_TYPE is 'BASE TABLE'\); expected a table created WITH SYSTEM "
                                              r"VERSIONING$"):
            check_declared(store.connection, plain, True, PERIOD_NAMES)
        check_declared(store.connection, plain, False, ("vf", "vt"))  # a plain type-2 table: as ever
        check_declared(store.connection, table, True, PERIOD_NAMES)
    with pytest.raises(StoreError, match=rf"^select: \['sj_row_start', 'sj_row_end'\] read a system-versioned "
                                         rf"table's periods, but table '{by_trx}' is versioned by transaction "
                                         r"\('s' is bigint\); expected one versioned by time"):
        open_store(mysql_url, by_trx, "nk", ["sk", *PERIOD_NAMES])


def test_sqlite_has_no_system_versioned_tables(sqlite_backend):
    table = sqlite_backend.table_name()
    sqlite_backend.execute(f'CREATE TABLE "{table}" (nk INTEGER PRIMARY KEY, sk BIGINT)')
    with open_store(sqlite_backend.url, table, "nk", ["sk"]) as store:
        with pytest.raises(ConfigError, match=rf"^as_of.system_time: SQLite has no system-versioned tables "
                                              rf"\('{table}'\); expected a MariaDB table WITH SYSTEM VERSIONING$"):
            check_declared(store.connection, table, True, PERIOD_NAMES)
