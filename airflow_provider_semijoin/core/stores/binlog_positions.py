"""Places in MySQL/MariaDB's binary log, and the reader's side of its capture (:mod:`.binlog`).

A binary log position (:class:`Position`), the server's current one and the one a consistent
snapshot matches (MariaDB's ``binlog_snapshot_position``), and :func:`wait_captured`: the version
of R at such a position, once the capture has read that far. Apart from :mod:`.binlog` (the
capture, a writer of R's change tables) so that the stores, which read, need nothing of it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from ..errors import ConfigError, StoreError
from .sql import MYSQL, query_rows, side_tables

BINLOG_SUFFIX = "__sj_binlog"
POLL_SLEEP_S = 0.01  # between looks at the capture's table while wait_captured waits
SCAN_LIMIT = 1000  # events per SHOW BINLOG EVENTS while wait_captured looks past the read position


@dataclass(frozen=True, order=True)
class Position:
    """A place in the binary log: the file and the byte offset in it (files sort by name)."""

    file: str
    pos: int

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"


def binlog_table(table: str) -> str:
    """The name of R's capture table (valid whenever R can have change tables)."""
    side_tables(table)  # validates the name and its length for the longer suffixes
    return table + BINLOG_SUFFIX


def server_position(cursor) -> Position:
    """The server's current binary log position (SHOW BINLOG STATUS, or its older names)."""
    import MySQLdb

    for statement in ("SHOW BINLOG STATUS", "SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"):
        try:
            cursor.execute(statement)
        except MySQLdb.ProgrammingError:  # a name this server does not know
            continue
        rows = cursor.fetchall()
        if not rows:
            raise ConfigError("binlog capture: the server has no binary log position (expected log_bin=ON)")
        return Position(str(rows[0][0]), int(rows[0][1]))
    raise StoreError("binlog capture: the server knows none of SHOW BINLOG STATUS, SHOW MASTER STATUS")


def snapshot_position(cursor) -> Position:
    """MariaDB, right after ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` on ``cursor``'s
    session: the binary log position that snapshot matches (every transaction logged before it
    is in the snapshot, none after)."""
    cursor.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
    found = {str(n).lower(): v for n, v in cursor.fetchall()}
    if "binlog_snapshot_file" not in found or not found["binlog_snapshot_file"]:
        raise StoreError("snapshot position: the server has no Binlog_snapshot_file status "
                         "(expected MariaDB with log_bin=ON)")
    return Position(str(found["binlog_snapshot_file"]), int(found["binlog_snapshot_position"]))


def _before_sql(position: Position) -> tuple[str, tuple]:
    return "(log_file < %s OR (log_file = %s AND log_pos <= %s))", (position.file, position.file, position.pos)


def wait_captured(connection, table: str, file: str, pos: int, timeout_s: float) -> int:
    """The version of R at binary log position ``(file, pos)`` (a snapshot's,
    :func:`snapshot_position`): the version whose recorded position is the last one at or
    before it, once the capture has read that far. Read on ``connection`` OUTSIDE that
    snapshot (it does not see the versions written after it). Past the capture's read
    position, the server's own SHOW BINLOG EVENTS tells whether anything of R lies before
    ``(file, pos)``; nothing: the newest version is R's there (that needs REPLICATION CLIENT).
    Inside the snapshot, the change log and before-images of versions written after it began
    are not visible (InnoDB's consistent read); a locking read (``LOCK IN SHARE MODE``) or
    another session sees them."""
    target, q = Position(str(file), int(pos)), MYSQL.quote(binlog_table(table))
    database = query_rows(connection, "SELECT DATABASE()")[0][0]
    deadline = time.monotonic() + timeout_s
    while True:
        newest = query_rows(connection, f"SELECT version, read_file, read_pos FROM {q} ORDER BY version DESC LIMIT 1")
        if not newest:
            raise StoreError(f"wait captured: the binlog capture of {table!r} is not enabled "
                             f"(no rows in {binlog_table(table)!r})")
        version, read = int(newest[0][0]), Position(newest[0][1], int(newest[0][2]))
        if read >= target or not _touched(connection, database, table, read, target):
            where, params = _before_sql(target)
            found = query_rows(connection, f"SELECT version FROM {q} WHERE {where} ORDER BY version DESC LIMIT 1", params)
            if not found:
                raise StoreError(f"wait captured: the binlog capture of {table!r} began after position {target}")
            return int(found[0][0]) if read >= target else version
        if time.monotonic() >= deadline:
            raise StoreError(
                f"wait captured: the binlog capture of {table!r} did not reach position {target} within "
                f"{timeout_s} s (it read to {read}; is a capturer polling?)"
            )
        time.sleep(POLL_SLEEP_S)


def _touched(connection, database: str, table: str, start: Position, end: Position) -> bool:
    """Whether an event of R (a row event's table map, DDL) starts in ``[start, end)``."""
    files = [r[0] for r in query_rows(connection, "SHOW BINARY LOGS") if start.file <= r[0] <= end.file]
    mapped = f"({database}.{table})"
    for name in files:
        at = start.pos if name == start.file else 4
        while True:
            events = query_rows(connection, f"SHOW BINLOG EVENTS IN %s FROM %s LIMIT {SCAN_LIMIT}", (name, at))
            for _, event_pos, kind, _, end_pos, info in events:
                if name == end.file and int(event_pos) >= end.pos:
                    return False
                if (kind == "Table_map" and str(info).endswith(mapped)) or (
                    kind == "Query" and _ddl_on(str(info), "", database, table)
                ):
                    return True
                at = int(end_pos)
            if len(events) < SCAN_LIMIT:
                break
    return False


def _ddl_on(query: str, schema: str, database: str, table: str) -> bool:
    """Whether a logged statement (``schema``: its session's database) names R or drops its
    database: DDL, or a change logged as a statement; neither has row images."""
    used = re.match(r"^use `([^`]*)`; ", query)  # SHOW BINLOG EVENTS' prefix: the session's database
    if used:
        schema, query = used.group(1), query[used.end():]
    if re.match(rf"^\s*DROP\s+(DATABASE|SCHEMA)\s+(IF\s+EXISTS\s+)?`?{re.escape(database)}`?\s*$", query, re.I):
        return True
    name = re.compile(
        r"(?:(?:`(?P<quoted>[^`]+)`|(?P<plain>[\w$]+))\s*\.\s*)?(?<![\w$])(?:`" + re.escape(table) + "`|"
        + re.escape(table) + r"(?![\w$]))"
    )
    for found in name.finditer(query):
        qualifier = found.group("quoted") or found.group("plain")
        if (qualifier or schema) == database:
            return True
    return False
