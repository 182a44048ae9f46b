"""The database server under the bench: whether R fits in its cache (:func:`server_cache`),
and its own index join of a stream chunk with R (:func:`dbms_index_join`, SSIJ paper sec.
VI-C, Fig. 9), the comparison SSIJ's claim is measured against."""

from __future__ import annotations

import time

from ..core.stores import DatabaseURL, open_store
from ..core.stores.sql import MYSQL
from ..workloads import zipf_stream


def server_cache(master: str, table: str) -> dict | None:
    """MySQL/MariaDB: InnoDB's buffer pool, its flush method and R's bytes on the server (data
    and indexes, as ``information_schema.tables`` estimates them); None for SQLite, whose file
    is the OS's to cache. Whether R fits in the pool decides what a read of R costs: with
    ``O_DIRECT`` (MariaDB's default since 10.6) a page of R not in the pool is read from disk,
    not from the OS's cache: the bench's R at the standard size does not fit MariaDB's default
    pool, and its reads cost several times what they cost in a pool that holds it
    (``docs/measurements.md``)."""
    url = DatabaseURL.parse(master)
    if url.dialect is not MYSQL:
        return None
    connection = url.connect()
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT @@innodb_buffer_pool_size")
        pool = cursor.fetchone()[0]
        cursor.execute("SHOW VARIABLES LIKE 'innodb_flush_method'")  # (no row where a server has dropped it)
        flush = (cursor.fetchone() or (None, ""))[1]
        cursor.execute(f"ANALYZE TABLE {MYSQL.quote(table, 'table')}")  # a table just written shows one page
        cursor.fetchall()
        cursor.execute("SELECT data_length + index_length FROM information_schema.tables "
                       "WHERE table_schema = DATABASE() AND table_name = %s", (table,))
        found = cursor.fetchone()
        cursor.close()
    finally:
        connection.close()
    r_bytes = int(found[0]) if found and found[0] is not None else 0
    return {"buffer_pool_bytes": int(pool), "flush_method": str(flush), "r_bytes": r_bytes, "r_fits": r_bytes <= int(pool)}


def server_cache_line(cache: dict) -> str:
    """One line saying whether R fits in the server's buffer pool."""
    source = "disk" if cache["flush_method"].startswith("O_DIRECT") else "the OS's file cache or disk"
    fits = "R fits in it" if cache["r_fits"] else f"R does not fit: a page of R not in the pool is read from {source}"
    return (f"server cache: InnoDB buffer pool {cache['buffer_pool_bytes'] / 2**20:,.0f} MiB, R "
            f"{cache['r_bytes'] / 2**20:,.0f} MiB on the server; {fits}")


def dbms_index_join(master: str, table: str, chunk_rows: int, rows: int, seed: int, warm_runs: int = 1,
                    out=print) -> dict:
    """The DBMS's own index join (SSIJ sec. VI-C, Fig. 9). A chunk of ``chunk_rows`` stream
    tuples with uniform keys over R's ``rows`` (the paper's setup) is loaded into an in-memory
    table (MEMORY engine, not timed), then ONE statement joins it with R inside the server and
    writes the result into another in-memory table, so no row crosses to the client: tuples per
    second of that statement, once with the buffer pool as found ("cold") and ``warm_runs``
    times after it, and of the same join aggregated instead of written (the lookups alone).
    Returns the runs and the query plan."""
    chunk = zipf_stream(chunk_rows, rows, exponent=0.0, seed=seed)
    connection = DatabaseURL.parse(master).connect()
    runs = []
    try:
        cursor = connection.cursor()
        heap = max(256 << 20, 400 * chunk_rows)  # the stream copy and the result, in memory
        cursor.execute(f"SET SESSION max_heap_table_size = {heap}, tmp_table_size = {heap}")
        cursor.execute("DROP TEMPORARY TABLE IF EXISTS sj_stream_chunk")
        cursor.execute("CREATE TEMPORARY TABLE sj_stream_chunk (tid BIGINT NOT NULL, nk BIGINT NOT NULL) ENGINE=MEMORY")
        pairs = list(zip(chunk["tid"].to_pylist(), chunk["nk"].to_pylist()))
        for at in range(0, len(pairs), 20_000):
            cursor.executemany("INSERT INTO sj_stream_chunk (tid, nk) VALUES (%s, %s)", pairs[at : at + 20_000])
        with open_store(master, table, "nk") as store:
            columns = ", ".join(f"r.{MYSQL.quote(c)}" for c in store.select)
        select = f"SELECT s.tid, {columns} FROM sj_stream_chunk s JOIN {MYSQL.quote(table, 'table')} r ON r.nk = s.nk"
        cursor.execute(f"EXPLAIN {select}")
        plan = [dict(zip([d[0] for d in cursor.description], row)) for row in cursor.fetchall()]
        for attempt in ["cold"] + ["warm"] * warm_runs:
            cursor.execute("DROP TEMPORARY TABLE IF EXISTS sj_join_result")
            cursor.execute(f"CREATE TEMPORARY TABLE sj_join_result ENGINE=MEMORY {select} LIMIT 0")
            started = time.perf_counter()
            cursor.execute(f"INSERT INTO sj_join_result {select}")
            seconds = time.perf_counter() - started
            runs.append({"run": f"{attempt} buffer pool", "warm": attempt == "warm", "writes_result": True,
                         "seconds": round(seconds, 3), "result_rows": cursor.rowcount,
                         "tuples_per_s": round(chunk_rows / seconds, 1)})
            out(f"  DBMS index join ({attempt} buffer pool): {chunk_rows:,} tuples in {seconds:.2f} s")
        started = time.perf_counter()
        cursor.execute(f"SELECT COUNT(*), SUM(r.{MYSQL.quote('sk')}) FROM sj_stream_chunk s "
                       f"JOIN {MYSQL.quote(table, 'table')} r ON r.nk = s.nk")
        matched = int(cursor.fetchone()[0])
        seconds = time.perf_counter() - started
        runs.append({"run": "aggregated, no result", "warm": True, "writes_result": False,
                     "seconds": round(seconds, 3), "result_rows": matched,
                     "tuples_per_s": round(chunk_rows / seconds, 1)})
        out(f"  DBMS index join (aggregated, no result written): {chunk_rows:,} tuples in {seconds:.2f} s")
        cursor.execute("DROP TEMPORARY TABLE IF EXISTS sj_join_result")
        cursor.execute("DROP TEMPORARY TABLE sj_stream_chunk")
        cursor.close()
    finally:
        connection.close()
    return {"runs": runs, "plan": plan}
