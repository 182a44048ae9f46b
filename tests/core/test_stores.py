"""Master-data stores on SQLite and MySQL: page map, loads, lookups, counters and errors."""

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_semijoin.core.errors import ConfigError, StoreError
from airflow_provider_semijoin.core.stores import DatabaseURL, open_store, redact, store_for, write_table
from airflow_provider_semijoin.workloads import master_table

KEYS = [3 * i + 1 for i in range(23)]  # 1, 4, ..., 67: 23 keys with gaps


def master(keys=KEYS) -> pa.Table:
    return pa.table({
        "nk": pa.array(keys, pa.int64() if not keys or isinstance(keys[0], int) else pa.string()),
        "v": pa.array([10 * i for i in range(len(keys))], pa.int64()),
        "label": pa.array([f"row {k}" for k in keys], pa.string()),
    })


def plain_sql(backend, store, where: str = "", params=(), suffix: str = "") -> list[tuple]:
    """What a plain SQL query returns: (key, v, label) in key order."""
    q = backend.quote
    sql = f"SELECT {q('nk')}, {q('v')}, {q('label')} FROM {q(store.table)}"
    sql += f" WHERE {where}" if where else ""
    rows = backend.execute(f"{sql} ORDER BY {q('nk')}{suffix}", params)
    return [(r[0].decode() if isinstance(r[0], bytes) else r[0], r[1], r[2]) for r in rows]


def as_rows(page) -> list[tuple]:
    keys = [k.decode() if isinstance(k, bytes) else k for k in page.keys.tolist()]
    return list(zip(keys, page.rows["v"].to_pylist(), page.rows["label"].to_pylist()))


def param(backend) -> str:
    return "%s" if backend.name == "mysql" else "?"


# ------------------------------------------------------------------------------- page map


