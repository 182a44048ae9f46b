"""A join step's figures for one micro-batch: one definition each of what a slice of its
algorithm did (:class:`SliceStats`), of each part's slice with ``partitions = N``
(:class:`PartStats`) and their sum (:class:`PartsStats`), and of the step's stats
(:class:`StepStats`: the join's figures, how its tuples were routed, its memory), which
:meth:`.runner.BatchProcessor._record` adds up over the steps into the progress record.
``to_dict`` is the JSON the benchmark and the exactly-once errors show, with the keys, order and
value types the stats had as plain dicts (pinned by ``tests/spark/test_stepstats.py``)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from typing import ClassVar

PART_FIGURES = ("fed", "left", "pending", "wall_s", "disk_queries", "disk_rows")  # each part's, in the step's stats


@dataclass
class SliceStats:
    """What one slice of a session did (:func:`.joinstate.slice_of`), or one stepping ahead
    between micro-batches (:func:`.joinstate.ahead_of`), inside one version of R."""

    wall_s: float
    disk_queries: int  # range and point queries to R in the slice
    disk_rows: int  # rows of R they read
    master_version: int  # the version of R the slice read
    master_read_at: float | None  # when that version was R's newest (None: not known, R is static)
    invalidated: int  # cached entries of R dropped for changes installed before the slice
    fed: int  # new tuples fed
    left: int  # tuples that left (matched or unmatched)
    pending: int  # tuples inside after the slice
    forced_steps: int  # steps forced by tuples due (deadline, max_queue_time_s) or by the memory bound
    balanced: bool  # inside before + fed == left + inside after (exactly once)
    structure_bytes: int
    structure_bytes_peak: int
    log_bytes: int  # the session's log of the tuples inside
    ahead_s: float = 0.0  # of which: stepped ahead before the slice, between micro-batches (:mod:`.ahead`)
    ahead_bytes: int = 0  # bytes of what the stepping ahead completed, held until this batch took it
    rebuilds: ClassVar[int] = 0  # one slice in the driver: no part to rebuild

    def with_ahead(self, ahead: SliceStats, ahead_bytes: int) -> SliceStats:
        """These figures with those of the stepping ahead before the slice (``ahead``), whose
        output (``ahead_bytes``) leaves with this batch."""
        return replace(self, ahead_s=ahead.wall_s, ahead_bytes=ahead_bytes, balanced=self.balanced and ahead.balanced,
                       left=self.left + ahead.left, disk_queries=self.disk_queries + ahead.disk_queries,
                       disk_rows=self.disk_rows + ahead.disk_rows, invalidated=self.invalidated + ahead.invalidated)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class PartStats:
    """One part's report from its Spark task (:func:`.partitioned.serve_part`), as the task returns
    it (:meth:`to_json`)."""

    part: int
    slice: SliceStats | None = None  # None: a part with no key range of R (it holds no tuple)
    token: str = ""  # names the state the part's worker holds after the slice
    worker: str = ""  # the Python worker that holds it

    @property
    def balanced(self) -> bool:
        return self.slice is None or self.slice.balanced

    def figures(self) -> dict:
        """The part's figures in the step's ``part_stats`` (None for a part with no key range)."""
        return {name: None if self.slice is None else getattr(self.slice, name) for name in PART_FIGURES}

    def to_json(self) -> str:
        return json.dumps({"part": self.part, "slice": None if self.slice is None else asdict(self.slice),
                           "token": self.token, "worker": self.worker})

    @classmethod
    def from_json(cls, text: str) -> PartStats:
        data = json.loads(text)
        return cls(data["part"], None if data["slice"] is None else SliceStats(**data["slice"]), data["token"], data["worker"])


_SUMMED = ("disk_queries", "disk_rows", "fed", "left", "pending", "forced_steps", "structure_bytes",
           "structure_bytes_peak", "log_bytes")


@dataclass
class PartsStats:
    """The slice of a step over N parts (:class:`.partitioned.PartitionedJoin`): the parts' figures
    added up (:meth:`merged`), the driver's wall time and the version of R every part read."""

    disk_queries: int
    disk_rows: int
    fed: int
    left: int
    pending: int
    forced_steps: int
    structure_bytes: int
    structure_bytes_peak: int
    log_bytes: int
    wall_s: float
    master_version: int
    master_read_at: float | None
    part_stats: list[PartStats]  # the parts that ran: where the time goes
    balanced: bool
    rebuilds: int = 0  # parts whose state was not found where it was left (sent whole again, built afresh)
    ahead_s: ClassVar[float] = 0.0  # the parts do not work ahead between micro-batches
    ahead_bytes: ClassVar[int] = 0

    @classmethod
    def merged(cls, parts: list[PartStats], expected_parts: int, wall_s: float, master_read_at: float | None,
               rebuilds: int = 0) -> PartsStats:
        """The sum of ``parts`` (each ran once); balanced when all ``expected_parts`` ran
        and each is balanced."""
        ran = [p.slice for p in parts if p.slice is not None]
        return cls(
            **{name: sum(getattr(s, name) for s in ran) for name in _SUMMED},
            wall_s=wall_s, master_version=max((s.master_version for s in ran), default=0), master_read_at=master_read_at,
            part_stats=list(parts), balanced=len(parts) == expected_parts and all(p.balanced for p in parts),
            rebuilds=rebuilds,
        )

    def part_figures(self) -> list[dict]:
        return [p.figures() for p in self.part_stats]

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("part_stats", "balanced")}
        return {**data, "parts": len(self.part_stats), "part_stats": self.part_figures(), "balanced": self.balanced}


@dataclass
class StepStats:
    """A step's stats for one micro-batch (:meth:`.step.JoinStep.run`): its join's figures, where
    its tuples went, and its memory once the batch's state is written (:meth:`.step.JoinStep.account`)."""

    join: SliceStats | PartsStats
    held_for_retry: int  # tuples held for a retry after the batch (on_missing: retry)
    retried: int  # tuples held before the batch, fed again
    carried: int  # tuples inside the join after the batch
    passed_tuples: int  # tuples passed on (matched, or an unknown member)
    memory_budget_bytes: int  # M
    algorithm_memory_bytes: int  # the structures' share of M
    queue_bytes: int | None = None  # carried rows, rows held for a retry and the session's log (None: not accounted yet)
    carried_file_bytes: int | None = None  # of the carried rows, those in the mapped state file
    memory_peak_bytes: int | None = None  # the structures' peak + the queue's peak so far

    def account(self, queue_bytes: int, carried_file_bytes: int, queue_peak_bytes: int) -> None:
        self.queue_bytes, self.carried_file_bytes = queue_bytes, carried_file_bytes
        self.memory_peak_bytes = self.join.structure_bytes_peak + queue_peak_bytes

    def to_dict(self) -> dict:
        return {**self.join.to_dict(), **{f.name: getattr(self, f.name) for f in fields(self) if f.name != "join"}}
