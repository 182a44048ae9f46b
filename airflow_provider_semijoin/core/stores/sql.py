"""SQL dialects, database URLs and identifier quoting for the master-data stores.

Two dialects: SQLite (the embedded default, standard library ``sqlite3``) and MySQL/MariaDB
(``MySQLdb`` from mysqlclient, the driver Airflow's MySQL provider uses). Identifiers that come
from configuration are validated against :data:`..checks.IDENTIFIER` and quoted; values are always bound
as parameters.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.compute as pc

from ..checks import IDENTIFIER, check_identifier  # noqa: F401 (the stores' API too)
from ..errors import ConfigError, StoreError, shown


CHANGES_SUFFIX = "__sj_changes"  # the change log of R: (version, key, op)
PENDING_SUFFIX = "__sj_pending"  # changes staged for R, not installed yet
PASSWORD_ENV = "SEMIJOIN_DB_PASSWORD"  # where the semijoin CLI takes a MySQL password from (never argv)


def side_tables(table: str) -> tuple[str, str]:
    """The names of R's change log and pending-changes tables (SSIJ sec. IV-E updates)."""
    check_identifier(table, "table")
    longest = max(len(CHANGES_SUFFIX), len(PENDING_SUFFIX))
    if len(table) + longest > 64:
        raise ConfigError(
            f"table: {shown(table)} is too long to have change tables (at most {64 - longest} characters, "
            f"so that {table}{CHANGES_SUFFIX} is a valid identifier)"
        )
    return table + CHANGES_SUFFIX, table + PENDING_SUFFIX


def refused_value_errors() -> tuple[type[Exception], ...]:
    """The drivers' errors for values a database refuses (too long for a column, a constraint)."""
    errors: list[type[Exception]] = [sqlite3.DataError, sqlite3.IntegrityError]
    try:
        import MySQLdb
    except ImportError:
        return tuple(errors)
    return (*errors, MySQLdb.DataError, MySQLdb.IntegrityError)


def query_rows(connection, sql: str, params=()) -> list[tuple]:
    """The rows of one statement on a cursor of its own."""
    cursor = connection.cursor()
    try:
        cursor.execute(sql, tuple(params))
        return list(cursor.fetchall() or [])
    finally:
        cursor.close()


def table_exists(connection, name: str) -> bool:
    """Whether the table ``name`` exists in the connection's (current) database."""
    if dialect_of(connection) is SQLITE:
        sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    else:
        sql = "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s"
    cursor = connection.cursor()
    try:
        cursor.execute(sql, (name,))
        return bool(cursor.fetchall())
    finally:
        cursor.close()


@dataclass(frozen=True)
class Dialect:
    name: str
    param: str  # the driver's placeholder
    quote_char: str

    def quote(self, name: str, what: str = "identifier") -> str:
        check_identifier(name, what)
        return f"{self.quote_char}{name}{self.quote_char}"

    def mod(self, a: str, b: str) -> str:
        # MySQL drivers format queries with %, so MySQL spells modulo as MOD()
        return f"MOD({a}, {b})" if self.name == "mysql" else f"({a}) % {b}"

    def placeholders(self, n: int) -> str:
        return ", ".join([self.param] * n)

    def column_type(self, arrow_type: pa.DataType, *, key: bool = False, width: int = 0, key_collation: str = "") -> str:
        """The SQL type for an Arrow column of a generated table."""
        if pa.types.is_integer(arrow_type):
            return "BIGINT"
        if pa.types.is_floating(arrow_type):
            return "DOUBLE" if self.name == "mysql" else "REAL"
        if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
            if self.name == "mysql":
                # keys need a binary NO PAD collation so that ORDER BY agrees with byte order
                collation = f" COLLATE {key_collation}" if key else ""
                return f"VARCHAR({max(width, 1)}) CHARACTER SET utf8mb4{collation}"
            return "TEXT"
        raise ConfigError(f"column type: {arrow_type} is not supported for generated tables")


SQLITE = Dialect("sqlite", "?", '"')
MYSQL = Dialect("mysql", "%s", "`")


