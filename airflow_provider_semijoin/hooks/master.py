"""Master data (the disk-based relation R) from an Airflow connection.

Three kinds of connection name a master database:

* ``mysql`` (Airflow's MySQL provider): opened through :class:`MySqlHook`;
* ``semijoin_master`` (this provider's connection type): ``dialect`` ``mysql`` (host, port,
  login, password, database) or ``sqlite`` (``path``), plus ``page_rows``;
* ``sqlite``: a SQLite file (``sqlite:////abs/path.db`` as a URI).

When the operator names no connection and the default connection id
(``[semijoin] master_conn_id``) is not defined, the embedded SQLite file
``[semijoin] embedded_master_path`` is the master database: the embedded default.

The hook hands out a DB-API connection (autocommit, so every query sees the latest committed
R), a core store over it (:func:`..core.stores.store_for`), and the database URL the Spark job
spec carries. The URL holds the password: it goes only into the job spec given to the runner
(in-process) or into a spec file readable by its owner only; logs and XComs get
:meth:`MasterDataHook.describe`, which hides it.
"""

from __future__ import annotations

from urllib.parse import quote

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from ..config import embedded_master_path, number_option, option
from ..core.errors import ConfigError
from ..core.stores import MasterStore, ReconnectingConnection, RetryPolicy, redact, store_for
from ..core.stores.sql import MYSQL, SQLITE, DatabaseURL
from ..get_provider_info import MASTER_CONN_TYPE

MYSQL_TYPES = ("mysql", "mariadb")
SQLITE_TYPES = ("sqlite",)


