"""Progress records: one per micro-batch of a running join, and a bounded history of them.

A record is what a running join tells the outside world after each micro-batch (Spark issue,
item 6): input rows, matched / unmatched tuples, service rate, batch duration, queue and cache
sizes, cache hit ratio, disk queries and rows, latency p50/p99 from arrival to output, deadline
misses, reconnects to a lost database and the seconds spent waiting for it. It travels three ways, all built from :meth:`ProgressRecord.to_dict`:

* in-process, to a callback (the Spark runner's ``on_progress``);
* as one line ``SEMIJOIN_PROGRESS {json}`` in the driver log (:meth:`ProgressRecord.to_line`,
  :func:`parse_line`), so an Airflow task can forward it however the job was launched (the
  driver's last line, ``SEMIJOIN_SUMMARY {json}``, :data:`SUMMARY_PREFIX`, is the job's summary);
* into XCom (keys below): the latest record, and a :class:`ProgressHistory` whose size is bounded
  however long the join runs, which the UI plugin draws.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, field, fields

LINE_PREFIX = "SEMIJOIN_PROGRESS "
SUMMARY_PREFIX = "SEMIJOIN_SUMMARY "

XCOM_INFO = "semijoin_info"  # algorithm, parameters, memory split: pushed once when the join starts
XCOM_LATEST = "semijoin_metrics"  # the latest ProgressRecord as a dict
XCOM_HISTORY = "semijoin_history"  # ProgressHistory.to_dict()


@dataclass
class ProgressRecord:
    """What one micro-batch did. Counts are for this batch; ``total_*`` are since the join started."""

    algorithm: str
    batch_id: int
    time: float  # epoch seconds when the batch finished
    input_rows: int
    matched: int  # stream tuples that found at least one master row
    unmatched: int  # stream tuples that left with a reason
    output_rows: int  # matched rows written (K per tuple for 1:K)
    service_rate_tps: float | None  # input_rows / batch_duration_s
    batch_duration_s: float
    ahead_s: float = 0.0  # seconds the joins went on between the batch before and this one (their output: this batch's)
    ahead_bytes: int = 0  # bytes of that output, held until this batch took it: output in flight, as a slice's before its sinks, not the budget's
    queue_tuples: int = 0  # tuples still inside the joins or held for a retry at the end of the batch
    peak_queue_tuples: int = 0  # tuples inside a join during the batch (carried + new: the buffer's fill)
    queue_bytes: int = 0  # bytes the runner keeps in memory for the tuples inside the joins: their rows not in the mapped state file, the rows held for a retry, the sessions' logs
    carried_file_bytes: int = 0  # the rows of the tuples inside the joins in the checkpoint's state files, memory-mapped (disk and page cache, not the budget)
    drained: str | None = None  # why this batch emptied the joins (end_of_input, stop_file, ...), or None
    cache_entries: int | None = None
    cache_hit_ratio: float | None = None
    disk_queries: int = 0
    disk_rows: int = 0
    latency_ms_p50: float | None = None  # arrival -> output
    latency_ms_p99: float | None = None
    deadline_misses: int = 0
    memory_bytes: int = 0  # bytes the algorithms' structures hold (the queue's keys in H_S / Q / IB / SB included)
    structure_bytes_peak: int = 0  # the most the algorithms' structures held (within their share of the budget)
    memory_budget_bytes: int = 0  # the steps' memory budgets M together (structures + carried rows)
    memory_peak_bytes: int = 0  # structure_bytes_peak + the most queue_bytes so far: within memory_budget_bytes
    unmatched_by_reason: dict = field(default_factory=dict)
    total_input_rows: int = 0
    total_matched: int = 0
    total_unmatched: int = 0
    total_deadline_misses: int = 0
    master_versions: list = field(default_factory=list)  # version of R each join step read (one per step)
    master_staleness_s: list = field(default_factory=list)  # per step: seconds from when that version was R's newest to this record (None: unknown); a commit older than that was seen
    reconnects: int = 0  # database sessions reopened after a lost one (stores and table sinks)
    reconnect_wait_s: float = 0.0  # seconds spent waiting for the database to come back
    total_reconnects: int = 0
    total_reconnect_wait_s: float = 0.0
    part_rebuilds: int = 0  # parts (partitions: N) whose state was not found on a worker where it was left, built again from the driver's copy

    def to_dict(self) -> dict:
        return asdict(self)

    def to_line(self) -> str:
        return LINE_PREFIX + json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict) -> "ProgressRecord":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def parse_line(line: str) -> dict | None:
    """The record carried by a log line, or None when the line is not a progress line."""
    return json_after(line, LINE_PREFIX)


def json_after(line: str, prefix: str) -> dict | None:
    """The JSON object that follows ``prefix`` in a log line, or None. spark-submit's output
    merges the Python driver's stdout with the JVM's log lines, so a log line may run on after
    the object on the same line: only the object is read (seen once in CI: the driver's
    1,227-character summary followed by more text, which failed a join that had succeeded)."""
    at = line.find(prefix)
    if at < 0:
        return None
    try:
        record, _ = json.JSONDecoder().raw_decode(line, at + len(prefix))
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def write_line(text: str) -> None:
    """``text`` and its newline to stdout in one write: under spark-submit the driver's stdout is
    unbuffered (PYTHONUNBUFFERED), so ``print`` writes them apart and a JVM log line can land
    between the two."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


# Series the history keeps per point (the charts of the UI plugin).
HISTORY_SERIES = (
    "time",
    "batch_id",
    "input_rows",
    "service_rate_tps",
    "latency_ms_p50",
    "latency_ms_p99",
    "cache_hit_ratio",
    "peak_queue_tuples",
    "disk_queries",
    "batch_duration_s",
    "deadline_misses",
    "unmatched",
    "total_input_rows",
    "total_unmatched",
    "total_deadline_misses",
)


class ProgressHistory:
    """The last ``max_age_s`` seconds of records, at most ``max_points`` points, as columns.

    When full, the oldest half is thinned to every other point, so a long run keeps a coarse
    past and a fine present in bounded space: O(max_points) whatever the run length.
    """

    def __init__(self, max_points: int = 600, max_age_s: float = 3600.0):
        if max_points < 4:
            raise ValueError(f"max_points: {max_points} is below 4")
        self.max_points = max_points
        self.max_age_s = max_age_s
        self._rows: list[list] = []

    def __len__(self) -> int:
        return len(self._rows)

    def append(self, record: dict) -> None:
        self._rows.append([_finite(record.get(name)) for name in HISTORY_SERIES])
        newest = self._rows[-1][0]
        cut = 0
        while cut < len(self._rows) and newest - self._rows[cut][0] > self.max_age_s:
            cut += 1
        del self._rows[:cut]
        if len(self._rows) > self.max_points:
            half = len(self._rows) // 2
            self._rows = self._rows[:half:2] + self._rows[half:]

    def to_dict(self) -> dict:
        return {"series": list(HISTORY_SERIES), "points": [list(r) for r in self._rows]}

    @classmethod
    def from_dict(cls, data: dict, max_points: int = 600, max_age_s: float = 3600.0) -> "ProgressHistory":
        history = cls(max_points, max_age_s)
        index = {name: i for i, name in enumerate(data.get("series", []))}
        for point in data.get("points", []):
            history._rows.append([point[index[n]] if n in index else None for n in HISTORY_SERIES])
        return history


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
