"""Install a batch of master-data changes with the SSIJ update semantics (sec. IV-E).

The pending changes of R (``<R>__sj_pending``, oldest first, at most ``max_rows``) are applied
to R in ONE transaction together with their keys in the change log under the next version
(:func:`..core.stores.changes.install_changes`). Joins running against R read it one snapshot
per micro-batch and invalidate their caches from the change log, so every stream tuple sees R
before or after the batch, never a part of it; the install never waits for the stream.
"""

from __future__ import annotations

from airflow.sdk import BaseOperator

from ..core.checks import check_positive
from ..core.stores.sql import check_identifier
from ..hooks.master import MasterDataHook


class InstallMasterChangesOperator(BaseOperator):
    """Install R's pending changes; returns ``{"version", "keys", "rows"}`` of the batch.

    :param master_conn_id: the master database (see :class:`~..hooks.master.MasterDataHook`).
    :param table: R; :param key: R's join key.
    :param max_rows: install at most this many pending change rows (oldest first).
    """

    template_fields = ("master_conn_id", "table", "key")
    ui_color = "#d7f5e0"

    def __init__(self, *, table: str, key: str, master_conn_id: str | None = None, max_rows: int | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        if "{{" not in str(table):
            check_identifier(table, "table")
        if "{{" not in str(key):
            check_identifier(key, "key")
        check_positive("max_rows", max_rows, integer=True, optional=True)
        self.master_conn_id = master_conn_id
        self.table = table
        self.key = key
        self.max_rows = max_rows

    def execute(self, context) -> dict:
        from ..core.stores.changes import install_changes

        connection = MasterDataHook(self.master_conn_id).get_conn()
        try:
            installed = install_changes(connection, self.table, self.key, max_rows=self.max_rows)
        finally:
            connection.close()
        self.log.info("Installed version %d of %s: %d change rows, %d keys", installed.version, self.table, installed.rows, installed.keys)
        return {"version": installed.version, "keys": installed.keys, "rows": installed.rows}
