"""R's capture triggers by name (:mod:`.capture` creates them): whether R has them.

Apart from :mod:`.capture` so that the stores and the installs (:mod:`.changes`), which only ask
whether every writer's changes to R become versions, need nothing of the code that creates them.
"""

from __future__ import annotations

from ..errors import ConfigError
from .sql import SQLITE, side_tables

TRIGGERS = {"INSERT": "__sj_bi", "UPDATE": "__sj_bu", "DELETE": "__sj_bd"}  # R's triggers, by the event they follow
CLOCK_SUFFIX = "__sj_clock"  # MySQL: the one row every trigger moves on (versions in commit order)


def trigger_names(table: str) -> dict[str, str]:
    """R's capture triggers by event (valid names whenever R can have change tables)."""
    side_tables(table)  # the longest suffix fits
    return {event: table + suffix for event, suffix in TRIGGERS.items()}


def existing_triggers(store) -> set[str]:
    names = list(trigger_names(store.table).values())
    if store.dialect is SQLITE:
        sql = f"SELECT name FROM sqlite_master WHERE type = 'trigger' AND name IN ({store.dialect.placeholders(len(names))})"
    else:
        sql = (f"SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() "
               f"AND TRIGGER_NAME IN ({store.dialect.placeholders(len(names))})")
    cursor = store.connection.cursor()
    try:
        cursor.execute(sql, tuple(names))
        return {row[0] for row in cursor.fetchall()}
    finally:
        cursor.close()


def capture_enabled(store) -> bool:
    """Whether every write to R is captured: all three triggers are there."""
    try:
        return len(existing_triggers(store)) == len(TRIGGERS)
    except ConfigError:  # a name too long for change tables: R cannot have them
        return False
