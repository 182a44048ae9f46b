"""A Spark job's counts: one definition each of what a micro-batch did, the job's totals and
the summary :func:`.runner.run_job` returns (its XCom). A micro-batch's counts go into its
:class:`~..core.progress.ProgressRecord` and add up to the totals, which the next record's
``total_*`` fields and the summary report."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class BatchCounts:
    """What one micro-batch did (the fields of its progress record of the same names)."""

    input_rows: int = 0
    matched: int = 0  # stream tuples that found at least one master row
    unmatched: int = 0  # stream tuples that left with a reason
    output_rows: int = 0  # matched rows written (K per tuple for 1:K)
    deadline_misses: int = 0
    reconnects: int = 0  # database sessions reopened after a lost one (stores and table sinks)
    reconnect_wait_s: float = 0.0  # seconds spent waiting for the databases to come back


@dataclass
class JobCounts(BatchCounts):
    """The job's totals since it started, and the last progress record."""

    batches: int = 0
    last_record: dict | None = None

    def add(self, batch: BatchCounts) -> None:
        self.batches += 1
        for name in _BATCH_FIELDS:
            setattr(self, name, getattr(self, name) + getattr(batch, name))


@dataclass
class JobSummary:
    """What a job did, as :func:`.runner.run_job` returns it (the operators' XCom, the driver's
    last line): the totals of :class:`JobCounts` and how the job ended."""

    job: str
    stopped_by: str
    drained: str | None  # why the last batch emptied the joins, or None
    counts: JobCounts
    held_for_retry: int  # tuples held for a retry (a database that was down) when the job ended
    queue_tuples: int  # tuples inside the joins when the job ended (in the checkpoint's state)
    duration_s: float

    def to_dict(self) -> dict:
        c = self.counts
        return {
            "job": self.job,
            "stopped_by": self.stopped_by,
            "drained": self.drained,
            "batches": c.batches,
            **{name: getattr(c, name) for name in _BATCH_FIELDS},
            "reconnect_wait_s": round(c.reconnect_wait_s, 3),
            "held_for_retry": self.held_for_retry,
            "queue_tuples": self.queue_tuples,
            "duration_s": round(self.duration_s, 3),
            "last_progress": c.last_record,
        }


_BATCH_FIELDS = tuple(f.name for f in fields(BatchCounts))