class MasterDataHook(BaseHook):
    """R's database from the connection ``master_conn_id`` (see the module docstring).

    :param master_conn_id: an Airflow connection of type ``mysql``, ``semijoin_master`` or
        ``sqlite``; None: ``[semijoin] master_conn_id``, or the embedded SQLite file when that
        connection is not defined.
    """

    conn_name_attr = "master_conn_id"
    default_conn_name = "semijoin_master_default"
    conn_type = MASTER_CONN_TYPE
    hook_name = "Semi-join master data"

    def __init__(self, master_conn_id: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.explicit = master_conn_id is not None
        self.master_conn_id = master_conn_id if master_conn_id is not None else option("master_conn_id")
        self._connection = None
        self._resolved = False

    # -- the Airflow connection ----------------------------------------------------------------
    @property
    def connection(self):
        """The Airflow connection, or None for the embedded SQLite default."""
        if not self._resolved:
            try:
                self._connection = self.get_connection(self.master_conn_id)
            except AirflowNotFoundException:
                if self.explicit:
                    raise ConfigError(
                        f"master_conn_id: connection {self.master_conn_id!r} is not defined (add it in the "
                        f"Airflow UI, with `airflow connections add`, or as AIRFLOW_CONN_"
                        f"{self.master_conn_id.upper()})"
                    ) from None
                self._connection = None
            self._resolved = True
        return self._connection

    @property
    def dialect(self):
        conn = self.connection
        if conn is None:
            return SQLITE
        kind = (conn.conn_type or "").lower()
        if kind == MASTER_CONN_TYPE:
            dialect = (conn.extra_dejson.get("dialect") or "sqlite").lower()
            if dialect not in ("sqlite", "mysql"):
                raise ConfigError(
                    f"master_conn_id: connection {conn.conn_id!r} has dialect {dialect!r}; expected 'sqlite' or 'mysql'"
                )
            return MYSQL if dialect == "mysql" else SQLITE
        if kind in MYSQL_TYPES:
            return MYSQL
        if kind in SQLITE_TYPES:
            return SQLITE
        raise ConfigError(
            f"master_conn_id: connection {conn.conn_id!r} has type {conn.conn_type!r}; expected one of "
            f"{[*MYSQL_TYPES, MASTER_CONN_TYPE, *SQLITE_TYPES]}"
        )

    @property
    def page_rows(self) -> int | None:
        """``page_rows`` of a ``semijoin_master`` connection (None: the algorithm's default)."""
        conn = self.connection
        if conn is None or (conn.conn_type or "").lower() != MASTER_CONN_TYPE:
            return None
        value = conn.extra_dejson.get("page_rows")
        if value in (None, ""):
            return None
        if isinstance(value, bool) or not str(value).isdigit() or int(value) < 1:
            raise ConfigError(f"master_conn_id: page_rows {value!r} of connection {conn.conn_id!r} is not a positive integer")
        return int(value)

    # -- what the join needs ------------------------------------------------------------------
    def get_url(self) -> str:
        """``sqlite:///path`` or ``mysql://user:password@host:port/db``: holds the password, never log it."""
        conn = self.connection
        if self.dialect is SQLITE:
            if conn is None:
                path = embedded_master_path()
                path.parent.mkdir(parents=True, exist_ok=True)
                return f"sqlite:///{path}"
            path = conn.extra_dejson.get("path") or conn.host or conn.schema
            if not path:
                raise ConfigError(
                    f"master_conn_id: SQLite connection {conn.conn_id!r} names no file (set its path, "
                    "or use a URI sqlite:////absolute/path.db)"
                )
            return f"sqlite:///{path}"
        if not conn.schema:
            raise ConfigError(f"master_conn_id: MySQL connection {conn.conn_id!r} names no database (schema)")
        credentials = quote(conn.login or "root", safe="")
        if conn.password:
            credentials += ":" + quote(conn.password, safe="")
        return f"mysql://{credentials}@{conn.host or '127.0.0.1'}:{conn.port or 3306}/{conn.schema}"

    def describe(self) -> str:
        """The URL without its password: what logs, XComs and the UI may show."""
        return redact(self.get_url())

    def get_conn(self):
        """A new DB-API connection to R's database, in autocommit mode (utf8mb4 on MySQL)."""
        conn = self.connection
        if self.dialect is SQLITE:
            return DatabaseURL.parse(self.get_url()).connect()
        from airflow.providers.mysql.hooks.mysql import MySqlHook

        mysql = MySqlHook(mysql_conn_id=conn.conn_id, connection=conn)

        def session():
            db = mysql.get_conn()
            db.autocommit(True)
            db.set_character_set("utf8mb4")
            return db

        policy = RetryPolicy(number_option("db_retry_max_s"))
        try:  # a lost session is reopened for [semijoin] db_retry_max_s seconds
            return ReconnectingConnection(session, DatabaseURL.parse(self.get_url()).server, policy)
        except Exception as exc:  # the driver's error names host and user, never the password
            raise ConfigError(
                f"master_conn_id: cannot connect to MySQL through connection {conn.conn_id!r} "
                f"({redact(self.get_url())}): {exc.args[-1] if exc.args else exc}"
            ) from None

    def open_store(self, table: str, key: str, select: list[str] | None = None) -> MasterStore:
        """A store over R = ``table`` with join key ``key`` (closing it closes its connection)."""
        db = self.get_conn()
        try:
            return store_for(db, table, key, select)
        except Exception:
            db.close()
            raise

    def test_connection(self) -> tuple[bool, str]:
        """The UI's "Test" button: can the database be reached?"""
        try:
            db = self.get_conn()
            db.close()
        except Exception as exc:
            return False, str(exc)
        return True, f"connected to {self.describe()}"


def run_time_connections():
    """The :class:`~..job.assemble.Connections` of a running task: URLs and ``page_rows`` from the
    Airflow connections, through :class:`MasterDataHook` (a Redis source's through
    :class:`..redis.RedisStreamHook`)."""
    from ..job.assemble import Connections
    from .redis import RedisStreamHook

    return Connections(url=lambda conn_id: MasterDataHook(conn_id).get_url(),
                       redis_url=lambda conn_id: RedisStreamHook(conn_id).get_url(),
                       page_rows=lambda conn_id: MasterDataHook(conn_id).page_rows)
