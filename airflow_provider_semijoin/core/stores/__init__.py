"""Master-data stores: the disk-based relation R (see :mod:`.base` for the protocol)."""

from __future__ import annotations

from .base import DEFAULT_PAGE_ROWS, IOCounters, MasterPage, MasterStore, PageMap
from .changes import Installed, create_change_tables, install_changes, pending_changes, stage_changes
from .mysql import MySqlStore
from .sql import MYSQL, SQLITE, DatabaseURL, dialect_of, redact, write_table
from .sqlite import SqliteStore


def store_for(connection, table: str, key: str, select: list[str] | None = None) -> MasterStore:
    """A store over an open DB-API connection (sqlite3 or a MySQL driver's)."""
    dialect = dialect_of(connection)
    cls = SqliteStore if dialect is SQLITE else MySqlStore
    return cls(connection, table, key, select)


def open_store(url: str, table: str, key: str, select: list[str] | None = None) -> MasterStore:
    """A store over a new connection to ``url`` (``sqlite:///f.db`` or ``mysql://u:p@h:port/db``)."""
    connection = DatabaseURL.parse(url).connect()
    try:
        return store_for(connection, table, key, select)
    except Exception:
        connection.close()
        raise


__all__ = [
    "DEFAULT_PAGE_ROWS",
    "DatabaseURL",
    "IOCounters",
    "Installed",
    "MasterPage",
    "MasterStore",
    "MySqlStore",
    "PageMap",
    "SqliteStore",
    "create_change_tables",
    "install_changes",
    "open_store",
    "pending_changes",
    "redact",
    "stage_changes",
    "store_for",
    "write_table",
]
