"""What the server must have for a binlog capture (:mod:`.binlog`), said in one sentence.

``log_bin``, ``binlog_format=ROW``, ``binlog_row_image=FULL``, the grants REPLICATION SLAVE and
REPLICATION CLIENT (MariaDB 10.5+ shows the latter as BINLOG MONITOR); and of R: a unique index
on its key alone (the binary log's before-image of one row is not the whole before-image of a
key with several rows: such a table is captured with triggers), no foreign key with an ON
DELETE/UPDATE action (InnoDB changes those rows below the binary log: a cascaded delete leaves
no event), and ``binlog_row_metadata=FULL`` when R has ENUM, SET, binary or non-UTF-8 text
columns (without it the log gives ENUM and SET as NULL and no charset for the others).
"""

from __future__ import annotations

import re

from ..errors import ConfigError
from .changes import _connected
from .opening import store_for
from .sql import MYSQL, DatabaseURL, dialect_of, query_rows

REQUIRED_GRANTS = ("REPLICATION SLAVE", "REPLICATION CLIENT")
_CLIENT_ALIASES = {"REPLICATION CLIENT", "BINLOG MONITOR"}  # MariaDB 10.5+ shows the latter
_GRANT_ON_ALL = re.compile(r"^GRANT (.+?) ON \*\.\* TO ", re.I | re.S)
_NEED_METADATA = {"enum", "set", "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_UTF8_CHARSETS = {"utf8mb4", "utf8mb3", "utf8", "ascii"}


def _grant_problem(connection) -> str | None:
    """The replication grants the session's user lacks, as a phrase (None: it has both)."""
    privileges: set[str] = set()
    for (line,) in query_rows(connection, "SHOW GRANTS"):
        found = _GRANT_ON_ALL.match(line)
        if found:
            privileges |= {p.strip().upper() for p in found.group(1).split(",")}
    if "ALL PRIVILEGES" in privileges:
        return None
    has = {"REPLICATION SLAVE": "REPLICATION SLAVE" in privileges,
           "REPLICATION CLIENT": bool(privileges & _CLIENT_ALIASES)}
    missing = [g for g in REQUIRED_GRANTS if not has[g]]
    return f"the grant{'s' if len(missing) > 1 else ''} {' and '.join(missing)} ON *.* for its user" if missing else None


def binlog_problems(connection, url: str, table: str | None = None, key: str | None = None) -> list[str]:
    """What the server (and R, when ``table`` and ``key`` are given) lacks for a binlog capture,
    one phrase each (empty: nothing). ``connection`` None: a new one to ``url`` is opened."""
    with _connected(url if connection is None else connection) as conn:
        if dialect_of(conn) is not MYSQL:
            return ["a MySQL or MariaDB server (the binary log is theirs; SQLite is captured with triggers)"]
        names = ("log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata")
        found = {n.lower(): str(v) for n, v in query_rows(
            conn, f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({', '.join(['%s'] * len(names))})", names)}
        problems = []
        if found.get("log_bin", "OFF").upper() not in ("ON", "1"):
            problems.append("log_bin=ON (it is OFF)")
        for name, wanted in (("binlog_format", "ROW"), ("binlog_row_image", "FULL")):
            if found.get(name, "").upper() != wanted:
                problems.append(f"{name}={wanted} (it is {found.get(name) or 'unset'})")
        grants = _grant_problem(conn)
        if grants:
            problems.append(grants)
        if table is not None:
            store = store_for(conn, table, key)
            if not store.key_unique:
                problems.append(
                    f"a unique index on {key!r} alone (R {table!r} has none: the binary log's before-image of one "
                    "row is not the whole before-image of a key with several rows, so capture this table with triggers)"
                )
            problems += _foreign_key_problems(conn, table)
            needing = [repr(c.name) for c in store.columns if _needs_metadata(c)]
            if needing and found.get("binlog_row_metadata", "").upper() != "FULL":
                problems.append(
                    f"binlog_row_metadata=FULL (it is {found.get('binlog_row_metadata') or 'unset'}; without it the "
                    f"binary log has no charset or value names for {', '.join(needing)} of R {table!r})"
                )
        return problems


def _needs_metadata(column) -> bool:
    """Whether the binary log's values of ``column`` can be read only with its metadata: ENUM and
    SET (their names), binary strings and text not in UTF-8 (their charset; else read as UTF-8)."""
    base = column.sql_type.lower().split("(")[0].split()[0]
    charset = re.search(r"CHARACTER SET (\w+)", column.declaration or "")
    return base in _NEED_METADATA or bool(charset and charset.group(1).lower() not in _UTF8_CHARSETS)


def _foreign_key_problems(connection, table: str) -> list[str]:
    """R's foreign keys whose ON DELETE / ON UPDATE action changes R: InnoDB does it below the
    binary log, which has no rows of it (tested: a cascaded delete leaves no event)."""
    acting = query_rows(
        connection,
        "SELECT CONSTRAINT_NAME FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = DATABASE() "
        "AND TABLE_NAME = %s AND (DELETE_RULE NOT IN ('RESTRICT', 'NO ACTION') "
        "OR UPDATE_RULE NOT IN ('RESTRICT', 'NO ACTION')) "
        "ORDER BY CONSTRAINT_NAME",
        (table,),
    )
    names = ", ".join(repr(n) for (n,) in acting)
    return [f"no foreign key of R with an ON DELETE or ON UPDATE action (R {table!r} has {names}: "
            "the server does not log the rows such an action changes)"] if acting else []


def check_binlog(connection, url: str, table: str | None = None, key: str | None = None) -> None:
    """Raise a ConfigError naming, in one sentence, everything :func:`binlog_problems` finds."""
    problems = binlog_problems(connection, url, table, key)
    if problems:
        listed = problems[0] if len(problems) == 1 else f"{', '.join(problems[:-1])} and {problems[-1]}"
        raise ConfigError(
            f"binlog capture: the server {DatabaseURL.parse(url).server} needs {listed} for semijoin to read "
            "the changes of R from its binary log (server settings log_bin, binlog_format=ROW, "
            "binlog_row_image=FULL; GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO the user)"
        )
