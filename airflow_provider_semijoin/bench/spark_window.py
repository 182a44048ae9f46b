"""The window a Spark path of ``semijoin bench --spark`` is measured over, and what it read back.

:class:`BatchWindow` collects a query's progress records, one per micro-batch, and opens and
closes the measured window on them; :func:`spark_result` turns it into the path's row of the
report: throughput, where a micro-batch's time and the machine's CPU went, and whether every
tuple reached the sinks exactly once (:class:`TupleLedger` over the Parquet sinks read back).
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from .cpu import DRIVER, ProcessCpu, cpu_seconds, cpu_split
from .steady import CHUNK_ROWS
from ..core.metrics import latency_ms
from ..spark.sinks import read_parquet_batch


# -- the window of micro-batches -------------------------------------------------------------------
class BatchWindow:
    """Collects one progress record per micro-batch; sets ``stop`` once the window is complete.

    The window opens at the end of the first micro-batch ending ``warmup_s`` or more after the
    end of the first one, and holds the micro-batches after it up to the first one ending
    ``window_s`` or more after it opened. ``cpu`` snapshots the CPU seconds of the driver, Spark's
    JVM and Python workers and the database server (:class:`.cpu.ProcessCpu`) at each record."""

    def __init__(self, warmup_s: float, window_s: float, cpu=None):
        self.warmup_s, self.window_s = warmup_s, window_s
        self.cpu = cpu or ProcessCpu().snapshot
        self.records: list[dict] = []
        self.cpu_s: list[dict] = []  # cpu() at each record
        self.opened: int | None = None  # index of the record whose end opens the window
        self.closed: int | None = None  # index of the window's last record
        self.stop = threading.Event()

    def __call__(self, record: dict) -> None:
        self.records.append(record)
        self.cpu_s.append(self.cpu())
        last = len(self.records) - 1
        if self.opened is None and record["time"] >= self.records[0]["time"] + self.warmup_s:
            self.opened = last
        elif self.opened is not None and self.closed is None and record["time"] >= self.opened_at + self.window_s:
            self.closed = last
            self.stop.set()

    @property
    def opened_at(self) -> float:
        return self.records[self.opened]["time"]

    def batches(self) -> list[dict]:
        """The window's records (up to the last one seen if the run ended before it closed)."""
        if self.opened is None:
            return []
        end = self.closed if self.closed is not None else len(self.records) - 1
        return self.records[self.opened + 1 : end + 1]

    def cpu_use(self) -> dict | None:
        """Over the window: the cores each process class kept busy and its CPU microseconds a
        tuple that left (:func:`.cpu.cpu_split`). The driver's Python threads share one GIL, so
        a driver near 1 core means the join's Python is what bounds it."""
        batches = self.batches()
        if not batches:
            return None
        end = self.opened + len(batches)
        spent = cpu_seconds(self.cpu_s[self.opened], self.cpu_s[end])
        return cpu_split(spent, batches[-1]["time"] - self.opened_at, sum(completed(r) for r in batches))

    def rate(self) -> float | None:
        """Tuples completed (matched or unmatched) per second over the window: with the queue
        carried across micro-batches a batch's input and output differ by what waits."""
        batches = self.batches()
        if not batches:
            return None
        return round(sum(completed(r) for r in batches) / (batches[-1]["time"] - self.opened_at), 1)


def completed(record: dict) -> int:
    return record["matched"] + record["unmatched"]


class TupleLedger:
    """How often each stream tuple (row id = its position in the stream) left the join."""

    def __init__(self):
        self.left = np.zeros(CHUNK_ROWS, np.uint8)

    def record(self, ids: np.ndarray) -> None:
        """One more exit for each of ``ids`` (row ids >= 0)."""
        if len(ids) and ids.max() >= len(self.left):
            self.left = np.concatenate([self.left, np.zeros(max(len(self.left), int(ids.max()) + 1), np.uint8)])
        np.add.at(self.left, ids, 1)

    def check(self, fed: int) -> dict:
        counts = self.left[:fed]
        beyond = int(np.count_nonzero(self.left[fed:]))
        return {"ok": bool((counts == 1).all()) and beyond == 0, "lost": int(np.count_nonzero(counts == 0)),
                "duplicated": int(np.count_nonzero(counts > 1)) + beyond, "tuples": fed}


