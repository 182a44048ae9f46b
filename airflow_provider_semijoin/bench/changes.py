"""``semijoin bench --changes``: what master data changed by someone else costs a running Spark
join, and how soon the join sees a change (issue 52).

For each algorithm and each change rate (rows/s; default 0, 100, 1,000) it runs the product's
streaming query (:func:`.spark_paths.run_pipeline`: the built-in generator source as a backlog,
``batch_rows`` tuples a micro-batch, Zipf keys over R) with its step's ``change_capture:
triggers``, against the bench's R in a table of its own (``bench_r<rows>_changes``: the rows of
:func:`.steady.bench_master`, generated once with the same seed; the triggers and the values
written stay on it, never on the table the other benches share). Once the query's first
micro-batch has ended, a writer thread on its own connection commits plain SQL ``UPDATE``s of R
(:class:`ChangeWriter`): transactions of ``txn_rows`` rows, one ``UPDATE`` each, at the rate,
each row's ``price`` set to a marker value no row had (negative, unique in the run), keys drawn
from the stream's own distribution (the generator with another seed: the hot keys are changed
most), until the window closes.

Per run: throughput (tuples completed per second over the window, as ``--spark`` measures it)
and its ratio to rate 0 of the same algorithm; the changes' staleness p50 / p99 (commit to the
end of the first micro-batch that emitted a row carrying the change, :mod:`.change_staleness`)
and visibility (commit to the end of the first micro-batch that read a version holding it);
how many changes committed in the window were seen, and why the others were not; whether each
tuple left exactly once; and whether every output row of a changed key carries the value R had
at the version its micro-batch read (``master_versions``), from the triggers' before-images.
Each run starts with capture enabled afresh on the bench's table (:func:`fresh_capture`).

Spark's JVM is warmed first by the same query with no join (:data:`.spark_paths.NO_JOIN`), as
``--spark`` does. Measure ratios within one run: the machine is shared.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from .change_staleness import History, emitted_rows, staleness, version_check
from .spark_paths import KEY, SparkBenchConfig, run_pipeline, run_stream_static
from .spark_pipeline import describe, quiet_falling_behind, size_text, spark_session
from .spark_window import BatchWindow
from ..core.checks import check_number, check_positive
from ..core.errors import ConfigError
from ..core.stores import DatabaseURL, open_store, redact
from ..core.stores.capture import disable_capture, enable_capture
from ..core.stores.sql import side_tables
from ..core.stores.versions import before_table
from ..workloads.master import generate_master
from ..workloads.zipf import zipf_rows

DEFAULT_ALGORITHMS = ("hybridjoin", "cachejoin-pq", "ssij")
DEFAULT_RATES = (0.0, 100.0, 1000.0)
COLUMN = "price"  # the value column the writer sets (R's DOUBLE: a marker is exact)
KEY_BLOCK = 100_000  # keys the writer draws from the generator at a time
MAX_BEHIND_S = 1.0  # a writer further behind its schedule than this drops the rest (its rate says so)
CAPTURED = {"master_static": False, "change_capture": "triggers"}


@dataclasses.dataclass
class ChangesBenchConfig:
    """The Spark bench's settings (``spark``: master, rows, memory, zipf, shape, warm-up,
    window, batch_rows, Spark master), the change ``rates`` (rows/s) and ``txn_rows`` (rows a
    writer transaction changes); ``work_ahead`` False: the join idle between micro-batches (each
    slice then reads R's newest version, never an older one through the before-images)."""

    spark: SparkBenchConfig
    rates: list[float] = dataclasses.field(default_factory=lambda: list(DEFAULT_RATES))
    txn_rows: int = 10
    work_ahead: bool = True

    def __post_init__(self) -> None:
        self.spark.algorithms = list(self.spark.algorithms or DEFAULT_ALGORITHMS)
        self.rates = list(self.rates)
        if not self.rates:
            raise ConfigError("rates: expected at least one change rate in rows/s, e.g. 0,100,1000")
        for i, rate in enumerate(self.rates):
            check_number(f"rates[{i}]", rate, "a number of changed rows per second >= 0", minimum=0)
        check_positive("txn_rows", self.txn_rows, "a positive number of rows a transaction changes", integer=True)
        if len(self.spark.core.shapes) != 1:
            raise ConfigError(f"shapes: {self.spark.core.shapes} names {len(self.spark.core.shapes)} shapes; "
                              "the change bench runs one stream shape")


# -- the writer: someone else's plain SQL ---------------------------------------------------------
class ChangeWriter(threading.Thread):
    """Commits ``UPDATE R SET price = CASE key WHEN .. THEN .. END WHERE key IN (..)`` of
    ``txn_rows`` distinct keys every ``txn_rows / rate`` seconds on its own autocommit connection
    (each statement its own transaction), each row a new marker value, until ``stop`` is set;
    records each row's key, value and commit time (the wall clock once the commit returned).
    It stops at ``until()`` too (the window's opening + twice its length): a join that falls
    behind (its micro-batches longer than the window) ends its run instead of being changed
    without end."""

    def __init__(self, url: str, table: str, config: ChangesBenchConfig, rate: float, marker_base: int,
                 stop: threading.Event, until, clock=time.time):
        super().__init__(name="semijoin-change-writer", daemon=True)
        core = config.spark.core
        self.url, self.table, self.rate, self.txn_rows = url, table, rate, config.txn_rows
        self.draw = lambda start: zipf_rows(start, start + KEY_BLOCK, core.rows, exponent=core.zipf,
                                            shape=core.shapes[0], seed=core.seed + 1)[KEY].to_numpy()
        self.marker_base, self.stop, self.clock = marker_base, stop, clock
        self.until = until
        self.stopped_early = False
        self.keys: list[int] = []
        self.values: list[float] = []
        self.commit_times: list[float] = []
        self.statement_s: list[float] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._write()
        except BaseException as exc:  # reported by result(): the run then fails with it
            self.error = exc

    def _write(self) -> None:
        db = DatabaseURL.parse(self.url)
        q, p = db.dialect.quote, db.dialect.param
        cases = " ".join([f"WHEN {p} THEN {p}"] * self.txn_rows)
        sql = (f"UPDATE {q(self.table)} SET {q(COLUMN)} = CASE {q(KEY)} {cases} END "
               f"WHERE {q(KEY)} IN ({db.dialect.placeholders(self.txn_rows)})")
        connection = db.connect()
        pool, drawn, period = np.zeros(0, np.int64), 0, self.txn_rows / self.rate
        due = self.clock()
        try:
            cursor = connection.cursor()
            while not self.stop.wait(max(0.0, due - self.clock())):
                if self.clock() > self.until():
                    self.stopped_early = True
                    break
                if len(pool) < 4 * self.txn_rows:
                    pool, drawn = np.concatenate([pool, self.draw(drawn)]), drawn + KEY_BLOCK
                keys, pool = distinct_first(pool, self.txn_rows)
                values = [-float(self.marker_base + len(self.keys) + i) for i in range(len(keys))]
                started = self.clock()
                cursor.execute(sql, tuple(x for pair in zip(keys, values) for x in pair) + tuple(keys))
                committed = self.clock()
                self.keys += keys
                self.values += values
                self.commit_times += [committed] * len(keys)
                self.statement_s.append(committed - started)
                due = max(due + period, committed - MAX_BEHIND_S)
            cursor.close()
        finally:
            connection.close()

    @staticmethod
    def nothing() -> dict:
        """The :meth:`result` of a run with no writer (rate 0)."""
        return {"keys": np.zeros(0, np.int64), "values": np.zeros(0), "commit_times": np.zeros(0), "rows_per_s": 0.0,
                "statement_ms_p50": None, "stopped_before_window_closed": False}

    def result(self) -> dict:
        if self.error is not None:
            raise RuntimeError(f"the change writer failed: {self.error}") from self.error
        times = np.array(self.commit_times)
        span = times[-1] - times[0] if len(times) > 1 else 0.0
        return {"keys": np.array(self.keys, np.int64), "values": np.array(self.values), "commit_times": times,
                "rows_per_s": round((len(times) - self.txn_rows) / span, 1) if span > 0 else None,
                "stopped_before_window_closed": self.stopped_early,
                "statement_ms_p50": round(float(np.median(self.statement_s)) * 1e3, 3) if self.statement_s else None}


def distinct_first(pool: np.ndarray, n: int) -> tuple[list[int], np.ndarray]:
    """The first ``n`` distinct keys of ``pool`` in draw order (a transaction changes a key
    once), and the pool after the draws they took."""
    _, first = np.unique(pool[: 4 * n], return_index=True)
    taken = np.sort(first)[:n]
    return [int(k) for k in pool[taken]], pool[int(taken[-1]) + 1:]


class StartingWindow(BatchWindow):
    """The run's window; ``on_first`` is called at the first progress record (the query is up,
    its step has put the capture triggers in place)."""

    def __init__(self, warmup_s: float, window_s: float, on_first):
        super().__init__(warmup_s, window_s)
        self.on_first = on_first

    def __call__(self, record: dict) -> None:
        if not self.records:
            self.on_first()
        super().__call__(record)


# -- one run ---------------------------------------------------------------------------------------
def run_rate(spark, config: ChangesBenchConfig, table: str, algorithm: str, rate: float, out: Path,
             marker_base: int) -> dict:
    """The pipeline of ``algorithm`` while R is changed at ``rate`` rows/s; its row of the table."""
    core = config.spark.core
    with open_store(core.master, table, KEY) as store:
        fresh_capture(store)
        v0 = store.version()
    window = StartingWindow(core.warmup_s, core.window_s, lambda: writer.start() if writer else None)
    writer = None
    if rate:
        writer = ChangeWriter(core.master, table, config, rate, marker_base, window.stop, lambda: writes_until(window))
    try:  # the window's close stops the writer and the query
        result = run_pipeline(spark, config.spark, table, algorithm, core.shapes[0], out, None,
                              work_ahead=config.work_ahead, step_options=CAPTURED, window=window)
    finally:
        window.stop.set()
        if writer is not None and writer.is_alive():
            writer.join()
    writes = writer.result() if writer else ChangeWriter.nothing()
    history = History.read(core.master, table, KEY, COLUMN, v0)
    rows = emitted_rows(out, window, history.keys_now, KEY, COLUMN)
    result.update(rate=rate, written_rows_per_s=writes["rows_per_s"], statement_ms_p50=writes["statement_ms_p50"],
                  writer_stopped_early=writes["stopped_before_window_closed"],
                  versions=version_check(history, rows), changes=staleness(history, writes, rows, window))
    return result


def writes_until(window: BatchWindow) -> float:
    """When the writer stops at the latest: twice the window's length after it opened (not
    before it opened: the warm-up's micro-batches may be slow)."""
    return window.opened_at + 2 * window.window_s if window.opened is not None else float("inf")


def fresh_capture(store) -> None:
    """R's capture as just enabled: the bench's own table loses the triggers, change log and
    before-images of earlier runs, so each run starts from the same state (reads of R at an
    older version scan every before-image: a log left from earlier runs would slow the later
    ones), then gets them anew (the step's ``change_capture`` then finds them in place)."""
    disable_capture(store)
    q = store.dialect.quote
    cursor = store.connection.cursor()
    try:
        for name in (*side_tables(store.table), before_table(store.table)):
            cursor.execute(f"DROP TABLE IF EXISTS {q(name)}")
        store.connection.commit()
    finally:
        cursor.close()
    enable_capture(store)


# -- the whole run ---------------------------------------------------------------------------------
def changes_master(config: ChangesBenchConfig, out=print, clock=time.perf_counter) -> str:
    """The bench's R in a table of its own (generated once, then reused with what earlier runs
    wrote into it: every run's markers are its own)."""
    core = config.spark.core
    table = f"bench_r{core.rows}_changes"
    started = clock()
    info = generate_master(core.master, table, core.rows, seed=0)
    out(f"master {redact(core.master)} table {table}: {core.rows:,} rows "
        f"({'reused' if info['reused'] else 'generated'}, {clock() - started:.1f} s)")
    return table


def run_changes_bench(config: ChangesBenchConfig, out=print, spark=None, clock=time.perf_counter) -> dict:
    core = config.spark.core
    started = clock()
    table = changes_master(config, out, clock)
    workdir = Path(config.spark.workdir or tempfile.mkdtemp(prefix="semijoin-changes-bench-"))
    report = {"config": describe_changes(config), "command": command(config), "table": table, "rows": []}
    spark, created, _ = spark_session(config.spark, spark)
    restore_logger = quiet_falling_behind(spark)
    try:
        warm = run_stream_static(spark, config.spark, table, core.shapes[0], workdir / "warm", None, False,
                                 join_master=False)  # Spark's JVM warmed (JIT) for every measured run
        out(f"  JVM warmed by the query with no join: {warm['tuples_per_s'] or 0:,.0f} tuples/s")
        marker_base = int(time.time()) * 1_000_000  # markers unique across runs: -(base + row number)
        for name in config.spark.algorithms:
            for i, rate in enumerate(config.rates):
                row = run_rate(spark, config, table, name, rate, workdir / f"{name}-{i}", marker_base)
                marker_base += 1_000_000
                report["rows"].append(row)
                out(row_line(row, ratio_to_first(report["rows"], row)))
    finally:
        restore_logger()
        if created:
            spark.stop()
        if config.spark.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    for row in report["rows"]:
        row["ratio_to_no_changes"] = ratio_to_first(report["rows"], row)
    report["seconds"] = round(clock() - started, 1)
    for line in format_table(report, config):
        out(line)
    out(f"command ({report['seconds']:,.0f} s): {report['command']}")
    return report


def ratio_to_first(rows: list[dict], row: dict) -> float | None:
    """``row``'s tuples/s over its algorithm's run at rate 0 (None: none measured)."""
    base = next((r for r in rows if r["algorithm"] == row["algorithm"] and r["rate"] == 0), None)
    if base is None or not base["tuples_per_s"] or not row["tuples_per_s"]:
        return None
    return round(row["tuples_per_s"] / base["tuples_per_s"], 2)


def healthy(report: dict) -> bool:
    """Every run let each tuple leave exactly once, served the values of the version it read,
    and saw every change in its window (the triggers captured each)."""
    return all(r["exactly_once"]["ok"] and r["versions"]["ok"] and not r["changes"]["uncaptured"]
               for r in report["rows"])


# -- the table and the command ---------------------------------------------------------------------
def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def row_line(r: dict, ratio: float | None) -> str:
    c = r["changes"]
    seen = f"{c['seen']}/{c['committed_in_window']}"
    return (f"{r['algorithm']:<14} {r['rate']:>7,.0f} {r['written_rows_per_s'] or 0:>9,.0f} "
            f"{r['tuples_per_s'] or 0:>11,.0f} {'-' if ratio is None else f'{ratio:.2f}':>6} "
            f"{_ms(c['staleness_ms']['p50']):>8} {_ms(c['staleness_ms']['p99']):>8} "
            f"{_ms(c['visibility_ms']['p50']):>8} {_ms(c['visibility_ms']['p99']):>8} {seen:>13} "
            f"{'yes' if r['versions']['ok'] else 'NO':>8} {'yes' if r['exactly_once']['ok'] else 'NO':>6}")


def format_table(report: dict, config: ChangesBenchConfig) -> list[str]:
    core = config.spark.core
    lines = [
        "",
        f"Change bench: R = {core.rows:,} rows ({report['table']}, writes captured by triggers), shape "
        f"{core.shapes[0]}, Zipf {core.zipf:g}, memory {core.memory / 2**20:.4g} MiB, backlog of "
        f"{config.spark.batch_rows:,} tuples a micro-batch, window {core.window_s:g} s after {core.warmup_s:g} s "
        f"warm-up, Spark {config.spark.spark_master}, work ahead {'on' if config.work_ahead else 'off'}; writer: "
        f"UPDATEs of {config.txn_rows} rows a transaction, "
        "keys from the stream's distribution",
        "rows/s: asked, committed; staleness: commit -> first output row carrying it; visible: commit -> end of "
        "the first micro-batch reading a version with it (ms, p50 p99); seen: changes committed in the window",
        f"{'algorithm':<14} {'rows/s':>7} {'committed':>9} {'tuples/s':>11} {'ratio':>6} {'stale50':>8} "
        f"{'stale99':>8} {'vis50':>8} {'vis99':>8} {'seen/window':>13} {'versions':>8} {'once':>6}",
    ]
    lines += [row_line(r, r.get("ratio_to_no_changes")) for r in report["rows"]]
    for r in report["rows"]:
        c, v = r["changes"], r["versions"]
        if c["committed"]:
            lines.append(
                f"{r['algorithm']} at {r['rate']:,.0f} rows/s: not seen {c['unprobed']} (no tuple of the key left "
                f"after the commit) + {c['older_reads']} (its tuples after the commit read an older version); "
                f"uncaptured {c['uncaptured']}; visible at the latest {c['visible_batches_late_max']} micro-batch(es) "
                f"after the first that started after the commit; versions read never went back: "
                f"{'yes' if c['read_versions_monotone'] else 'NO'}; rows of changed keys {c['changed_key_rows'] or 0:.0%} "
                "of the output; "
                f"{v['rows_checked']:,} rows checked against the version read, {v['wrong']} wrong"
                + ("; the writer stopped 2 window lengths after the window opened, before it closed"
                   if r["writer_stopped_early"] else "")
                + (f" (older {v['older']}, newer {v['newer']}, unknown {v['unknown']}; first {v['first_wrong']})"
                   if v["wrong"] else ""))
    return lines


def describe_changes(config: ChangesBenchConfig) -> dict:
    return {"spark": describe(config.spark), "rates": config.rates, "txn_rows": config.txn_rows,
            "work_ahead": config.work_ahead}


def command(config: ChangesBenchConfig) -> str:
    """The ``semijoin bench --changes`` command line that repeats this run (password redacted)."""
    s, core = config.spark, config.spark.core
    parts = ["semijoin bench --changes", f"--master {redact(core.master)}", f"--rows {core.rows}",
             f"--memory {size_text(core.memory)}", f"--zipf {core.zipf:g}", f"--shapes {core.shapes[0]}",
             f"--algorithms {','.join(s.algorithms)}", f"--change-rates {','.join(f'{r:g}' for r in config.rates)}",
             f"--change-txn-rows {config.txn_rows}", f"--warmup {core.warmup_s:g}", f"--window {core.window_s:g}",
             f"--seed {core.seed}", f"--spark-batch-rows {s.batch_rows}"]
    if not config.work_ahead:
        parts.append("--change-no-work-ahead")
    parts += [f"--set {k}={v}" for k, v in core.params.items()]
    return " ".join(parts)

