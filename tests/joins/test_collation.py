"""String keys in the key column's own collation, against the database's own join (MariaDB).

The oracle here is not :mod:`.oracle` (which compares text exactly) but the server: the stream
is loaded into a temporary table whose key has R's collation, and ``SELECT ... JOIN ... ON
s.sk = r.nk`` says which (stream row, master row) pairs a join must give. R's keys differ only
in case, accents and trailing spaces (several rows per key under the collation in the 1:K
case); the stream's keys are other spellings of them. MySQL 8's ``utf8mb4_0900_ai_ci`` (NO PAD,
accent- and case-insensitive) is not in MariaDB 10.11: ``utf8mb4_uca1400_nopad_ai_ci`` has its
semantics (a newer UCA), so it stands in for it.
"""

from __future__ import annotations

import uuid
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from contract import JoinContract
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.core.errors import StoreError
from airflow_provider_semijoin.core.joins import ALGORITHMS, create
from airflow_provider_semijoin.core.keys import normalize
from airflow_provider_semijoin.core.runner import run_join
from airflow_provider_semijoin.core.stores import collation as collation_module
from airflow_provider_semijoin.core.stores import create_change_tables, install_changes, store_for
from airflow_provider_semijoin.core.stores.collation import probe

GENERAL = "utf8mb4_general_ci"
OTHERS = [
    "utf8mb4_unicode_ci",
    "utf8mb4_unicode_520_ci",
    "utf8mb4_uca1400_ai_ci",
    "utf8mb4_uca1400_nopad_ai_ci",  # MySQL 8's utf8mb4_0900_ai_ci semantics: NO PAD, ai, ci
    "utf8mb4_general_nopad_ci",
    "utf8mb4_bin",  # binary but PAD SPACE: 'a' = 'a '
]
FAMILIES = ["inlj", "inlist", "hybridjoin", "meshjoin", "cachejoin", "ssij"]  # one of each family
ACCENTS = {"e": "eéèEÉÈ", "a": "aàáAÀÁ", "s": "sS", "o": "oöOÖ"}


def spelling(word: str, rng: np.random.Generator) -> str:
    """Another spelling of ``word``: each letter in a random case or accent, 0-2 trailing spaces."""
    letters = [rng.choice(list(ACCENTS.get(c, c + c.upper()))) for c in word]
    return "".join(letters) + " " * int(rng.integers(0, 3))


def words(n: int, rng: np.random.Generator) -> list[str]:
    """``n`` distinct words under every collation tested (they differ in their digits)."""
    return [f"{rng.choice(list('easo'))}{rng.choice(list('easo'))}{i}" for i in range(n)]


class Master:
    """R with key ``nk`` in ``collation``: unique (a primary key) or 1:K (``id`` primary key)."""

    def __init__(self, backend, collation: str, keys: list[str], unique: bool):
        self.db, self.collation = backend, collation
        self.table = backend.table_name()
        self.param = "%s" if backend.name == "mysql" else "?"
        self.key_sql = f"VARCHAR(60) CHARACTER SET utf8mb4 COLLATE {collation}" if backend.name == "mysql" else f"TEXT COLLATE {collation}"
        backend.execute(
            f"CREATE TABLE {backend.quote(self.table)} (id BIGINT NOT NULL, nk {self.key_sql} NOT NULL, "
            f"PRIMARY KEY ({'nk' if unique else 'id'}))"
        )
        if not unique:
            backend.execute(f"CREATE INDEX ix_{self.table} ON {backend.quote(self.table)} (nk)")
        self.insert(self.table, keys)
        self.store = store_for(backend.connection, self.table, "nk", ["id"])

    def insert(self, table: str, keys: list) -> None:
        cursor = self.db.connection.cursor()
        cursor.executemany(f"INSERT INTO {table} VALUES ({self.param}, {self.param})", list(enumerate(keys)))
        cursor.close()

    def database_join(self, stream_keys: list) -> Counter:
        """(stream row, R's id) pairs of the database's own join under R's collation."""
        temp = f"s{uuid.uuid4().hex[:12]}"
        self.db.execute(f"CREATE TEMPORARY TABLE {temp} (rid BIGINT, sk {self.key_sql})")
        try:
            self.insert(temp, stream_keys)
            pairs = self.db.execute(f"SELECT s.rid, r.id FROM {temp} s JOIN {self.db.quote(self.table)} r ON s.sk = r.nk")
        finally:
            self.db.execute(f"DROP {'TEMPORARY ' if self.db.name == 'mysql' else ''}TABLE {temp}")
        return Counter((int(rid), int(i)) for rid, i in pairs)

    def assert_exact(self, algorithm: str, stream_keys: list, page_rows: int = 4) -> dict:
        """Run ``algorithm`` (on about twice its smallest budget) and compare with the database."""
        settings_ = {"page_rows": page_rows} if "page_rows" in ALGORITHMS[algorithm].params else {}
        memory = 2 * _Budget(algorithm, settings_).smallest_budget(self.store)
        stream = pa.table({"rid": pa.array(np.arange(len(stream_keys))), "sk": pa.array(stream_keys, pa.string())})
        run = run_join(create(algorithm, self.store, memory, settings_), stream, "sk")
        expected = self.database_join(stream_keys)
        got = Counter(zip(run.matched["rid"].to_pylist(), run.matched["id"].to_pylist()))
        assert got == expected, f"{algorithm}: {sorted((got - expected).items())[:5]} / {sorted((expected - got).items())[:5]}"
        reasons = dict(zip(run.unmatched["rid"].to_pylist(), run.unmatched["reason"].to_pylist()))
        hit = {rid for rid, _ in expected}
        assert reasons == {
            rid: "null_key" if key is None else "not_in_master" for rid, key in enumerate(stream_keys) if rid not in hit
        }
        assert run.stats["exactly_once"]
        return run.stats