@dataclass(frozen=True)
class DatabaseURL:
    """``sqlite:///relative.db``, ``sqlite:////abs/path.db`` or ``mysql://user:pass@host:port/db``."""

    dialect: Dialect
    path: str = ""  # sqlite
    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)  # never in a repr (logs, tracebacks)
    database: str = ""

    @classmethod
    def parse(cls, url: str) -> "DatabaseURL":
        if not isinstance(url, str) or "://" not in url:
            raise ConfigError(
                f"master URL: {shown(redact(url))} is not a database URL "
                "(expected sqlite:///path.db or mysql://user:pass@host:port/db)"
            )
        scheme = url.split("://", 1)[0].lower()
        if scheme == "sqlite":
            path = url[len("sqlite:///"):] if url.lower().startswith("sqlite:///") else ""
            if not path:
                raise ConfigError(f"master URL: {shown(url)} names no file (expected sqlite:///path.db)")
            return cls(SQLITE, path=path)
        if scheme in ("mysql", "mysql+mysqldb", "mariadb"):
            parts = urlsplit(url)
            database = parts.path.lstrip("/")
            if not database:
                raise ConfigError(
                    f"master URL: {shown(redact(url))} names no database (expected mysql://user:pass@host:port/db)"
                )
            return cls(
                MYSQL,
                host=parts.hostname or "127.0.0.1",
                port=parts.port or 3306,
                user=unquote(parts.username or "root"),
                password=unquote(parts.password or ""),
                database=database,
            )
        raise ConfigError(
            f"master URL: scheme {shown(scheme)} is not one of ['sqlite', 'mysql'] "
            "(expected sqlite:///path.db or mysql://user:pass@host:port/db)"
        )

    @property
    def server(self) -> str:
        """``host:port/db`` (or the SQLite file): how messages name the database, never with credentials."""
        return self.path if self.dialect is SQLITE else f"{self.host}:{self.port}/{self.database}"

    def connect(self, retry_max_s: float | None = None):
        """A new DB-API connection (autocommit: every query sees the latest committed R).

        MySQL: a :class:`.reconnect.ReconnectingConnection` that survives a lost session,
        retrying for up to ``retry_max_s`` seconds (default 120, ``[semijoin] db_retry_max_s``).
        """
        if self.dialect is SQLITE:
            path = Path(self.path)
            if path.parent and not path.parent.exists():
                raise ConfigError(f"master URL: folder {shown(str(path.parent))} does not exist")
            return sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        import MySQLdb  # mysqlclient; imported late so SQLite users never need it

        from .reconnect import DEFAULT_RETRY_MAX_S, ReconnectingConnection, RetryPolicy

        policy = RetryPolicy(DEFAULT_RETRY_MAX_S if retry_max_s is None else retry_max_s)
        try:
            return ReconnectingConnection(self._mysql_session, self.server, policy)
        except MySQLdb.OperationalError as exc:
            raise ConfigError(
                f"master URL: cannot connect to MySQL at {self.user}@{self.host}:{self.port}/"
                f"{self.database} ({exc.args[-1]})"
            ) from None

    def _mysql_session(self):
        """One raw mysqlclient session. The read timeout bounds how long a query waits on a
        server that stopped answering (then the session counts as lost and is reopened)."""
        import MySQLdb

        return MySQLdb.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            passwd=self.password,
            db=self.database,
            charset="utf8mb4",
            autocommit=True,
            connect_timeout=10,
            read_timeout=MYSQL_READ_TIMEOUT_S,
            write_timeout=MYSQL_READ_TIMEOUT_S,
        )


MYSQL_READ_TIMEOUT_S = 120  # longer than any one page or partition load takes


def _max_bytes(column) -> int:
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return 0
    longest = pc.max(pc.binary_length(column)).as_py()
    return int(longest or 1)


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/+")


