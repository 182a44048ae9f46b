"""A Redis server, the source of a ``redis_stream`` job, from an Airflow connection.

The connection is of type ``redis``, as Airflow's Redis provider defines it (this provider does
not need that one installed: a connection's type is its name): ``host``, ``port`` (6379), ``login``
(a Redis 6 ACL user), ``password``, and in its extra ``db`` (0) and ``ssl`` (TLS: ``rediss://``).
``AIRFLOW_CONN_SALES_REDIS='redis://:secret@redis.example:6379/0'`` defines one too: Airflow keeps a
URI's path as the connection's schema, read as the db when the extra has none.

:meth:`RedisStreamHook.get_url` holds the password: it goes only into the job spec given to the
runner (in-process) or into a spec file readable by its owner only, never into argv; Spark gets
it as the data source's ``url`` option, which it redacts. Logs and XComs get
:meth:`RedisStreamHook.describe` (:meth:`...job.sources.SourceSpec.describe` hides it the same way).
"""

from __future__ import annotations

from urllib.parse import quote

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from ..core.errors import ConfigError
from ..core.stores.sql import redact

REDIS_CONN_TYPE = "redis"


class RedisStreamHook(BaseHook):
    """The Redis server of the connection ``redis_conn_id`` (see the module docstring)."""

    conn_name_attr = "redis_conn_id"
    default_conn_name = "redis_default"
    conn_type = REDIS_CONN_TYPE
    hook_name = "Redis (semi-join stream source)"

    def __init__(self, redis_conn_id: str = default_conn_name, **kwargs) -> None:
        super().__init__(**kwargs)
        self.redis_conn_id = redis_conn_id

    def get_url(self) -> str:
        """``redis[s]://[user][:password]@host:port/db``: holds the password, never log it."""
        try:
            conn = self.get_connection(self.redis_conn_id)
        except AirflowNotFoundException:
            raise ConfigError(f"source.conn_id: connection {self.redis_conn_id!r} is not defined (add it in the Airflow "
                              f"UI, with `airflow connections add`, or as AIRFLOW_CONN_{self.redis_conn_id.upper()})") from None
        if (conn.conn_type or "").lower() != REDIS_CONN_TYPE:
            raise ConfigError(f"source.conn_id: connection {conn.conn_id!r} has type {conn.conn_type!r}; expected 'redis'")
        extra = conn.extra_dejson
        db = extra.get("db", conn.schema or 0)
        if not str(db).isdigit():
            raise ConfigError(f"source.conn_id: connection {conn.conn_id!r} names db {db!r}; expected a number")
        credentials = quote(conn.login or "", safe="") + (":" + quote(conn.password, safe="") if conn.password else "")
        scheme = "rediss" if str(extra.get("ssl", "")).lower() in ("true", "1") else "redis"
        at = f"{credentials}@" if credentials else ""
        return f"{scheme}://{at}{conn.host or '127.0.0.1'}:{conn.port or 6379}/{int(db)}"

    def describe(self) -> str:
        """The URL without its password: what logs, XComs and the UI may show."""
        return redact(self.get_url())