class _Budget(JoinContract):
    """JoinContract's smallest-budget search for one algorithm and its settings."""

    def __init__(self, algorithm: str, params: dict):
        self.algorithm, self.params = algorithm, params


def stream_for(bases: list[str], rng: np.random.Generator, n: int) -> list:
    """Spellings of R's words, words R has not, and a few nulls."""
    absent = [f"zz{i}" for i in range(20)] + ["", "  "]
    keys = [spelling(str(rng.choice(bases)), rng) for _ in range(n)]
    keys += [str(rng.choice(absent)) for _ in range(n // 10)] + [None, None]
    return [keys[i] for i in rng.permutation(len(keys))]


@pytest.fixture(scope="module")
def general(module_mysql_backend):
    """A unique and a 1:K master in utf8mb4_general_ci, and a stream of other spellings."""
    db = module_mysql_backend
    rng = np.random.default_rng(14)
    bases = words(150, rng)
    unique = Master(db, GENERAL, [spelling(w, rng) for w in bases], unique=True)
    one_to_k = Master(db, GENERAL, [spelling(w, rng) for w in bases for _ in range(int(rng.integers(1, 4)))], unique=False)
    return {"unique": unique, "1:K": one_to_k, "stream": stream_for(bases, rng, 400)}


@pytest.mark.mysql
@pytest.mark.parametrize("shape", ["unique", "1:K"])
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_every_algorithm_joins_as_the_database_does_in_general_ci(general, algorithm, shape):
    master = general[shape]
    assert master.store.key_unique is (shape == "unique")
    assert master.store.max_rows_per_key > (1 if shape == "1:K" else 0)
    stats = master.assert_exact(algorithm, general["stream"])
    assert stats["tuples_matched"] > 300  # most spellings find their word


@pytest.mark.mysql
@pytest.mark.parametrize("collation", OTHERS)
def test_other_collations_join_as_the_database_does(mysql_backend, collation):
    rng = np.random.default_rng(len(collation))
    bases = words(60, rng) + ["ß", "ss", "straße", "strasse", "æ", "ae", "ǆ", "dž", "😀", "a\t", "a"]
    master = Master(mysql_backend, collation, [spelling(w, rng) for w in bases for _ in range(2)], unique=False)
    stream = stream_for(bases, rng, 150) + ["SS", "STRASSE ", "Straße", "AE", "Ǆ", "😀 ", "a\t ", "A "]
    assert (master.store.key_type.collation.per_char is not None) is (collation == "utf8mb4_general_nopad_ci")
    for algorithm in FAMILIES:
        master.assert_exact(algorithm, stream)


TEXT = st.lists(st.sampled_from(list("aAbBeéÉEsSß \t") + ["ss", "😀"]), max_size=5).map("".join)


@pytest.mark.mysql
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    keys=st.lists(TEXT, min_size=1, max_size=30),
    stream=st.lists(st.one_of(TEXT, st.none()), max_size=40),
    collation=st.sampled_from([GENERAL, "utf8mb4_unicode_ci", "utf8mb4_uca1400_nopad_ai_ci"]),
    algorithm=st.sampled_from(["inlj", "hybridjoin", "meshjoin", "ssij", "cachejoin"]),
)
def test_random_strings_join_as_the_database_does(mysql_backend, keys, stream, collation, algorithm):
    master = Master(mysql_backend, collation, keys, unique=False)
    master.assert_exact(algorithm, stream, page_rows=2)


@pytest.fixture(scope="module")
def per_char(module_mysql_backend):
    """The two collations whose stream keys are weighed here, not by the server (12 characters wide)."""
    db = module_mysql_backend
    collations = [probe(db.execute, "r", "nk", name, "utf8mb4") for name in (GENERAL, "utf8mb4_general_nopad_ci")]
    for collation in collations:
        collation.width = 24
    return collations


@pytest.mark.mysql
@settings(max_examples=30, deadline=None)
@given(texts=st.lists(st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=14), min_size=1, max_size=40))
def test_general_ci_stream_keys_are_weighed_here_as_the_server_weighs_them(per_char, texts):
    """Every BMP character's weight comes from the server (one query); this checks that a
    string's sort key is their concatenation, supplementary characters weigh U+FFFD, and the
    padding: against the server's WEIGHT_STRING of the whole strings."""
    for collation in per_char:
        assert collation.per_char is not None
        here, long_here = collation._weighed_here(pa.array(texts, pa.string()))
        there, long_there = collation.padded(collation._weigh(texts))
        assert here.tolist() == there.tolist() and long_here.tolist() == long_there.tolist()


