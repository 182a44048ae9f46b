"""Master-data stores: the disk-based relation R (see :mod:`.base` for the protocol)."""

from __future__ import annotations

from .base import DEFAULT_PAGE_ROWS, IOCounters, MasterPage, MasterStore, PageMap
from .changes import Installed, create_change_tables, install_changes, pending_changes, stage_changes
from .mysql import MySqlStore
from .opening import open_store, store_for
from .protocol import JoinStore, PagedRelation
from .reconnect import DEFAULT_RETRY_MAX_S, ReconnectingConnection, RetryPolicy, StoreUnavailable, TransactionLost
from .sql import DatabaseURL, redact, write_table
from .sqlite import SqliteStore
from .versioned import SnapshotLost


__all__ = [
    "DEFAULT_PAGE_ROWS",
    "DEFAULT_RETRY_MAX_S",
    "DatabaseURL",
    "IOCounters",
    "JoinStore",
    "Installed",
    "MasterPage",
    "MasterStore",
    "MySqlStore",
    "PageMap",
    "PagedRelation",
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
