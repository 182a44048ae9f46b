"""Master-data stores: the disk-based relation R (see :mod:`.base` for the protocol)."""

from __future__ import annotations

from .base import DEFAULT_PAGE_ROWS, IOCounters, MasterPage, MasterStore, PageMap, SnapshotLost
from .changes import Installed, create_change_tables, install_changes, pending_changes, stage_changes
from .mysql import MySqlStore
from .reconnect import DEFAULT_RETRY_MAX_S, ReconnectingConnection, RetryPolicy, StoreUnavailable, TransactionLost
from .sql import MYSQL, SQLITE, DatabaseURL, dialect_of, redact, write_table
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


__all__ = [
    "DEFAULT_PAGE_ROWS",
    "DEFAULT_RETRY_MAX_S",
    "DatabaseURL",
    "IOCounters",
    "Installed",
    "MasterPage",
    "MasterStore",
    "MySqlStore",
    "PageMap",
    "ReconnectingConnection",
    "RetryPolicy",
    "SnapshotLost",
    "StoreUnavailable",
    "TransactionLost",
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