@pytest.mark.mysql
def test_keys_whose_text_is_no_longer_kept_are_looked_up_through_their_page(general, monkeypatch):
    """INLJ and the IN list bind a stream key's text; with only 5 texts kept, most lookups go
    through the key's page, and the join is the same."""
    monkeypatch.setattr(collation_module, "TEXTS_KEPT", 5)
    for algorithm in ["inlj", "inlist"]:
        general["1:K"].assert_exact(algorithm, general["stream"])


@pytest.mark.mysql
def test_an_in_list_of_keys_kept_and_not_kept_gives_every_row_of_each(general, monkeypatch):
    master = general["1:K"]
    spelled = [r[0] for r in master.db.execute(f"SELECT DISTINCT nk FROM `{master.table}` LIMIT 40")]
    older, newer = [k.upper() for k in spelled[:20]], [k.lower() + "  " for k in spelled[20:]]
    monkeypatch.setattr(collation_module, "TEXTS_KEPT", 25)  # the newer batch only
    keys = [normalize(pa.array(batch), master.store.key_type).keys for batch in (older, newer)]
    collation = master.store.key_type.collation
    assert (collation.texts_of(keys[0]) == None).all() and (collation.texts_of(keys[1]) != None).all()  # noqa: E711
    found = master.store.lookup_many(np.unique(np.concatenate(keys)))
    expected = master.db.execute(f"SELECT id FROM `{master.table}` WHERE nk IN ({', '.join(['%s'] * len(spelled))})", spelled)
    assert sorted(found.rows["id"].to_pylist()) == sorted(r[0] for r in expected)
    assert (found.keys[:-1] <= found.keys[1:]).all()


@pytest.mark.mysql
def test_sort_keys_order_as_the_index_does(general):
    """Page by page, R's sort keys come back in order and each page holds its map's key range."""
    store = general["1:K"].store
    page_map = store.page_map(7)
    for page in range(page_map.n_pages):
        keys = store.load_pages(page_map, page).keys
        assert len(keys) and (keys[:-1] <= keys[1:]).all()
        assert (page_map.page_of(keys) == page).all()
    assert sum(len(store.load_pages(page_map, p)) for p in range(page_map.n_pages)) == store.n_rows


