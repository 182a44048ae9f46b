"""``semijoin bench --access``: what one master-data access costs on this database, in one run.

The choice of algorithm follows from it (README, "Choosing an algorithm"): INLJ pays a point
query per tuple; the page-based joins (HYBRIDJOIN sec. 4, SSIJ sec. IV) a range read that
serves every tuple waiting on a page, S + d*T (HYBRIDJOIN eq. 1); the micro-batch baselines,
and a page with few waiting keys, one ``IN (...)`` query per key set; MESHJOIN (sec. 3.1) reads
R cyclically. Each is timed on the bench's R through the store's own queries, the keys drawn
uniformly from R's keys and the pages without repeats (``seed``), so the figures are what the
joins pay on this server; whether R fits in the server's buffer pool
(:func:`.server.server_cache`) says which case they are. Each query runs once: part of R may be
in the pool already (the bench's check of R counts its rows), so where R does not fit, a
scattered key is mostly, not always, a disk read.

:func:`served_page_reads` times the page reads over several connections at once, each in its own
process (as each part of ``partitions: N`` is its own Python worker): what the server serves
(queries/s, rows/s), the ceiling of ``bench.partitions``' estimate.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from dataclasses import dataclass

import numpy as np

from ..core.checks import check_positive
from ..core.joins.hybridjoin_plan import PAGE_ROWS_RANGE
from ..core.stores import open_store, redact
from ..workloads.master import key_array
from .steady import bench_master

IN_SIZES = (1000, 4096, 10_000)  # keys of one IN query (at most R's rows)
SCAN_PAGES = 16  # pages of one query of the full scan


@dataclass
class AccessConfig:
    master: str
    rows: int = 2_000_000
    points: int = 2000  # point queries timed
    pages: int = 40  # pages read at random places
    page_rows: int = PAGE_ROWS_RANGE[1]  # rows of a page (HYBRIDJOIN's measured size at the standard size)
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("rows", "points", "pages", "page_rows"):
            check_positive(name, getattr(self, name), "a positive whole number", integer=True)


def run_access(config: AccessConfig, out=print, clock=time.perf_counter) -> dict:
    table, cache = bench_master(config.master, config.rows, out, clock)
    rng = np.random.default_rng(config.seed)
    with open_store(config.master, table, "nk") as store:
        page_map = store.page_map(config.page_rows)

        def timed(action) -> tuple[float, int]:
            started = clock()
            rows = action()
            return clock() - started, rows

        def r_keys(n: int) -> np.ndarray:
            """``n`` distinct keys of R drawn uniformly (the bench's R holds keys 2i + 1)."""
            return key_array(rng.choice(config.rows, min(n, config.rows), replace=False), "int").to_numpy()

        points = r_keys(config.points)
        seconds, found = timed(lambda: sum(len(store.lookup(int(k))) for k in points))
        results = [_row("point query", len(points), "queries", seconds, found)]
        pages = rng.choice(page_map.n_pages, min(config.pages, page_map.n_pages), replace=False)
        seconds, rows = timed(lambda: sum(len(store.load_pages(page_map, int(p))) for p in pages))
        results.append(_row(f"range read of a page ({page_map.page_rows:,} rows) at random places", rows, "rows",
                            seconds, rows, per=len(pages)))
        for size in IN_SIZES:
            keys = r_keys(size)
            seconds, found = timed(lambda: len(store.lookup_many(keys)))
            results.append(_row(f"IN (...) of {len(keys):,} scattered keys", len(keys), "keys", seconds, found))
        neighbours = np.asarray(store.load_pages(page_map, int(pages[0])).keys)[: IN_SIZES[0]]  # (now in the pool)
        seconds, found = timed(lambda: len(store.lookup_many(neighbours)))
        results.append(_row(f"IN (...) of {len(neighbours):,} keys of a page just read", len(neighbours), "keys",
                            seconds, found))
        seconds, rows = timed(lambda: sum(len(store.load_pages(page_map, p, min(SCAN_PAGES, page_map.n_pages - p)))
                                          for p in range(0, page_map.n_pages, SCAN_PAGES)))
        results.append(_row(f"full scan, {SCAN_PAGES} pages a query", rows, "rows", seconds, rows,
                            per=-(-page_map.n_pages // SCAN_PAGES)))
    out("")
    out(f"one access to R = {config.rows:,} rows ({redact(config.master)})")
    out(f"{'access':<52} {'count':>9} {'seconds':>8} {'per second':>12} {'us each':>9} {'ms a query':>10}")
    for r in results:
        per_query = f"{r['ms_per_query']:.2f}" if "ms_per_query" in r else "-"
        out(f"{r['access']:<52} {r['count']:>9,} {r['seconds']:>8.3f} {r['per_s']:>12,.0f} {r['us_each']:>9.1f} "
            f"{per_query:>10}")
    return {"config": {**config.__dict__, "master": redact(config.master)}, "server_cache": cache, "results": results}


def _row(access: str, count: int, unit: str, seconds: float, found: int, per: int | None = None) -> dict:
    """One access timed: ``count`` queries, rows or keys in ``seconds``, ``found`` rows of R
    returned; ``per``: the queries they took, when ``count`` counts rows (the time of one query
    is then shown too)."""
    row = {"access": access, "count": int(count), "unit": unit, "seconds": seconds, "rows_found": int(found),
           "per_s": count / seconds if seconds > 0 else 0.0, "us_each": seconds / max(count, 1) * 1e6}
    if per:
        row["ms_per_query"] = round(seconds / per * 1e3, 2)
    return row


def _read_pages_at_once(master: str, table: str, key: str, page_rows: int, pages: list[int], barrier, results) -> None:
    """One connection of :func:`served_page_reads`: its store and page map opened, it waits for
    the others, then reads ``pages`` one range query each and reports when it started and ended
    (``time.perf_counter`` is the system's monotonic clock, the same in every process)."""
    with open_store(master, table, key) as store:
        page_map = store.page_map(page_rows)
        barrier.wait()
        started = time.perf_counter()
        rows = sum(len(store.load_pages(page_map, page)) for page in pages)
        results.put((started, time.perf_counter(), len(pages), rows))


def served_page_reads(master: str, table: str, page_rows: int, connections: int, pages_each: int = 300,
                      seed: int = 0, key: str = "nk", timeout_s: float = 600.0) -> dict:
    """Range reads of a page of ``page_rows`` keys of R (``table`` on ``master``) at places drawn
    uniformly, over ``connections`` connections at once, each in its own process reading
    ``pages_each`` pages: the queries and rows the server served a second, from the first
    connection's start to the last one's end. The clients' processes run on the same machine as
    the server when it is local, as the parts' workers do."""
    check_positive("connections", connections, "a positive whole number", integer=True)
    with open_store(master, table, key) as store:
        n_pages = store.page_map(page_rows).n_pages  # (built once here, kept beside R for the connections)
    rng = np.random.default_rng(seed)
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(connections), context.Queue()
    readers = [context.Process(target=_read_pages_at_once, daemon=True, args=(
        master, table, key, page_rows, rng.integers(0, n_pages, pages_each).tolist(), barrier, results))
        for _ in range(connections)]
    for reader in readers:
        reader.start()
    try:
        done = [results.get(timeout=timeout_s) for _ in readers]
    except queue.Empty:
        raise RuntimeError(f"served_page_reads: a connection reported nothing in {timeout_s:g} s "
                           f"(exit codes {[r.exitcode for r in readers]})") from None
    for reader in readers:
        reader.join()
    seconds = max(end for _, end, _, _ in done) - min(start for start, _, _, _ in done)
    queries, rows = sum(d[2] for d in done), sum(d[3] for d in done)
    return {"connections": connections, "page_rows": page_rows, "queries": queries, "rows": rows,
            "seconds": round(seconds, 4), "queries_per_s": round(queries / seconds, 1), "rows_per_s": round(rows / seconds, 1)}
