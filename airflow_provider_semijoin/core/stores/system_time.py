"""MariaDB system-versioned tables (``WITH SYSTEM VERSIONING``) read as type-2 dimensions.

A system-versioned table keeps every row it ever held: an UPDATE or DELETE closes the current
row's system period ``[ROW_START, ROW_END)`` at the commit's time and (an UPDATE) adds the new
row from then on; the current row's ``ROW_END`` is the largest TIMESTAMP(6) (2038-01-19
03:14:07.999999 UTC on MariaDB 10.11). Its plain SELECTs see the current rows only;
``FOR SYSTEM_TIME ALL`` sees every version.

A store whose ``select`` names :data:`ROW_START` and :data:`ROW_END` reads R ``FOR SYSTEM_TIME
ALL``, the period columns under those internal names, as UTC instants (whatever the session's
time zone), the current row's end as NULL (still valid): the as-of lookups of
:mod:`..asof` then pick, per tuple, the version whose system period holds its event time, as
they do for ``valid_from``/``valid_to`` columns - every algorithm, its equality path and the
pick. Without those names a store reads the current rows, as the table's own SELECT does.

The period columns are found in the catalogue: ``information_schema.TABLES.TABLE_TYPE`` is
``SYSTEM VERSIONED``; explicit ones are the COLUMNS whose ``GENERATION_EXPRESSION`` is ``ROW
START`` / ``ROW END``, implicit ones (not in COLUMNS) are named ``ROW_START`` / ``ROW_END``.
"""

from __future__ import annotations

from ..errors import ConfigError, StoreError
from .sql import SQLITE, dialect_of, query_rows

ROW_START = "sj_row_start"  # the internal names a store reads the period columns under
ROW_END = "sj_row_end"
PERIOD_NAMES = (ROW_START, ROW_END)
OPEN_END_EPOCH = 2_147_483_647  # a ROW_END at or after 2038-01-19 03:14:07 UTC: the current row


def system_period(connection, table: str) -> tuple[str, str] | None:
    """The period columns ``(row start, row end)`` of ``table`` when it is system-versioned by
    time (MariaDB), else None (SQLite: never)."""
    if dialect_of(connection) is SQLITE:
        return None
    kind = query_rows(connection, "SELECT TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
                                  "AND TABLE_NAME = %s", (table,))
    if not kind or kind[0][0] != "SYSTEM VERSIONED":
        return None
    explicit = dict(query_rows(
        connection, "SELECT GENERATION_EXPRESSION, COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
                    "DATABASE() AND TABLE_NAME = %s AND GENERATION_EXPRESSION IN ('ROW START', 'ROW END')", (table,)))
    return explicit.get("ROW START", "ROW_START"), explicit.get("ROW END", "ROW_END")


def table_type(connection, table: str) -> str:
    """``information_schema.TABLES.TABLE_TYPE`` of ``table`` (SQLite: ``BASE TABLE``)."""
    if dialect_of(connection) is SQLITE:
        return "BASE TABLE"
    rows = query_rows(connection, "SELECT TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
                                  "AND TABLE_NAME = %s", (table,))
    return rows[0][0] if rows else "BASE TABLE"


def period_of(connection, table: str) -> tuple[str, str]:
    """The period columns of system-versioned ``table``, read as :data:`PERIOD_NAMES`; a
    StoreError (one sentence, no field: the caller names it) when it has none or they count
    transactions rather than time."""
    if dialect_of(connection) is SQLITE:
        raise StoreError(f"SQLite has no system-versioned tables ({table!r}); expected a MariaDB table "
                         "WITH SYSTEM VERSIONING")
    period = system_period(connection, table)
    if period is None:
        raise StoreError(f"table {table!r} is not system-versioned (its TABLE_TYPE is "
                         f"{table_type(connection, table)!r}); expected a table created WITH SYSTEM VERSIONING")
    types = dict(query_rows(connection, "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE "
                                        "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s", (table,)))
    if any(types.get(column, "timestamp") != "timestamp" for column in period):
        raise StoreError(f"table {table!r} is versioned by transaction ({period[0]!r} is {types[period[0]]}); "
                         "expected one versioned by time (TIMESTAMP(6) period columns)")
    return period


def check_declared(connection, table: str, system_time: bool, version_columns: tuple[str, str]) -> None:
    """An as-of lookup's declaration agrees with R, before work starts: ``system_time`` on a
    table system-versioned by time, ``valid_from``/``valid_to`` (``version_columns``) on any
    other - on a system-versioned one they would see its current rows only."""
    if system_time:
        try:
            period_of(connection, table)
        except StoreError as exc:
            raise ConfigError(f"as_of.system_time: {exc}") from None
        return
    period = system_period(connection, table)
    if period is not None:
        raise ConfigError(f"as_of: table {table!r} is system-versioned (period columns {period[0]!r}, {period[1]!r}); "
                          f"expected system_time: true instead of valid_from/valid_to {version_columns[0]!r}, "
                          f"{version_columns[1]!r}, which would see its current rows only")


def period_sql(store, name: str) -> str:
    """The SELECT item of ``name`` (one of :data:`PERIOD_NAMES`): the period column as a UTC
    DATETIME(6) - its epoch seconds from 1970 - and the current row's end as NULL."""
    column = store.dialect.quote(store.period[PERIOD_NAMES.index(name)])
    utc = f"DATE_ADD(TIMESTAMP'1970-01-01 00:00:00', INTERVAL UNIX_TIMESTAMP({column}) SECOND)"
    return utc if name == ROW_START else f"IF(UNIX_TIMESTAMP({column}) >= {OPEN_END_EPOCH}, NULL, {utc})"


def history_columns(store) -> list[str]:
    """The period columns of a system-versioned R that its catalogued columns lack (implicit
    ones are invisible to information_schema.COLUMNS): its before-images
    (:mod:`.versions`) keep them beside the others, so a read at an older version has every
    version with its period."""
    names = {c.name for c in store.columns}
    return [c for c in store.system_period or () if c not in names]


def add_history_columns(cursor, store, before: str) -> None:
    """R's before-images table ``before`` (quoted) has the period columns of a system-versioned
    R, as TIMESTAMP(6): added to one made before R was versioned."""
    if store.system_period is None:
        return
    cursor.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
                   "AND TABLE_NAME = %s", (before.strip("`"),))
    present = {row[0] for row in cursor.fetchall()}
    for column in store.system_period:
        if column not in present:
            cursor.execute(f"ALTER TABLE {before} ADD COLUMN {store.dialect.quote(column)} TIMESTAMP(6) NULL")


def current_rows_sql(store, alias: str) -> str:
    """A condition keeping, of before-images ``alias`` of a system-versioned R, the rows that
    were current (a store that reads R's current rows: every version is kept there)."""
    if store.system_period is None or store.period is not None:
        return ""
    end = f"{alias}.{store.dialect.quote(store.system_period[1])}"
    return f" AND UNIX_TIMESTAMP({end}) >= {OPEN_END_EPOCH}"