@pytest.mark.mysql
def test_a_multi_level_collation_is_refused(mysql_backend):
    with pytest.raises(StoreError, match=r"^key: column 'nk' of '\w+' has collation utf8mb4_uca1400_as_cs, which weighs several levels"):
        Master(mysql_backend, "utf8mb4_uca1400_as_cs", ["a", "A"], unique=True)


@pytest.mark.mysql
def test_another_character_set_is_refused(mysql_backend):
    with pytest.raises(StoreError, match=r"^key: column 'nk' of '\w+' has character set latin1; expected utf8mb4"):
        table = mysql_backend.table_name()
        mysql_backend.execute(
            f"CREATE TABLE `{table}` (nk VARCHAR(10) CHARACTER SET latin1 COLLATE latin1_swedish_ci PRIMARY KEY)"
        )
        store_for(mysql_backend.connection, table, "nk")


@pytest.mark.parametrize("shape", ["unique", "1:K"])
@pytest.mark.parametrize("collation", ["NOCASE", "RTRIM"])
def test_sqlite_nocase_and_rtrim_keys_join_as_sqlite_does(sqlite_backend, collation, shape):
    rng = np.random.default_rng(7)
    bases = words(80, rng)
    times = 1 if shape == "unique" else 3
    master = Master(sqlite_backend, collation, [spelling(w, rng) for w in bases for _ in range(times)], shape == "unique")
    assert master.store.key_type.collation.name == collation
    stream = stream_for(bases, rng, 200) + ["A\t", "a\t  "]
    for algorithm in FAMILIES:
        master.assert_exact(algorithm, stream)


def test_sqlite_key_indexes_in_two_collations_are_refused(sqlite_backend):
    table = sqlite_backend.table_name()
    sqlite_backend.execute(f'CREATE TABLE "{table}" (nk TEXT NOT NULL)')
    sqlite_backend.execute(f'CREATE INDEX a_{table} ON "{table}" (nk COLLATE NOCASE)')
    sqlite_backend.execute(f'CREATE INDEX b_{table} ON "{table}" (nk COLLATE RTRIM)')
    with pytest.raises(StoreError, match=r"^key: the indexes of '\w+' on 'nk' have collations \['NOCASE', 'RTRIM'\]; expected one of"):
        store_for(sqlite_backend.connection, table, "nk")


@pytest.mark.mysql
@pytest.mark.parametrize("algorithm", ["cachejoin", "ssij", "inlist-lru"])
def test_updates_of_keys_the_collation_calls_equal(mysql_backend, algorithm):
    """A batch deleting 'Abc' and upserting 'aBc ' replaces every row of that key ('abc' and
    'ABC ') in one version, and upserting 'STRAßE' replaces 'Straße'; cached rows of the keys
    are dropped; each run equals the database's join with the version it saw."""
    master = Master(mysql_backend, GENERAL, ["abc", "ABC ", "xyz", "Straße"], unique=False)
    create_change_tables(mysql_backend.connection, master.table, "nk")
    stream = ["ABC", "xyz ", "abc", "STRASSE", "straße"] * 3
    params = {"page_rows": 2} if "page_rows" in ALGORITHMS[algorithm].params else {}
    if algorithm == "ssij":  # phases of 3 tuples: the last phase of a run keeps no page, the ones before do
        params.update(ib_thresh=3, sb_thresh=3)
    join = create(algorithm, master.store, 1 << 20, params)

    def assert_exact() -> dict:
        table = pa.table({"rid": pa.array(np.arange(len(stream))), "sk": pa.array(stream)})
        run = run_join(join, table, "sk")
        assert Counter(zip(run.matched["rid"].to_pylist(), run.matched["id"].to_pylist())) == master.database_join(stream)
        return run.stats

    assert_exact()
    changes = pa.table({"op": ["D", "U", "U"], "nk": ["Abc", "aBc ", "STRAßE"], "id": [None, 10, 11]})
    installed = install_changes(mysql_backend.connection, master.table, "nk", changes)
    assert (installed.keys, installed.rows) == (2, 3)
    assert sorted(mysql_backend.execute(f"SELECT id, nk FROM `{master.table}`")) == [(2, "xyz"), (10, "aBc "), (11, "STRAßE")]
    stats = assert_exact()
    assert stats["master_version"] == installed.version and stats["invalidated"] > 0  # keys or pages dropped
