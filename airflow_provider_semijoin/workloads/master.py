"""The master-data relation R of the papers, generated and loaded into a database.

R is a product dimension like the papers' (HYBRIDJOIN Table 2: about 120-byte tuples; SSJ: a
TPC-H-like customer/product table): a natural key ``nk`` (the business key the stream carries),
a surrogate key ``sk`` (what surrogate-key replacement looks up) and descriptive columns.

Keys of R are the odd numbers ``2*i + 1`` (or their spelling ``"P-%09d"``), in key order, so the
even numbers between them are guaranteed absent: :func:`absent_key` makes stream keys that miss
R but still fall between R's keys, at a chosen position, which is how the workloads make
*missing* keys with the same skew as present ones.

Everything is vectorised (numpy / pyarrow compute): 2,000,000 rows generate in about a second.
"""

from __future__ import annotations

import datetime as _dt
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.checks import check_int
from ..core.errors import ConfigError
from ..core.stores.sql import DatabaseURL, check_identifier, dialect_of, write_table

KEY_TYPES = ("int", "str")
STR_KEY_FORMAT = "P-%09d"
# the largest int key that still has 9 digits, so string keys sort like int keys
_MAX_STR_ROWS = 500_000_000

DATASETS_TABLE = "semijoin_datasets"

_ADJECTIVES = np.array(
    ["Classic", "Compact", "Deluxe", "Durable", "Elegant", "Premium", "Rugged", "Modern",
     "Portable", "Vintage", "Organic", "Smart", "Wireless", "Heavy", "Ultra", "Eco"]
)
_COLOURS = np.array(
    ["Red", "Blue", "Green", "Black", "White", "Silver", "Golden", "Orange", "Purple", "Grey",
     "Navy", "Olive"]
)
_NOUNS = np.array(
    ["Blender", "Backpack", "Lantern", "Speaker", "Kettle", "Monitor", "Jacket", "Notebook",
     "Toaster", "Headset", "Drill", "Teapot", "Sneaker", "Router", "Cushion", "Scooter"]
)
_CATEGORIES = np.array(
    ["Electronics", "Home Kitchen", "Garden Tools", "Sports Gear", "Toys & Games",
     "Office Items", "Pet Supplies", "Auto Parts", "Beauty Care", "Health Care",
     "Books Media", "Music Instr", "Baby Product", "Grocery Food", "Clothing Men",
     "Clothing Wmn", "Shoes & Bags", "Jewellery", "Furniture", "Hardware DIY"]
)
_BRANDS = np.array(
    ["Acme", "Globex", "Initech", "Umbrella", "Stark", "Wayne", "Wonka", "Tyrell", "Cyberdyne",
     "Hooli", "Vandelay", "Soylent", "Gringotts", "Oscorp", "Pied Piper", "Aperture",
     "Black Mesa", "Monarch", "Nakatomi", "Virtucon", "Dunder", "Prestige", "Zorg", "Oceanic",
     "Massive", "Vehement", "Kruger", "Sirius", "Buy n Large", "Spacely", "Cogswell", "Gekko",
     "Duff", "Ollivander", "Krusty", "Bluth", "Sterling", "Wernham", "Strickland", "Bubba"]
)
_EPOCH_DAYS = (_dt.date(2010, 1, 1) - _dt.date(1970, 1, 1)).days
_CREATED_SPAN_DAYS = 5000  # created dates fall in 2010-01-01 .. 2023-09-09


# ---------------------------------------------------------------------------------------------
# argument checks shared by the workload generators


def check_key_type(key_type) -> str:
    if key_type not in KEY_TYPES:
        raise ConfigError(f"key_type: {key_type!r} is not one of {list(KEY_TYPES)}")
    return key_type


def check_seed(seed) -> int:
    return check_int(seed, "seed", minimum=0)


def _check_rows(n_rows, key_type: str, what: str = "n_rows") -> int:
    maximum = _MAX_STR_ROWS if key_type == "str" else (2**62)
    return check_int(n_rows, what, minimum=0, maximum=maximum)


# ---------------------------------------------------------------------------------------------
# keys


def _spell(numbers_: np.ndarray) -> pa.Array:
    """Integers -> their ``"P-%09d"`` spelling as an Arrow string array (vectorised)."""
    digits = pc.cast(pa.array(numbers_, pa.int64()), pa.string())
    return pc.binary_join_element_wise("P-", pc.utf8_lpad(digits, width=9, padding="0"), "")


