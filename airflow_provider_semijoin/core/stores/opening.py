"""Opening a store: the store class of a connection's dialect, over a given or a new connection."""

from __future__ import annotations

from .base import MasterStore
from .mysql import MySqlStore
from .sql import SQLITE, DatabaseURL, dialect_of
from .sqlite import SqliteStore


def store_for(connection, table: str, key: str, select: list[str] | None = None) -> MasterStore:
    """A store over an open DB-API connection (sqlite3 or a MySQL driver's)."""
    dialect = dialect_of(connection)
    cls = SqliteStore if dialect is SQLITE else MySqlStore
    return cls(connection, table, key, select)


def open_store(
    url: str, table: str, key: str, select: list[str] | None = None, *, retry_max_s: float | None = None
) -> MasterStore:
    """A store over a new connection to ``url`` (``sqlite:///f.db`` or ``mysql://u:p@h:port/db``);
    on MySQL a lost session is reopened for up to ``retry_max_s`` seconds (:mod:`.reconnect`)."""
    connection = DatabaseURL.parse(url).connect(retry_max_s)
    try:
        return store_for(connection, table, key, select)
    except Exception:
        connection.close()
        raise
