"""A type-2 dimension: R of :mod:`.master` with a row per version of a natural key.

Each natural key's versions are valid over consecutive half-open spans ``[valid_from,
valid_to)``, the last one open (``valid_to`` NULL); each version has a surrogate key of its own
and a ``city`` (a customer moving: the as-of lookups of ``core/asof.py`` pick the version valid
at a tuple's event time). The first version is valid from the row's ``created`` date; a
``share`` of the keys has 1 .. ``max_versions - 1`` later versions, which start at instants
drawn in ``[changes_from, changes_to)`` (epoch seconds). Times are ISO text in UTC
(``2026-01-01 00:00:12.345678``), which SQLite keeps and the as-of lookups read as instants.
"""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.checks import check_int, check_number
from ..core.stores.sql import DatabaseURL, check_identifier, write_table
from .master import check_seed, master_table

CITIES = np.array(["Lahore", "Auckland", "Berlin", "Nairobi", "Osaka", "Lima", "Porto", "Quebec", "Tartu", "Perth",
                   "Bergen", "Cusco", "Dakar", "Hanoi", "Izmir", "Split"])
TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


def iso_utc(seconds: float) -> str:
    """Epoch seconds as the dimension's ISO text (UTC, microseconds)."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime(TIME_FORMAT)


def versioned_table(n_rows: int, *, share: float, max_versions: int, changes_from: float, changes_to: float,
                    seed: int = 0) -> pa.Table:
    """R of ``n_rows`` natural keys (:func:`.master.master_table`) with ``valid_from``,
    ``valid_to`` and ``city``, and later versions for a ``share`` of the keys (see the module
    docstring). Surrogate keys of later versions follow R's: ``n_rows + 1``, ... Rows are in
    (natural key, valid_from) order."""
    check_number("share", share, "a fraction between 0 and 1", minimum=0, maximum=1)
    max_versions = check_int(max_versions, "max_versions", minimum=1)
    check_number("changes_to", changes_to, f"a time after changes_from ({changes_from})", above=changes_from)
    base = master_table(n_rows, seed=seed)
    rng = np.random.default_rng([check_seed(seed), 2])
    later = np.where(rng.random(n_rows) < share, rng.integers(1, max_versions, n_rows), 0) if max_versions > 1 \
        else np.zeros(n_rows, np.int64)
    versions = later + 1
    row_of = np.repeat(np.arange(n_rows), versions)  # a row per version, in key order
    first = np.r_[0, np.cumsum(versions)[:-1]]
    rank = np.arange(len(row_of)) - np.repeat(first, versions)  # 0 for a key's first version
    starts = np.sort(rng.uniform(changes_from, changes_to, (n_rows, max(1, max_versions - 1))), axis=1)
    begins = np.where(rank > 0, starts[row_of, np.maximum(rank - 1, 0)], np.nan)
    ends = np.r_[begins[1:], np.nan]
    ends[np.r_[rank[1:] == 0, True]] = np.nan  # a key's last version is open
    created = base["created"].to_pylist()
    valid_from = [created[r] + " 00:00:00.000000" if k == 0 else iso_utc(b) for r, k, b in zip(row_of, rank, begins)]
    valid_to = [None if np.isnan(e) else iso_utc(e) for e in ends]
    sk = np.where(rank == 0, base["sk"].to_numpy()[row_of], 0)
    sk[rank > 0] = n_rows + 1 + np.arange(int((rank > 0).sum()))
    rows = base.take(pa.array(row_of))
    rows = rows.set_column(rows.schema.get_field_index("sk"), "sk", pa.array(sk, pa.int64()))
    cities = pc.take(pa.array(CITIES), pa.array(rng.integers(0, len(CITIES), len(row_of))))
    return rows.append_column("city", cities).append_column("valid_from", pa.array(valid_from, pa.string())) \
        .append_column("valid_to", pa.array(valid_to, pa.string()))


def generate_versioned_master(url: str, table: str, n_rows: int, **options) -> int:
    """Write :func:`versioned_table` into ``table`` (primary key ``sk``, an index on
    ``(nk, valid_from)``, the one an as-of lookup reads by); returns its rows."""
    check_identifier(table, "table")
    rows = versioned_table(n_rows, **options)
    connection = DatabaseURL.parse(url).connect()
    try:
        write_table(connection, table, rows, primary_key="sk")
        q = DatabaseURL.parse(url).dialect.quote
        cursor = connection.cursor()
        cursor.execute(f"CREATE INDEX {q(table + '_nk_valid_from')} ON {q(table)} ({q('nk')}, {q('valid_from')})")
        connection.commit()
        cursor.close()
    finally:
        connection.close()
    return rows.num_rows