def key_array(positions: np.ndarray, key_type: str, *, absent: bool = False) -> pa.Array:
    """The keys at ``positions`` of R (or the absent keys just below them) as an Arrow array.

    ``int`` keys are int64, ``str`` keys are strings; this is what stream and master tables hold.
    """
    positions = np.asarray(positions, dtype=np.int64)
    numbers_ = 2 * positions if absent else 2 * positions + 1
    if key_type == "int":
        return pa.array(numbers_, pa.int64())
    return _spell(numbers_)


def _to_numpy(keys: pa.Array, key_type: str) -> np.ndarray:
    if key_type == "int":
        return keys.to_numpy()
    # every spelled key is exactly 11 ASCII bytes: the data buffer is an S11 array as it is
    keys = pa.concat_arrays([keys])  # offset 0, compact buffers
    data = keys.buffers()[2]
    fixed = np.frombuffer(data, dtype="S11", count=len(keys)) if len(keys) else np.empty(0, "S11")
    return fixed.astype("U11")


def master_keys(n_rows: int, key_type: str = "int") -> np.ndarray:
    """The natural keys of R in key order: ``2*i + 1`` (int64) or ``"P-%09d" % (2*i + 1)``.

    String keys are a numpy unicode array (``U11``): zero-padded, so they sort like the ints.
    """
    check_key_type(key_type)
    n_rows = _check_rows(n_rows, key_type)
    return _to_numpy(key_array(np.arange(n_rows, dtype=np.int64), key_type), key_type)


def absent_key(index, key_type: str = "int"):
    """A key never in R: ``2*index`` (or its ``"P-%09d"`` spelling), just below R's key at
    position ``index``. Vectorised: an array of indexes gives an array of keys, a scalar a scalar.
    Index 0 gives 0 / ``"P-000000000"``, below R's smallest key."""
    check_key_type(key_type)
    scalar = np.ndim(index) == 0
    indexes = np.atleast_1d(np.asarray(index))
    if indexes.size and not np.issubdtype(indexes.dtype, np.integer):
        raise ConfigError(f"index: {index!r} is not an integer or an array of integers")
    if indexes.size and indexes.min() < 0:
        raise ConfigError(f"index: {int(indexes.min())} must be >= 0")
    if key_type == "str" and indexes.size and indexes.max() >= _MAX_STR_ROWS:
        raise ConfigError(f"index: {int(indexes.max())} must be < {_MAX_STR_ROWS} for string keys")
    keys = _to_numpy(key_array(indexes.astype(np.int64), key_type, absent=True), key_type)
    return keys[0] if scalar else keys


# ---------------------------------------------------------------------------------------------
# the table


def _pick(words: np.ndarray, rng: np.random.Generator, n: int) -> pa.Array:
    return pc.take(pa.array(words), pa.array(rng.integers(0, len(words), n)))


def master_table(n_rows: int, *, key_type: str = "int", seed: int = 0) -> pa.Table:
    """R with ``n_rows`` rows in key order, about 120 bytes per row, reproducible by ``seed``.

    Columns: ``nk`` (natural key, int64 or string), ``sk`` (surrogate key: a seeded random
    permutation of 1..n_rows, not derivable from nk), ``name`` (~35 chars), ``category``
    (~12 chars, one of 20), ``brand``, ``price`` (2 decimals), ``weight_kg``, ``created``
    (ISO date string).
    """
    check_key_type(key_type)
    n_rows = _check_rows(n_rows, key_type)
    rng = np.random.default_rng(check_seed(seed))
    positions = np.arange(n_rows, dtype=np.int64)

    sk = rng.permutation(n_rows).astype(np.int64) + 1
    width = max(6, len(str(n_rows)))
    number = pc.utf8_lpad(pc.cast(pa.array(positions + 1), pa.string()), width=width, padding="0")
    name = pc.binary_join_element_wise(
        "Product",
        number,
        _pick(_ADJECTIVES, rng, n_rows),
        _pick(_COLOURS, rng, n_rows),
        _pick(_NOUNS, rng, n_rows),
        " ",
    )
    category = _pick(_CATEGORIES, rng, n_rows)
    brand = _pick(_BRANDS, rng, n_rows)
    price = np.round(np.maximum(rng.lognormal(3.0, 1.0, n_rows), 0.5), 2)
    weight = np.round(rng.lognormal(0.0, 1.0, n_rows), 3)
    days = (_EPOCH_DAYS + rng.integers(0, _CREATED_SPAN_DAYS, n_rows)).astype(np.int32)
    created = pc.cast(pa.array(days, pa.date32()), pa.string())

    return pa.table(
        {
            "nk": key_array(positions, key_type),
            "sk": pa.array(sk, pa.int64()),
            "name": name,
            "category": category,
            "brand": brand,
            "price": pa.array(price, pa.float64()),
            "weight_kg": pa.array(weight, pa.float64()),
            "created": created,
        }
    )