def redact(url) -> str:
    """The URL with its password replaced by ``***``: URLs reach logs, never credentials.

    Works on malformed URLs too (a missing ``//``, no scheme, an ``@`` inside the password):
    everything between the user's ``:`` and the last ``@`` is hidden.
    """
    if not isinstance(url, str):
        return repr(url)
    if "@" not in url:
        return url
    credentials, host = url.rsplit("@", 1)
    scheme = _SCHEME.match(credentials)
    prefix = scheme.group(0) if scheme else ""
    user, sep, _ = credentials[len(prefix):].partition(":")
    return f"{prefix}{user}{':***' if sep else ''}@{host}"


NOPAD_BINARY_COLLATIONS = ("utf8mb4_nopad_bin", "utf8mb4_0900_bin")


def mysql_key_collation(connection) -> str:
    """A binary collation without PAD SPACE on this server (MariaDB: utf8mb4_nopad_bin, MySQL 8:
    utf8mb4_0900_bin): with PAD SPACE, 'a' sorts after 'a\\t' and ORDER BY is not byte order."""
    cursor = connection.cursor()
    try:
        cursor.execute(
            "SELECT COLLATION_NAME FROM information_schema.COLLATIONS WHERE COLLATION_NAME IN (%s, %s)",
            NOPAD_BINARY_COLLATIONS,
        )
        found = {row[0] for row in cursor.fetchall()}
    finally:
        cursor.close()
    for name in NOPAD_BINARY_COLLATIONS:
        if name in found:
            return name
    raise ConfigError("key collation: the MySQL server has none of " f"{list(NOPAD_BINARY_COLLATIONS)}")


def dialect_of(connection) -> Dialect:
    """The dialect of a DB-API connection (``sqlite3`` or a MySQL driver's)."""
    if isinstance(connection, sqlite3.Connection):
        return SQLITE
    connection = getattr(connection, "wrapped_connection", connection)  # a ReconnectingConnection
    module = type(connection).__module__
    if module.startswith(("MySQLdb", "pymysql", "mysql")):
        return MYSQL
    raise ConfigError(
        f"connection: {type(connection).__name__} from {module} is not a sqlite3 or MySQL connection"
    )


@contextlib.contextmanager
def write_transaction(connection, cursor):
    """One write transaction: committed when the block ends, rolled back when it raises."""
    if dialect_of(connection) is SQLITE:
        if connection.in_transaction:
            raise StoreError("connection: the SQLite connection has an open transaction; commit it first")
        cursor.execute("BEGIN IMMEDIATE")  # the write lock: installs of one database take turns
    else:
        cursor.execute("START TRANSACTION")
    try:
        yield
    except BaseException:
        cursor.execute("ROLLBACK")
        raise
    cursor.execute("COMMIT")


def write_table(
    connection,
    table: str,
    rows: pa.Table,
    *,
    primary_key: str,
    batch_rows: int = 20_000,
) -> None:
    """Create ``table`` (replacing it) with ``rows`` and a primary key on ``primary_key``."""
    dialect = dialect_of(connection)
    qt = dialect.quote(table, "table")
    key_collation = mysql_key_collation(connection) if dialect is MYSQL else ""
    columns = ", ".join(
        f"{dialect.quote(f.name, 'column')} "
        f"{dialect.column_type(f.type, key=f.name == primary_key, width=_max_bytes(rows[f.name]), key_collation=key_collation)}"
        + (" NOT NULL" if f.name == primary_key else "")
        for f in rows.schema
    )
    cursor = connection.cursor()
    cursor.execute(f"DROP TABLE IF EXISTS {qt}")
    engine = " ENGINE=InnoDB" if dialect is MYSQL else ""
    cursor.execute(f"CREATE TABLE {qt} ({columns}, PRIMARY KEY ({dialect.quote(primary_key)})){engine}")
    insert = (
        f"INSERT INTO {qt} ({', '.join(dialect.quote(n) for n in rows.column_names)}) "
        f"VALUES ({dialect.placeholders(rows.num_columns)})"
    )
    if dialect is SQLITE:
        cursor.execute("BEGIN")
    for batch in rows.to_batches(max_chunksize=batch_rows):
        cursor.executemany(insert, list(zip(*(c.to_pylist() for c in batch.columns))))
    if dialect is SQLITE:
        cursor.execute("COMMIT")
    else:
        connection.commit()
    cursor.close()