@pytest.mark.parametrize("page_rows", [1, 2, 5, 22, 23, 24])
def test_page_map_pages_hold_page_rows_consecutive_keys(backend, page_rows):
    store = backend.make_master(master())
    pm = store.page_map(page_rows)
    n_pages = -(-len(KEYS) // page_rows)
    assert pm.n_pages == n_pages and pm.page_rows == page_rows
    assert pm.bounds.tolist() == KEYS[::page_rows]
    assert pm.max_key == KEYS[-1] and pm.n_keys == len(KEYS) and pm.n_rows == len(KEYS)
    assert pm.page_of(np.array(KEYS)).tolist() == [i // page_rows for i in range(len(KEYS))]
    between = np.array(KEYS) + 1  # absent keys: filed under the page of the key before them
    assert pm.page_of(between[:-1]).tolist() == [i // page_rows for i in range(len(KEYS) - 1)]
    outside = np.array([KEYS[0] - 1, -(2**63), KEYS[-1] + 1, 2**63 - 1])
    assert pm.page_of(outside).tolist() == [-1, -1, -1, -1]
    assert pm.sizes.tolist() == [page_rows] * (n_pages - 1) + [len(KEYS) - page_rows * (n_pages - 1)]
    assert pm.nbytes == 16 * n_pages  # bounds and sizes
    assert store.page_map(page_rows) is pm  # cached


def test_page_map_counts_distinct_keys_of_a_one_to_k_master(backend):
    keys = [k for k in range(10) for _ in range(k % 3)]  # 0 rows of 0, 3, 6, 9
    table = pa.table({"id": np.arange(len(keys)), "nk": pa.array(keys, pa.int64())})
    store = backend.make_master(table, primary_key="id")
    assert store.key_unique is False
    pm = store.page_map(2)
    assert pm.bounds.tolist() == [1, 4, 7] and pm.n_keys == 6 and pm.n_rows == len(keys)
    assert pm.sizes.tolist() == [3, 3, 3] and pm.max_page_rows == 3  # rows of keys 1-2, 4-5, 7-8
    page = store.load_pages(pm, 1)
    assert page.keys.tolist() == [4, 5, 5] and page.rows["id"].to_pylist() == [3, 4, 5]
    assert store.lookup(8).keys.tolist() == [8, 8]


def test_a_key_first_in_a_composite_unique_index_is_not_unique(backend):
    table = backend.table_name()
    rows = pa.table({"id": [1, 2, 3], "nk": [5, 5, 6], "v": [1, 2, 1]})
    write_table(backend.connection, table, rows, primary_key="id")
    q = backend.quote
    backend.execute(f"CREATE UNIQUE INDEX ux_{table} ON {q(table)} ({q('nk')}, {q('v')})")
    store = store_for(backend.connection, table, "nk")
    assert store.key_unique is False
    assert store.lookup(5).rows["id"].to_pylist() == [1, 2]
    assert store.page_map(1).bounds.tolist() == [5, 6]


def test_sqlite_integer_primary_key_is_an_index(tmp_path):
    connection = DatabaseURL.parse(f"sqlite:///{tmp_path / 'r.db'}").connect()
    connection.execute("CREATE TABLE dim (nk INTEGER PRIMARY KEY, v TEXT)")
    connection.executemany("INSERT INTO dim VALUES (?, ?)", [(k, f"v{k}") for k in (2, 4, 8)])
    store = store_for(connection, "dim", "nk")
    assert store.key_unique is True and store.key_type.kind == "int"
    assert store.lookup(4).rows.to_pylist() == [{"v": "v4"}]
    connection.close()


def test_page_map_of_string_keys_is_in_byte_order(backend):
    keys = sorted(["P-000123", "P-00012", "P-0001234", "Ü-17", "東京-3", "😀-9", "a", "B"], key=str.encode)
    store = backend.make_master(master(keys))
    assert store.key_type.kind == "str" and store.key_type.width == len("P-0001234")
    pm = store.page_map(3)
    assert [k.decode() for k in pm.bounds.tolist()] == keys[::3]
    probe = np.array([k.encode() for k in keys] + [b"A", "😀-99".encode(), b"P-000122"], dtype=store.key_type.dtype)
    assert pm.page_of(probe).tolist() == [i // 3 for i in range(len(keys))] + [-1, -1, 0]


def test_page_map_of_string_keys_with_control_characters_is_in_byte_order(backend):
    """'a' < 'a\\tb' < 'a\\t' in a PAD SPACE collation (MariaDB's utf8mb4_bin), not in bytes."""
    keys = ["a", "a\t", "a\tb", "b", "b\n", "c"]
    store = backend.make_master(master(keys))
    bounds = store.page_map(1).bounds
    assert [k.decode() for k in bounds.tolist()] == keys


def test_page_map_of_an_empty_master(backend):
    store = backend.make_master(master([]))
    pm = store.page_map(4)
    assert pm.n_keys == 0 and pm.n_rows == 0
    assert pm.n_pages == 1  # one page covering no key: keys inserted later get a page (PageMap.cover)
    edges = [-(2**63), -1, 0, 1, 5, 2**63 - 1]
    assert pm.page_of(np.array(edges)).tolist() == [-1] * len(edges)


def test_page_map_of_an_empty_string_master_covers_no_key(backend):
    store = backend.make_master(master(["x"]))
    backend.execute(f"DELETE FROM {backend.quote(store.table)}")
    pm = store_for(backend.connection, store.table, "nk").page_map(4)
    assert pm.n_keys == 0 and pm.page_of(np.array([b"", b"\x01", b"x", b"\xff"], "S1")).tolist() == [-1] * 4


@pytest.mark.parametrize("page_rows", [0, -3, 2.5, "5", None])
def test_page_rows_must_be_a_positive_integer(backend, page_rows):
    store = backend.make_master(master())
    with pytest.raises(ConfigError, match=r"^page_rows: .* must be a positive integer"):
        store.page_map(page_rows)


# ------------------------------------------------------------------------------- loads


def test_load_pages_return_what_plain_sql_returns(backend):
    store = backend.make_master(master())
    pm = store.page_map(4)  # 6 pages: 5 of 4 keys and one of 3
    everything = plain_sql(backend, store)
    for first in range(pm.n_pages):
        for count in range(1, pm.n_pages - first + 1):
            got = as_rows(store.load_pages(pm, first, count))
            assert got == everything[4 * first : 4 * (first + count)], (first, count)


@pytest.mark.parametrize("start", [KEYS[0], KEYS[5], KEYS[5] + 1, KEYS[0] - 100, KEYS[-1], KEYS[-1] + 1])
@pytest.mark.parametrize("limit", [1, 7, 100])
def test_load_range_returns_what_plain_sql_returns(backend, start, limit):
    store = backend.make_master(master())
    p = param(backend)
    expected = plain_sql(backend, store, f"{backend.quote('nk')} >= {p}", (start,), f" LIMIT {limit}")
    assert as_rows(store.load_range(start, limit)) == expected


def test_lookups_return_what_plain_sql_returns(backend):
    store = backend.make_master(master())
    p = param(backend)
    for key in (KEYS[0], KEYS[7], KEYS[-1], 2, -5, 1000):
        expected = plain_sql(backend, store, f"{backend.quote('nk')} = {p}", (key,))
        assert as_rows(store.lookup(key)) == expected
    keys = np.array([KEYS[3], 2, KEYS[0], KEYS[3], 999, KEYS[-1]])
    expected = [r for r in plain_sql(backend, store) if r[0] in set(keys.tolist())]
    assert as_rows(store.lookup_many(keys)) == expected
    queries = store.counters.queries
    assert len(store.lookup_many(np.array([], np.int64))) == 0 and store.counters.queries == queries


def test_an_in_lookup_of_integer_keys_binds_no_parameter_and_reaches_the_ends_of_int64(backend):
    """Integer keys go into the IN list as numbers, not one bound parameter each (the driver's
    per-parameter escaping was a quarter of the query): one query of 40,005 keys binds no
    parameter, and the ends of int64 are found exactly."""
    ends = [-2**63, -2**63 + 1, 0, 2**63 - 2, 2**63 - 1]
    store = backend.make_master(master(ends))
    sent = []
    execute = store._execute
    store._execute = lambda sql, params=(), raw=False: sent.append(params) or execute(sql, params, raw)
    asked = np.concatenate([np.array(ends, np.int64), np.arange(1, 40_001, dtype=np.int64)])
    assert as_rows(store.lookup_many(asked)) == plain_sql(backend, store)
    assert sent == [[]]
    assert as_rows(store.lookup_many(np.array([2**63 - 1, -2**63], np.int64))) == [
        r for r in plain_sql(backend, store) if r[0] in (2**63 - 1, -2**63)]


def test_string_key_loads_and_lookups(backend):
    keys = sorted(["P-000123", "P-00012", "P-0001234", "Ü-17", "東京-3", "😀-9"], key=str.encode)
    store = backend.make_master(master(keys))
    pm = store.page_map(2)
    everything = plain_sql(backend, store)
    assert [r[0] for r in everything] == keys
    assert as_rows(store.load_pages(pm, 1, 2)) == everything[2:6]
    assert as_rows(store.lookup("東京-3".encode())) == [everything[keys.index("東京-3")]]
    assert as_rows(store.lookup_many(np.array(["Ü-17".encode(), b"P-0"], dtype=store.key_type.dtype))) == [
        everything[keys.index("Ü-17")]
    ]
    assert as_rows(store.load_range(b"P-0001235", 2)) == everything[keys.index("P-0001234") + 1 :][:2]


def test_string_keys_given_as_str(backend):
    """Keys as a caller writes them (and as MIN(nk) comes back from the driver, see calibrate)."""
    keys = ["Ü-17", "東京-3", "😀-9"]
    store = backend.make_master(master(keys))
    assert as_rows(store.lookup("東京-3"))[0][0] == "東京-3"
    assert [r[0] for r in as_rows(store.load_range("Ü-17", 5))] == keys
    assert store.calibrate()[0] > 0


def test_select_chooses_the_master_columns(backend):
    store = backend.make_master(master(), select=["label"])
    assert store.select == ["label"] and store.schema.names == ["label"]
    page = store.lookup(KEYS[2])
    assert page.rows.to_pylist() == [{"label": f"row {KEYS[2]}"}]
    assert backend.make_master(master()).select == ["v", "label"]  # default: all but the key
    assert store.schema.field("label").type == pa.string()


def test_counters_count_queries_and_rows(backend):
    store = backend.make_master(master())
    pm = store.page_map(5)
    before = store.counters.queries, store.counters.rows
    store.load_pages(pm, 0, 2)  # 10 rows
    store.lookup(KEYS[1])  # 1 row
    store.lookup(2)  # 0 rows
    store.lookup_many(np.array(KEYS[:3]))  # 3 rows
    store.load_range(KEYS[-2], 10)  # 2 rows
    assert (store.counters.queries - before[0], store.counters.rows - before[1]) == (5, 16)
    assert store.counters.seconds > 0
    assert store.counters.as_dict()["disk_queries"] == store.counters.queries


def test_calibrate_and_row_bytes_do_not_count(backend):
    store = backend.make_master(master())
    pm = store.page_map(5)
    before = store.counters.queries, store.counters.rows
    query_s, row_s = store.calibrate()
    assert query_s > 0 and row_s > 0
    assert store.row_bytes(pm) > 8
    assert (store.counters.queries, store.counters.rows) == before


def test_assumed_costs_are_what_calibration_returns_and_nothing_is_measured(backend):
    store = backend.make_master(master())
    assert store.assume_costs((2e-3, 3e-6)) is store
    assert store.calibrate() == (2e-3, 3e-6)  # not this machine's: nothing was timed
    store.assume_costs(in_costs=(1e-3, 4e-6))
    assert store.calibrate_in() == (1e-3, 4e-6) and store.calibrate() == (2e-3, 3e-6)  # the other one kept
    queries_before = store.counters.queries
    store.calibrate()
    assert store.counters.queries == queries_before
    for bad in [(1e-3,), (-1.0, 1e-6), (1e-3, float("nan")), (1e-3, "1")]:
        with pytest.raises(ValueError, match=r"^costs: .* is not two non-negative seconds \(a query's and a row's or key's\)$"):
            store.assume_costs(bad)
    store.restrict(None, None)  # a store seeing another range of R measures itself again
    assert store.calibrate() != (2e-3, 3e-6)


def test_an_in_memory_copy_of_r_takes_assumed_costs_too():
    from airflow_provider_semijoin.core.stores.memory import memory_store

    store = memory_store(None)
    assert store.calibrate_in()[0] == float("inf")  # no IN lookups unless assumed
    store.assume_costs(in_costs=(1e-3, 4e-6))
    assert store.calibrate_in() == (1e-3, 4e-6)
    with pytest.raises(ValueError, match=r"^in_costs: \(1e-05,\) is not two non-negative seconds"):
        store.assume_costs(in_costs=(1e-5,))


def test_calibrate_an_empty_master(backend):
    store = backend.make_master(master([]))
    query_s, row_s = store.calibrate()
    assert query_s > 0 and row_s > 0


# ------------------------------------------------------------------------------- errors


def test_missing_table_key_and_select_columns_are_named(backend):
    backend.make_master(master())
    table = backend.tables[-1]
    with pytest.raises(StoreError, match=r"^table: 'no_such_table' does not exist"):
        store_for(backend.connection, "no_such_table", "nk")
    with pytest.raises(StoreError, match=rf"^key: column 'zz' is not in table '{table}'"):
        store_for(backend.connection, table, "zz")
    with pytest.raises(StoreError, match=rf"^select: column 'price' is not in table '{table}'"):
        store_for(backend.connection, table, "nk", ["v", "price"])


def test_a_key_without_an_index_is_refused(backend):
    table = backend.table_name()
    write_table(backend.connection, table, master(), primary_key="v")  # nk is not indexed
    with pytest.raises(StoreError, match=rf"^key: table '{table}' has no index whose first column is 'nk'"):
        store_for(backend.connection, table, "nk")


def test_a_key_of_another_type_is_refused(backend):
    table = backend.table_name()
    rows = pa.table({"id": [1, 2], "price": [1.5, 2.5]})
    write_table(backend.connection, table, rows, primary_key="id")
    backend.execute(f"CREATE INDEX ix_{table}_price ON {backend.quote(table)} ({backend.quote('price')})")
    with pytest.raises(StoreError, match=r"^key: column 'price' has type .*; expected an integer or string column"):
        store_for(backend.connection, table, "price")


@pytest.mark.parametrize(
    "table, key, select, what",
    [
        ("x; DROP TABLE {victim}", "nk", None, "table"),
        ("{victim}", "nk; --", None, "key column"),
        ("{victim}", "nk", ["v", "label` FROM x; --"], "select column"),
        ("{victim}", "nk", ['label" FROM x; --'], "select column"),
        ("a" * 65, "nk", None, "table"),
    ],
    ids=["table", "key", "select-backtick", "select-quote", "too-long"],
)
def test_unsafe_identifiers_are_refused(backend, table, key, select, what):
    store = backend.make_master(master())
    victim = store.table
    table = table.format(victim=victim)
    with pytest.raises(ConfigError, match=rf"^{what}: .* is not a valid identifier"):
        store_for(backend.connection, table, key, select)
    assert len(plain_sql(backend, store)) == len(KEYS)  # nothing was dropped


# ------------------------------------------------------------------------------- URLs


def test_open_store_over_a_sqlite_url(tmp_path):
    path = tmp_path / "r.db"
    connection = DatabaseURL.parse(f"sqlite:///{path}").connect()
    write_table(connection, "dim", master(), primary_key="nk")
    connection.close()
    with open_store(f"sqlite:///{path}", "dim", "nk", ["v"]) as store:
        assert store.lookup(KEYS[3]).rows.to_pylist() == [{"v": 30}]
    with pytest.raises(StoreError, match=r"^table: 'nope' does not exist"):
        open_store(f"sqlite:///{path}", "nope", "nk")
    with pytest.raises(ConfigError, match=r"^master URL: folder '.*missing' does not exist"):
        open_store(f"sqlite:///{tmp_path}/missing/r.db", "dim", "nk")


@pytest.mark.parametrize(
    "url, message",
    [
        ("mysql://semijoin:top-secret@127.0.0.1:3306/", r"^master URL: .* names no database"),
        ("postgres://semijoin:top-secret@127.0.0.1/db", r"^master URL: scheme 'postgres' is not one of"),
        ("mysql:/semijoin:top-secret@127.0.0.1/db", r"^master URL: .* is not a database URL"),
        ("semijoin:top-secret@127.0.0.1/db", r"^master URL: .* is not a database URL"),
        ("mysql://semijoin:top@secret@127.0.0.1:3306/", r"^master URL: .* names no database"),
    ],
    ids=["no-database", "scheme", "one-slash", "no-scheme", "raw-at-sign"],
)
def test_bad_urls_never_show_the_password(url, message):
    with pytest.raises(ConfigError, match=message) as error:
        DatabaseURL.parse(url)
    assert "secret" not in str(error.value)


@pytest.mark.mysql
def test_connection_errors_never_show_the_password(mysql_url):
    parts = DatabaseURL.parse(mysql_url)
    for url in (
        f"mysql://{parts.user}:top-secret@{parts.host}:{parts.port}/{parts.database}",  # wrong password
        f"mysql://{parts.user}:top-secret@127.0.0.1:1/{parts.database}",  # nothing listens on port 1
    ):
        with pytest.raises(ConfigError, match=r"^master URL: cannot connect to MySQL at ") as error:
            open_store(url, "dim", "nk")
        assert "secret" not in str(error.value)


def test_redact():
    assert redact("mysql://u:pw@h:3306/db") == "mysql://u:***@h:3306/db"
    assert redact("mysql://u@h/db") == "mysql://u@h/db"
    assert redact("sqlite:///x.db") == "sqlite:///x.db"
    assert redact(None) == "None"
    assert "secret" not in redact("mysql://u:top@secret@h/db")


def test_the_stores_declare_the_protocol_the_algorithms_use(backend):
    """The SQL stores are a JoinStore; calibration's in-memory R pages like one but has no versions."""
    from airflow_provider_semijoin.core.stores import JoinStore, PagedRelation
    from airflow_provider_semijoin.core.stores.memory import memory_store

    store = backend.make_master(pa.table({"nk": list(range(1, 50)), "name": [f"n{k}" for k in range(1, 50)]}))
    assert isinstance(store, JoinStore) and isinstance(store, PagedRelation)
    in_memory = memory_store(store)
    assert isinstance(in_memory, PagedRelation) and not isinstance(in_memory, JoinStore)


WIDE_COLUMNS = ("nk {key}, i INT, b BIGINT, d DOUBLE, m DECIMAL(12,3), day DATE, at DATETIME(6), "
                "s VARCHAR(20), t TEXT, raw VARBINARY(8), PRIMARY KEY (nk)")
WIDE_ROWS = [
    ("{k}1", 1, 2**62, 0.5, "123456789.125", "2024-02-29", "2024-02-29 23:59:59.123456", "Zürich", "a,b", b"\x00\x01"),
    ("{k}2", -7, -(2**63), -1e300, "-0.001", "1970-01-01", "1999-12-31 00:00:00", "", "tab\there", b""),
    ("{k}3", None, None, None, None, None, None, None, None, None),
    ("{k}4", 0, 0, 1.5e-300, "0", "9999-12-31", "2000-01-01 12:00:00.5", "😀 emoji", "x" * 300, b"\xff" * 8),
]


@pytest.mark.mysql
@pytest.mark.parametrize("key", ["BIGINT", "VARCHAR(8) COLLATE utf8mb4_general_ci"])
def test_a_raw_page_of_every_column_type_reads_as_sql_returns_it_in_one_pass(mysql_backend, key):
    """MySQL pages come back as raw bytes and are read into Arrow in one pass (a struct of all
    columns); they must equal the column-by-column conversion and what the driver's own
    converters return, NULLs, extremes, non-ASCII text and binary included."""
    db, table = mysql_backend, mysql_backend.table_name()
    db.execute(f"CREATE TABLE `{table}` ({WIDE_COLUMNS.format(key=key)})")
    prefix = "" if key == "BIGINT" else "k"
    for row in WIDE_ROWS:
        values = [row[0].format(k=prefix), *row[1:]]
        db.execute(f"INSERT INTO `{table}` VALUES ({', '.join(['%s'] * len(values))})", values)
    store = store_for(db.connection, table, "nk")
    rows = store._execute(f"{store._select_sql} ORDER BY `nk`", raw=True)
    assert all(isinstance(v, bytes) for v in rows[0])  # the raw path is the one under test
    page = store.load_range(store.page_map().bounds[0], 10)
    by_column = store._page_of(store.key_type.from_db([r[0] for r in rows]), list(zip(*rows))[1:])
    assert np.array_equal(page.keys, by_column.keys) and page.rows.equals(by_column.rows)
    expected = db.execute(f"SELECT * FROM `{table}` ORDER BY `nk`")
    got = page.rows.to_pylist()
    for want, have in zip(expected, got):
        for name, value in zip(["i", "b", "d", "m", "day", "at", "s", "t", "raw"], want[1:]):
            assert have[name] == value, (name, have[name], value)


@pytest.mark.mysql
def test_a_raw_value_arrow_cannot_read_names_its_column(mysql_backend):
    db, table = mysql_backend, mysql_backend.table_name()
    db.execute(f"CREATE TABLE `{table}` (nk BIGINT PRIMARY KEY, v INT, day DATE)")
    db.execute("SET SESSION sql_mode = ''")  # lets MariaDB store the zero date, which no calendar has
    db.execute(f"INSERT INTO `{table}` VALUES (1, 5, '2024-01-01'), (2, 6, '0000-00-00')")
    store = store_for(db.connection, table, "nk")
    with pytest.raises(StoreError, match=r"^select: column 'day' of '.*' holds a value that is not date32"):
        store.load_range(1, 10)


def test_leaf_rows_are_the_rows_a_leaf_of_the_keys_index_holds(backend):
    """R of ~120-byte rows: InnoDB's 16 KiB leaves of the clustered index and SQLite's 4 KiB
    b-tree pages hold about page / row rows; a secondary index reaches each row through the
    primary key on MariaDB, one leaf a row."""
    rows = master_table(5000)
    store = backend.make_master(rows)
    if backend.name == "mysql":
        backend.execute(f"ANALYZE TABLE {backend.quote(store.table)}")
        assert 16384 / 600 < store.leaf_rows() < 16384 / 60  # a small R's data length counts whole extents
        secondary = backend.make_master(rows.append_column("id", pa.array(np.arange(5000))), primary_key="id")
        assert secondary.leaf_rows() == 1.0
    else:
        page_size = backend.connection.execute("PRAGMA page_size").fetchone()[0]
        assert store.leaf_rows() == pytest.approx(page_size / store.row_bytes())
        assert 4 < store.leaf_rows() < page_size / 60