# ---------------------------------------------------------------------------------------------
# loading into a database, with bookkeeping so a benchmark can reuse what is already there


def _ensure_datasets_table(cursor, dialect) -> None:
    text = "VARCHAR(64)" if dialect.name == "mysql" else "TEXT"
    engine = " ENGINE=InnoDB" if dialect.name == "mysql" else ""
    cursor.execute(
        f"CREATE TABLE IF NOT EXISTS {dialect.quote(DATASETS_TABLE)} ("
        f"{dialect.quote('table_name')} {text} NOT NULL PRIMARY KEY, "
        f"{dialect.quote('n_rows')} BIGINT NOT NULL, "
        f"{dialect.quote('key_type')} {text} NOT NULL, "
        f"{dialect.quote('seed')} BIGINT NOT NULL, "
        f"{dialect.quote('created_at')} {text} NOT NULL){engine}"
    )


def _table_exists(cursor, dialect, table: str) -> bool:
    if dialect.name == "mysql":
        sql = "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s"
    else:
        sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    cursor.execute(sql, (table,))
    return cursor.fetchone() is not None


def _recorded(cursor, dialect, table: str):
    q = dialect.quote
    cursor.execute(
        f"SELECT {q('n_rows')}, {q('key_type')}, {q('seed')}, {q('created_at')} "
        f"FROM {q(DATASETS_TABLE)} WHERE {q('table_name')} = {dialect.param}",
        (table,),
    )
    return cursor.fetchone()


def generate_master(
    target,
    table: str = "master",
    n_rows: int = 100_000,
    *,
    key_type: str = "int",
    seed: int = 0,
    reuse: bool = True,
) -> dict:
    """Write :func:`master_table` into ``table`` (primary key ``nk``) and record it.

    ``target`` is a database URL (``sqlite:///path.db``, ``mysql://user:pass@host:port/db``) or
    an open DB-API connection (left open). What was written is recorded in ``semijoin_datasets``
    (table_name, n_rows, key_type, seed, created_at). With ``reuse``, a table whose record
    matches and whose ``COUNT(*)`` is ``n_rows`` is left as it is. Returns table, n_rows,
    key_type, seed, reused, created_at and the seconds taken (total, generate, write).
    """
    check_identifier(table, "table")
    if table == DATASETS_TABLE:
        raise ConfigError(f"table: {table!r} is the bookkeeping table; choose another name")
    check_key_type(key_type)
    n_rows = _check_rows(n_rows, key_type)
    seed = check_seed(seed)
    started = time.perf_counter()
    connection = DatabaseURL.parse(target).connect() if isinstance(target, str) else target
    try:
        dialect = dialect_of(connection)
        q = dialect.quote
        cursor = connection.cursor()
        try:
            _ensure_datasets_table(cursor, dialect)
            record = _recorded(cursor, dialect, table)
            result = {"table": table, "n_rows": n_rows, "key_type": key_type, "seed": seed}
            if (
                reuse
                and record is not None
                and (int(record[0]), record[1], int(record[2])) == (n_rows, key_type, seed)
                and _table_exists(cursor, dialect, table)
            ):
                cursor.execute(f"SELECT COUNT(*) FROM {q(table)}")
                if int(cursor.fetchone()[0]) == n_rows:
                    return {
                        **result,
                        "reused": True,
                        "created_at": record[3],
                        "seconds": time.perf_counter() - started,
                        "generate_seconds": 0.0,
                        "write_seconds": 0.0,
                    }
            # forget the old record first: a write that fails half-way must not look reusable
            delete = f"DELETE FROM {q(DATASETS_TABLE)} WHERE {q('table_name')} = {dialect.param}"
            cursor.execute(delete, (table,))
            connection.commit()
            rows = master_table(n_rows, key_type=key_type, seed=seed)
            generated = time.perf_counter()
            write_table(connection, table, rows, primary_key="nk")
            written = time.perf_counter()
            created_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")
            cursor.execute(
                f"INSERT INTO {q(DATASETS_TABLE)} ({q('table_name')}, {q('n_rows')}, "
                f"{q('key_type')}, {q('seed')}, {q('created_at')}) VALUES ({dialect.placeholders(5)})",
                (table, n_rows, key_type, seed, created_at),
            )
            connection.commit()
        finally:
            cursor.close()
    finally:
        if connection is not target:
            connection.close()
    return {
        **result,
        "reused": False,
        "created_at": created_at,
        "seconds": time.perf_counter() - started,
        "generate_seconds": generated - started,
        "write_seconds": written - generated,
    }