# -- reading the sinks back ------------------------------------------------------------------------
def sink_columns(path: Path, batch_ids: list[int], columns: list[str]) -> pa.Table:
    tables = [read_parquet_batch(path / f"batch={b}", columns) for b in batch_ids]
    return pa.concat_tables(tables) if tables else pa.table({c: pa.array([], pa.float64()) for c in columns})


def check_sinks(out: Path, window: BatchWindow) -> dict:
    """Every tuple the recorded micro-batches took (rows 0 .. n-1 of the generator) is in the
    sinks exactly once: one matched row (R's key is unique) or one dead-letter row."""
    n = sum(r["input_rows"] for r in window.records)
    ids = [r["batch_id"] for r in window.records]
    written = pa.concat_tables([sink_columns(out / "matched", ids, ["sj_id"]), sink_columns(out / "dead", ids, ["sj_id"])])
    ledger = TupleLedger()
    ledger.record(pc.cast(written["sj_id"], pa.int64()).to_numpy())
    return ledger.check(n)


def window_latency(out: Path, window: BatchWindow) -> dict:
    """p50 / p99 from each window tuple's arrival to the end of the micro-batch that wrote it."""
    seconds = []
    for record in window.batches():
        arrived = sink_columns(out / "matched", [record["batch_id"]], ["sj_arrival"])["sj_arrival"].to_numpy()
        dead = sink_columns(out / "dead", [record["batch_id"]], ["sj_arrival"])["sj_arrival"].to_numpy()
        seconds.append(record["time"] - np.concatenate([arrived, dead]))
    return latency_ms(np.concatenate(seconds) if seconds else np.zeros(0))


def batch_split(window: BatchWindow, cpu: dict | None) -> dict | None:
    """Where a pipeline micro-batch's time goes (means over the window): the engine's slice
    (its own clock), the rest of foreachBatch (output tables, sinks, state, progress) and Spark
    outside foreachBatch (source, planning, collecting the batch to the driver as Arrow); and
    the time the engine worked ahead meanwhile, on its thread (``engine_ahead``); the driver's
    cores from the window's ``cpu`` (:meth:`BatchWindow.cpu_use`)."""
    batches = window.batches()
    if not batches or batches[0].get("batch_duration_s") is None:
        return None
    ends = [window.opened_at] + [r["time"] for r in batches]
    cycle = float(np.mean(np.diff(ends)))
    inside = float(np.mean([r["batch_duration_s"] for r in batches]))
    engine = float(np.mean([r["input_rows"] / r["service_rate_tps"] if r["service_rate_tps"] else 0.0 for r in batches]))
    ahead = float(np.mean([r.get("ahead_s", 0.0) for r in batches]))
    return {"cycle": round(cycle, 3), "engine": round(engine, 3), "rest_of_foreach_batch": round(inside - engine, 3),
            "spark_outside_foreach_batch": round(cycle - inside, 3), "engine_ahead": round(ahead, 3),
            "driver_cpu_cores": cpu["cores"][DRIVER] if cpu else None}


def spark_result(algorithm: str, path: str, window: BatchWindow, out: Path, rate: float | None) -> dict:
    batches = window.batches()
    cpu = window.cpu_use()
    result = {
        "algorithm": algorithm,
        "path": path,
        "offered_tps": rate,
        "tuples_per_s": window.rate(),
        "batches": len(window.records),
        "window_batches": len(batches),
        "window_tuples": sum(completed(r) for r in batches),
        "queue_tuples_max": max((r["queue_tuples"] for r in batches), default=0),
        "window_complete": window.closed is not None,
        "batch_rows": [r["input_rows"] for r in window.records],
        "first_window_batch": (window.opened + 1) if window.opened is not None else None,
        "batch_split_s": batch_split(window, cpu),
        "cpu": cpu,
        "exactly_once": check_sinks(out, window),
    }
    if rate is not None:
        latency = window_latency(out, window)
        result.update(latency_ms_p50=latency["p50"], latency_ms_p99=latency["p99"], latency_ms_max=latency["max"])
    return result
