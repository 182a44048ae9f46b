"""``python -m airflow_provider_semijoin.bench.executor_parts``: issue 54's design with the join in,
as a measured prototype against ``partitions = 1`` as the product runs it, on the standalone
cluster of :mod:`.partitions` (a master and two one-core workers).

The design keeps the rows off the driver. Each micro-batch (a Parquet file, as a file source's
micro-batch) is read by the executors and shuffled by R's key ranges to one task a part
(:func:`.partitions.hash_slots`: no sample of the keys). Each part joins in its task
(:func:`join_part`) and writes its own sinks, one file per (batch, part), replaced whole by a
retry. The driver sees each part's figures only: the cut points are chosen once, from the first
micro-batch's keys (:class:`..spark.partitioned.RangePartitioner`, a control-plane sample).

A part's state after batch ``b`` is its carried rows (the tuples still inside its join, the queue
of HYBRIDJOIN sec. 4), written by the part as an Arrow file per (part, batch) next to its sinks,
after them. The Python worker that ran the part also keeps its session (the algorithm with its
queue, and its store's page map) in memory, named by the batch it holds the state after. A task
of batch ``b`` whose worker holds the part's state after ``b - 1`` goes on from it. Any other
worker, or a retry of ``b``, rebuilds the part from the file of ``b - 1`` (a *rebuild*). Spark
places the shuffle's tasks without regard to that memory, so how often a part lands where its
state is decides what the design costs: the report counts the rebuilds and the parts that
moved.

Two variants run beside it at two parts: the source already partitioned by the join key (as a
Kafka topic keyed by it: each batch a file a part, a task each, no shuffle), and the hottest page's
tuples split between two parts that both read it (:func:`part_ranges`).

What it leaves out, and the product would need: re-cuts as the load moves (the cuts here are
fixed, chosen from the first batch), string and null keys in the route (an integer key column
here), multi-step pipelines (the next step's input another shuffle), deadlines, the progress
record, and a restart's reading of Spark's checkpoint (the state files are there for it).

Measured per configuration, the first ``warmup`` batches and the last (it drains) left out:
tuples/s, CPU seconds a tuple of every process under the bench (:func:`.partitions.cpu_seconds`;
and over the whole run by class of process, :mod:`.cpu`), the median batch, the slowest part's
join, the parts rebuilt and moved; ``partitions = 1`` and ``2`` as the product runs them (the
driver design) on the same files first, each round. Each run's sinks are
checked for exactly once: every tuple of the stream left once, and the matched set is that of
``partitions = 1``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..core.files import write_arrow, write_whole
from ..core.joins.registry import create
from ..core.stores import open_store, redact
from ..job.spec import StepSpec
from ..spark.joinstate import CarriedRows, due_times, session_from, slice_of
from ..spark.partitioned import CUT_PAGE_ROWS, RangePartitioner, worker_name
from .cpu import ProcessCpu, cpu_seconds as spent_between, cpu_split
from .partitions import (WORKERS, bench_arguments, bench_cluster, bench_inputs, bound, cpu_seconds, database_ceiling, hash_slots,
                         hottest_page_share, measure, read_schema, stream_files, summarize, warm_jvms)

PART_COLUMN = "sj_part"  # the part a tuple is routed to (the shuffle's key is its hash slot)
SLOT_COLUMN = "sj_slot"
# a micro-batch's query as one job of two stages: with adaptive execution each stage is a job of its
# own, planned after the one before (two runs of 2 rounds, p=2 x p=1 warm: 0.91 without, 0.69 with)
# and a file is a task of its own (a source partitioned by the key: a file a part), however small
QUERY_CONF = {"spark.sql.adaptive.enabled": "false", "spark.sql.files.openCostInBytes": str(1 << 30)}
STATS = pa.schema([("part", pa.int32()), ("worker", pa.string()), ("rebuilt", pa.bool_()), ("fed", pa.int64()),
                   ("left", pa.int64()), ("carried", pa.int64()), ("join_s", pa.float64()), ("write_s", pa.float64()),
                   ("task_s", pa.float64()), ("read_s", pa.float64()), ("disk_queries", pa.int64()),
                   ("disk_rows", pa.int64()), ("token", pa.string()), ("cpu_s", pa.float64())])  # a part's figures of a batch, what the driver collects
STATS_DDL = ("part int, worker string, rebuilt boolean, fed long, left long, carried long, join_s double, "
             "write_s double, task_s double, read_s double, disk_queries long, disk_rows long, token string, cpu_s double")  # the same, as Spark spells it

_HELD: dict[tuple[str, int], tuple[str, object, CarriedRows]] = {}  # per Python worker: (run, part) -> (token, session, rows)


@dataclasses.dataclass(frozen=True)
class PartRun:
    """What every part's task of one run shares: the step, each part's key range of R and
    memory, and where the parts write their sinks and state files."""

    name: str
    step_json: str
    ranges: list
    memory: int
    out: str
    schema: pa.Schema  # the stream's rows (a part sent none still steps its queue)

    def state_path(self, part: int, batch_id: int) -> Path:
        return Path(self.out) / "state" / f"part={part}" / f"batch={batch_id}.arrow"

    def sink_path(self, sink: str, batch_id: int, part: int) -> Path:
        return Path(self.out) / sink / f"batch={batch_id}" / f"part-{part}.parquet"


def _write_whole(table: pa.Table, path: Path, parquet: bool) -> None:
    """``table`` at ``path`` as Parquet or an Arrow file, whole or not at all (:func:`..core.files.write_whole`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if parquet:
        write_whole(path, lambda partial: pq.write_table(table, partial))
    else:
        write_whole(path, lambda partial: write_arrow(partial, table.schema, table.to_batches()))


def _state_before(run: PartRun, part: int, batch_id: int, token: str | None, step: StepSpec):
    """The part's session and carried rows after ``batch_id - 1``: held by this worker if it holds
    the attempt the driver took (``token``, named by that attempt's figures), or rebuilt from that
    batch's state file (a fresh algorithm over the part's key range fed the rows). The parts this
    worker holds of an earlier run are dropped, their connections to R closed."""
    for earlier in [k for k in _HELD if k[0] != run.name]:
        _HELD.pop(earlier)[1].algorithm.store.close()
    held = _HELD.pop((run.name, part), None)
    if held is not None and token is not None and held[0] == token:
        return held[1], held[2], False
    store = held[1].algorithm.store if held is not None else None
    if store is None:
        store = open_store(step.master.url, step.master.table, step.master.key, step.master_select).restrict(*run.ranges[part])
    path = run.state_path(part, batch_id - 1)
    rows = pa.ipc.open_file(pa.memory_map(str(path))).read_all() if path.exists() else None
    session = session_from(create(step.algorithm, store, run.memory, step.params), step.column, rows)
    return session, CarriedRows(rows), True


def join_part(run: PartRun, batch_id: int, drain: bool, tokens: dict, arrow_batches, part: int | None = None):
    """One part's share of batch ``batch_id`` (a ``mapInArrow`` task of the shuffle by hash slot:
    the task's partition is the part): join its new tuples with the part's state (``tokens``: each
    part's attempt of the batch before that the driver took), write its matched and unmatched rows
    and then its carried rows, keep the state in this worker under a new token; yields the part's
    figures (the only thing the driver collects). ``part``: given, it runs outside Spark."""
    started, cpu = time.perf_counter(), time.process_time()
    received = [b for b in arrow_batches if b.num_rows]
    if part is None and received:  # (a source partitioned by the key: a task a file, in any order)
        part = received[0].column(PART_COLUMN)[0].as_py()
    elif part is None:  # (no rows: after the shuffle by hash slot the task's partition is the part)
        from pyspark import TaskContext

        part = TaskContext.get().partitionId()
    step = StepSpec(**json.loads(run.step_json))
    session, carried, rebuilt = _state_before(run, part, batch_id, tokens.get(part), step)
    new = pa.Table.from_batches(received) if received else run.schema.empty_table()
    new = new.drop_columns([c for c in (PART_COLUMN, SLOT_COLUMN) if c in new.column_names]).sort_by("sj_arrival")
    # due as the product's step makes them (arrival + max_queue_time_s): the bench's tuples arrived when
    # the stream was made, so after its first seconds every one is past due in every path alike
    tagged = carried.add(new, due_times(new, step.max_queue_time_s), np.full(new.num_rows, part))
    with session.algorithm.store.reading_at(session.algorithm.store.version()):
        result, stats = slice_of(session, step.column, tagged, -np.inf, -np.inf, drain)
    joined = time.perf_counter()
    matched, dead = carried.take(result, session.algorithm.schema)
    _write_whole(matched, run.sink_path("matched", batch_id, part), parquet=True)
    _write_whole(dead, run.sink_path("dead", batch_id, part), parquet=True)
    inside = carried.carried()
    _write_whole(inside if inside is not None else tagged.slice(0, 0), run.state_path(part, batch_id), parquet=False)
    token = f"{batch_id}:{uuid.uuid4().hex}"  # this attempt's: the driver names it back if it takes its figures
    _HELD[(run.name, part)] = (token, session, CarriedRows(inside))
    done = time.perf_counter()
    yield pa.RecordBatch.from_pydict({
        "part": [part], "worker": [worker_name()], "rebuilt": [rebuilt], "fed": [new.num_rows], "left": [stats.left],
        "carried": [carried.count], "join_s": [stats.wall_s], "write_s": [done - joined], "task_s": [done - started],
        "read_s": [0.0], "disk_queries": [stats.disk_queries], "disk_rows": [stats.disk_rows], "token": [token],
        "cpu_s": [time.process_time() - cpu]},
        schema=STATS)


def route(cuts: list, slots: list[int], key: str, shared: tuple | None = None):
    """The Spark column of each tuple's part: the number of ``cuts`` (parts 1.. lower bounds) at or
    below its key (a key below R's range: part 0, above it: the last part); with a ``shared`` page
    ``(low, high, owner, other)``, its tuples go to either of its two parts by their id's hash."""
    from pyspark.sql import functions as F

    part = F.lit(0)
    for cut in cuts:
        part = part + F.when(F.col(key) >= F.lit(cut), 1).otherwise(0)
    if shared is not None:
        low, high, owner, other = shared
        inside = F.col(key) >= F.lit(low) if low is not None else F.lit(True)
        inside = inside & (F.col(key) < F.lit(high)) if high is not None else inside
        halves = F.when(F.pmod(F.hash("sj_id"), F.lit(2)) == 0, F.lit(owner)).otherwise(F.lit(other))
        part = F.when(inside, halves).otherwise(part)
    slot = F.lit(slots[0]).cast("long")
    for p in range(1, len(slots)):
        slot = F.when(F.col(PART_COLUMN) == p, F.lit(slots[p]).cast("long")).otherwise(slot)
    return part.cast("int"), slot


def parts_of_rows(table: pa.Table, key: str, cuts: list, shared: tuple | None) -> np.ndarray:
    """Each row's part by the cut points, as :func:`route` gives it in Spark, for a task that read
    the batch itself (an integer key without nulls, as the bench's). A ``shared`` page's tuples
    alternate between its two parts in the batch's order, where :func:`route` splits them by the
    hash of their id: every task reads the same files in the same order, so each tuple still goes
    to one part."""
    keys = table[key].to_numpy()
    parts = np.searchsorted(np.asarray(cuts), keys, side="right")
    if shared is not None:
        low, high, owner, other = shared
        inside = np.flatnonzero(((keys >= low) if low is not None else True) & ((keys < high) if high is not None else True))
        parts[inside] = np.where(np.arange(len(inside)) % 2 == 0, owner, other)
    return parts


def serve_parts(run: PartRun, batch_id: int, drain: bool, paths: list[str], cuts: list, shared: tuple | None, key: str,
                tokens: dict, build: bool, indices) -> list[dict]:
    """A task of the direct form: it reads the batch's files itself (pyarrow: no rows through the
    JVMs, no shuffle) and joins the parts it is given - ``build``: the parts ``indices``, held here
    or rebuilt from their state files; otherwise every part whose state after ``batch_id - 1`` this
    worker holds in the attempt the driver took (``tokens``), wherever the scheduler put the task.
    Returns each part's figures.

    A worker that holds another attempt of a part - one whose figures never reached the driver (a
    task failed after its join, and the part was built again elsewhere), or the first attempt of a
    batch Spark replays - does not serve it: its state is not the one the sinks and the state file
    now hold (a rebuilt part need not leave in a batch what a warm one left: a cache starts empty).
    A replayed batch's parts are built from the files of the batch before and rewrite the batch's
    sinks and state whole, so a (batch, part)'s sinks and state come from one attempt. Two attempts
    of one (batch, part) running at once (a zombie task) could still mix their files; the product
    would need the attempt's files committed as one (a manifest renamed last)."""
    for (name, p), held in list(_HELD.items()):  # an attempt the driver did not take, of a batch it has moved past
        if name == run.name and p in tokens and tokens[p] != held[0] and int(held[0].split(":")[0]) < batch_id:
            _HELD.pop((name, p))[1].algorithm.store.close()
    wanted = list(indices) if build else sorted(
        p for (name, p), held in _HELD.items() if name == run.name and tokens.get(p) == held[0])
    if not wanted:
        return []
    started, cpu = time.perf_counter(), time.process_time()
    table = pa.concat_tables(pq.read_table(path) for path in paths)
    parts = parts_of_rows(table, key, cuts, shared)
    mine = {p: table.filter(parts == p) for p in wanted}
    read_s, read_cpu_s = time.perf_counter() - started, time.process_time() - cpu  # (each task that serves a part reads the whole batch)
    figures = [next(join_part(run, batch_id, drain, tokens, mine[p].to_batches(), part=p)).to_pylist()[0] for p in wanted]
    return [{**f, "read_s": read_s, "task_s": f["task_s"] + read_s, "cpu_s": f["cpu_s"] + read_cpu_s / len(figures)}
            for f in figures]


def served_directly(spark, run: PartRun, batch_id: int, drain: bool, paths: list[str], cuts: list, shared, key: str,
                    tokens: dict) -> list[dict]:
    """Batch ``batch_id`` through the direct form: a task a core serving the parts its worker holds
    (in the attempts ``tokens`` names), then one task for each part no worker served (a rebuild);
    the driver sends file names, cut points and tokens, and gets each part's figures."""
    context = spark.sparkContext
    serve = functools.partial(serve_parts, run, batch_id, drain, paths, cuts, shared, key, tokens)
    slots = context.defaultParallelism
    figures = context.parallelize(range(slots), slots).mapPartitions(functools.partial(serve, False)).collect()
    missing = sorted(set(range(len(run.ranges))) - {f["part"] for f in figures})
    if missing:
        figures += context.parallelize(missing, len(missing)).mapPartitions(functools.partial(serve, True)).collect()
    return figures


def part_ranges(step: StepSpec, parts: int, sample: pa.Table, share_hot: bool = False) -> tuple[list, list, tuple | None]:
    """Each part's key range of R, cut by the load of ``sample``'s keys (the first micro-batch); the
    cuts (parts 1.. lower bounds); with ``share_hot``, the hottest page shared by its part and a
    neighbour - ``(low, high, owner, other)``, the other's range stretched over it - else None. A
    tuple needs only its own page read by its part, so a page's tuples may be split between two
    parts that both read it, where by key range alone one part takes the whole hottest page."""
    with open_store(step.master.url, step.master.table, step.master.key, step.master_select) as store:
        partitioner = RangePartitioner(store, parts, CUT_PAGE_ROWS)
        partitioner.assign(sample[step.column])
        ranges = partitioner.key_ranges()
        pages, valid = partitioner.pages(sample[step.column])
        hot = int(np.bincount(pages[valid]).argmax())
        bounds = [b.item() for b in partitioner.page_map.bounds]
        n_pages, cut_pages = partitioner.page_map.n_pages, partitioner.cuts
    if None in ranges:
        raise ValueError(f"R's {n_pages} pages cannot be cut into {parts} parts: give --rows more rows of R")
    cuts = [key_range[0] for key_range in ranges[1:]]
    if not share_hot:
        return ranges, cuts, None
    owner = int(np.searchsorted(cut_pages, hot, side="right"))
    other = owner + 1 if owner + 1 < parts else owner - 1
    low, high = bounds[hot], bounds[hot + 1] if hot + 1 < n_pages else None
    ranges = list(ranges)
    ranges[other] = (low, ranges[other][1]) if other > owner else (ranges[other][0], high)
    return ranges, cuts, (low if hot else None, high, owner, other)


FORMS = ("shuffled", "keyed", "direct")  # how a batch's rows reach the parts (:func:`run_parts`)
RUNS = ((1, "shuffled", False), (2, "shuffled", False), (2, "keyed", False), (2, "shuffled", True),
        (1, "direct", False), (2, "direct", False), (2, "direct", True), (4, "direct", False))  # (parts, form, hottest page shared) of a round


def run_parts(spark, step: StepSpec, parts: int, stream: list[pa.Table], files: list[str], warmup: int, out: Path,
              form: str = "shuffled", share_hot: bool = False) -> dict:
    """The design over every batch at ``parts``; its figures and where the parts ran. ``form``, one
    of :data:`FORMS`: ``shuffled``, the executors read the batch and shuffle it by key range to a task
    a part; ``keyed``, the source is already partitioned by the join key (as a Kafka topic keyed by
    it): each batch is a file a part, read by a task of its own, with no shuffle; ``direct``, each
    task reads the batch's files itself and joins the parts its worker holds
    (:func:`served_directly`). ``share_hot``: the hottest page's tuples split between two parts
    (:func:`part_ranges`)."""
    if form not in FORMS:
        raise ValueError(f"form {form!r} is not one of {FORMS}")
    if form == "keyed" and share_hot:
        raise ValueError("a source keyed by range has no shared page: keyed and share_hot together are not measured")
    ranges, cuts, shared = part_ranges(step, parts, stream[0], share_hot)
    run = PartRun(f"{os.getpid()}-{time.time_ns()}-p{parts}", json.dumps(dataclasses.asdict(step)),
                  ranges, max(step.memory_bytes // parts, 1), str(out), stream[0].schema)
    sources = keyed_files(ranges, stream, step.column, out / "keyed") if form == "keyed" else [[path] for path in files]
    tokens: dict[int, str] = {}  # each part's attempt of the batch before whose figures the driver took
    if form == "direct":
        def served(batch_id: int, paths: list[str]) -> list[dict]:
            return served_directly(spark, run, batch_id, batch_id == len(files) - 1, paths, cuts, shared, step.column, tokens)
    else:
        schema = read_schema(spark, files)
        part, slot = route(cuts, hash_slots(spark, parts), step.column, shared)

        def served(batch_id: int, paths: list[str]) -> list[dict]:
            frame = spark.read.schema(schema).parquet(*paths).withColumn(PART_COLUMN, part).withColumn(SLOT_COLUMN, slot)
            frame = frame if form == "keyed" else frame.repartition(parts, SLOT_COLUMN)
            task = functools.partial(join_part, run, batch_id, batch_id == len(files) - 1, dict(tokens))
            return [r.asDict() for r in frame.mapInArrow(task, STATS_DDL).collect()]

    rows, where = [], {}
    before = {name: spark.conf.get(name) for name in QUERY_CONF}
    for name, value in QUERY_CONF.items():
        spark.conf.set(name, value)
    try:
        for batch_id, paths in enumerate(sources):
            rows.append(_batch(run, functools.partial(served, batch_id, paths), batch_id, where))
            tokens.update(rows[-1].pop("tokens"))
    finally:
        for name, value in before.items():
            spark.conf.set(name, value)
    return summarized(rows, warmup, parts)


def keyed_files(ranges: list, stream: list[pa.Table], key: str, folder: Path) -> list[list[str]]:
    """Each micro-batch as a file a part (its key range's tuples): a source partitioned by the key."""
    out = []
    for batch_id, batch in enumerate(stream):
        keys, paths = batch[key].to_numpy(), []
        for p, (low, high) in enumerate(ranges):
            mine = np.ones(len(keys), bool) if low is None else keys >= low
            mine &= True if high is None else keys < high
            paths.append(str(folder / f"batch-{batch_id}-part-{p}.parquet"))
            _write_whole(batch.filter(pa.array(mine)), Path(paths[-1]), parquet=True)
        out.append(paths)
    return out


def _batch(run: PartRun, served, batch_id: int, where: dict) -> dict:
    """One micro-batch through the parts (``served()``: each part's figures, the parts joined where
    the form puts them); its figures. ``where``: each part's worker in the batch before, updated."""
    cpu, started = cpu_seconds(), time.perf_counter()
    figures = sorted(served(), key=lambda f: f["part"])
    batch_s = time.perf_counter() - started
    if [f["part"] for f in figures] != list(range(len(run.ranges))):
        raise RuntimeError(f"batch {batch_id}: parts {[f['part'] for f in figures]} answered, not each of {len(run.ranges)} once")
    moved = sum(1 for f in figures if where.get(f["part"], f["worker"]) != f["worker"])
    tokens = {f["part"]: f["token"] for f in figures}
    where.update((f["part"], f["worker"]) for f in figures)
    return {"tuples": sum(f["fed"] for f in figures), "batch_s": batch_s, "cpu_s": cpu_seconds() - cpu,
            "slowest_join_s": max(f["join_s"] for f in figures), "slowest_task_s": max(f["task_s"] for f in figures),
            "rebuilds": sum(f["rebuilt"] for f in figures) - (batch_id == 0) * len(figures), "moved": moved,
            "workers": [f["worker"] for f in figures], "carried": [f["carried"] for f in figures],
            "tasks_s": [round(f["task_s"], 4) for f in figures], "spark_s": batch_s - max(f["task_s"] for f in figures),
            "read_s": max(f["read_s"] for f in figures), "fed": [f["fed"] for f in figures],
            "disk_queries": sum(f["disk_queries"] for f in figures), "disk_rows": sum(f["disk_rows"] for f in figures),
            "tokens": tokens, "tasks_cpu_s": sum(f["cpu_s"] for f in figures)}


def summarized(rows: list[dict], warmup: int, parts: int) -> dict:
    """The kept batches' figures (the first ``warmup`` and the last, which drains, left out)."""
    summary = summarize(rows, warmup, parts, ("batch_s", "slowest_join_s", "slowest_task_s", "spark_s", "read_s"))
    kept = summary["per_batch"]
    return {**summary, "rebuilds": [r["rebuilds"] for r in kept], "moved": [r["moved"] for r in kept],
            "tasks_cpu_us_per_tuple": round(sum(r["tasks_cpu_s"] for r in kept) / sum(r["tuples"] for r in kept) * 1e6, 3)}


def left_once(stream: list[pa.Table], folder: Path) -> dict:
    """Whether every tuple of ``stream`` left ``folder``'s sinks exactly once; the matched ids."""
    ids = {sink: pq.read_table(folder / sink, columns=["sj_id"])["sj_id"].to_pylist() for sink in ("matched", "dead")}
    every = sorted(i for batch in stream for i in batch["sj_id"].to_pylist())
    return {"exactly_once": sorted(ids["matched"] + ids["dead"]) == every, "matched": sorted(ids["matched"])}


def compare(runs: list[dict], one: dict) -> list[dict]:
    """Each run's throughput and CPU a tuple against ``one`` (p=1 as the product runs it)."""
    return [{**r, "tuples_per_s_x_p1": round(r["tuples_per_s"] / one["tuples_per_s"], 3),
             "cpu_us_per_tuple_x_p1": round(r["cpu_us_per_tuple"] / one["cpu_us_per_tuple"], 3)} for r in runs]


def one_round(spark, step: StepSpec, stream: list[pa.Table], files: list[str], warmup: int, out: Path,
              forms: tuple[str, ...] = FORMS) -> dict:
    """p=1 and p=2 as the product runs them, then the runs of :data:`RUNS` whose form is in ``forms``,
    on the same files in turn; each against p=1, with its CPU by process and its exactly-once check."""
    processes, tuples = ProcessCpu(), sum(b.num_rows for b in stream)

    def by_process(run):
        before, started = processes.snapshot(), time.perf_counter()
        result = run()
        split = cpu_split(spent_between(before, processes.snapshot()), time.perf_counter() - started, tuples)
        return {**result, "cpu_us_by_process": split["us_per_tuple"]}

    one = by_process(lambda: measure(spark, step, 1, stream, warmup, out, files=files))
    product = left_once(stream, out / "p1-read")
    driver_two = by_process(lambda: measure(spark, step, 2, stream, warmup, out, files=files))
    driver_two["exactly_once"] = left_once(stream, out / "p2-read") == product
    runs = []
    for parts, form, share in [r for r in RUNS if r[1] in forms]:
        folder = out / f"executor-p{parts}-{form}-{share}"
        run = by_process(lambda: run_parts(spark, step, parts, stream, files, warmup, folder, form, share))
        checked = left_once(stream, folder)
        runs.append({**run, "form": form, "shared_hot_page": share,
                     "exactly_once": checked["exactly_once"] and checked["matched"] == product["matched"]})
    kept = ("partitions", "tuples_per_s", "cpu_us_per_tuple", "median_batch_s", "cpu_us_by_process", "rebuilds")
    return {"p1": {k: one[k] for k in kept if k in one}, "p1_exactly_once": product["exactly_once"],
            "driver": compare([{k: driver_two[k] for k in (*kept, "exactly_once")}], one)[0],
            "executor": compare(runs, one)}


def direct_estimate(rounds: list[dict], batch_rows: int, hot_share: float, master: str, table: str) -> dict:
    """Throughput of the direct form on N one-core workers, a model from the rounds' measured
    batches (a model, not a measurement): a batch of ``n`` tuples takes
    ``T = S + r * n + u * max(h * n, n / N)`` - Spark's and the driver's time a batch beyond the
    slowest task ``S`` (p=2), each task's read and route of the whole batch ``r`` a tuple (p=1),
    a part's join and writes ``u`` a tuple (p=1), and the hottest page's share ``h`` of the tuples
    taken by one part (by key range) or spread over every part (``h = 0``) - with batches of
    ``batch_rows / 2`` tuples a worker. Bounded by what the database serves
    (:func:`.partitions.database_ceiling`) at the parts' queries and rows of R a tuple (p=2)."""
    def kept(parts: int) -> list[dict]:
        return [b for r in rounds for run in r["executor"] if (run["partitions"], run["form"], run["shared_hot_page"])
                == (parts, "direct", False) for b in run["per_batch"]]

    one, two = kept(1), kept(2)
    spark_s = statistics.median(b["spark_s"] for b in two)
    read_s = statistics.median(b["read_s"] / b["tuples"] for b in one)
    join_s = statistics.median((b["slowest_task_s"] - b["read_s"]) / b["tuples"] for b in one)
    tuples = sum(b["tuples"] for b in two)
    reads = {"queries_per_tuple": sum(b["disk_queries"] for b in two) / tuples,
             "rows_per_tuple": sum(b["disk_rows"] for b in two) / tuples}
    rows_per_query = reads["rows_per_tuple"] / reads["queries_per_tuple"] if reads["queries_per_tuple"] else 1.0
    served = database_ceiling(master, table, rows_per_query)
    ceiling = max(served, key=lambda c: c["queries_per_s"])
    out = {"S_s": round(spark_s, 4), "r_us_per_tuple": round(read_s * 1e6, 4), "u_us_per_tuple": round(join_s * 1e6, 4),
           "h": round(hot_share, 4), **reads, "served": served, "workers": []}
    for workers in (2, *WORKERS):
        n = batch_rows * workers // 2
        row = {"workers": workers, "batch": n}
        for name, share in (("by_key_range", hot_share), ("hot_page_spread", 0.0)):
            model = n / (spark_s + read_s * n + join_s * max(share * n, n / workers))
            row[name], row[f"{name}_binds"] = bound(model, reads["queries_per_tuple"], reads["rows_per_tuple"],
                                                    ceiling["queries_per_s"], ceiling["rows_per_s"])
        out["workers"].append(row)
    return out


def print_estimate(e: dict) -> None:
    print(f"the direct form on N one-core workers (a model): T = S + r n + u max(h n, n / N), S = {e['S_s']} s, "
          f"r = {e['r_us_per_tuple']} us, u = {e['u_us_per_tuple']} us, h = {e['h']}; the parts read "
          f"{e['queries_per_tuple']:.5f} queries and {e['rows_per_tuple']:.3f} rows of R a tuple; the database served "
          + ", ".join(f"{c['queries_per_s']:,.0f} queries/s and {c['rows_per_s']:,.0f} rows/s over {c['connections']}"
                      for c in e["served"]))
    print("| workers N | batch n | by key range, tuples/s (binds) | hottest page spread, tuples/s (binds) |")
    print("|---|---|---|---|")
    for w in e["workers"]:
        print(f"| {w['workers']} | {w['batch']:,} | {w['by_key_range']:,.0f} ({w['by_key_range_binds']}) | "
              f"{w['hot_page_spread']:,.0f} ({w['hot_page_spread_binds']}) |")


def main(argv: list[str] | None = None) -> int:
    parser = bench_arguments("airflow_provider_semijoin.bench.executor_parts", batches=8, warmup=2)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each configuration, in turn")
    parser.add_argument("--warmup-rounds", type=int, default=1,
                        help="rounds run first and not reported (the JVMs' first rounds cost p=1 2-3x its CPU a tuple)")
    parser.add_argument("--forms", nargs="+", choices=FORMS, default=FORMS, help="the forms of the design a round runs")
    args = parser.parse_args(argv)
    table, step, stream = bench_inputs(args)
    report = {"master": redact(args.master), "rows": args.rows, "batch_rows": args.batch_rows, "batches": args.batches,
              "algorithm": args.algorithm, "memory": args.memory, "rounds": []}
    with tempfile.TemporaryDirectory() as folder, bench_cluster(Path(folder), "semijoin-executor-parts-bench", 2) as spark:
        warm_jvms(spark, args.jvm_warmup_jobs)
        files = stream_files(stream, Path(folder) / "stream")
        for r in range(-args.warmup_rounds, args.rounds):
            result = one_round(spark, step, stream, files, args.warmup, Path(folder) / f"round{r}", tuple(args.forms))
            if r >= 0:
                report["rounds"].append(result)
                print_round(result, r)
    report["load_average"] = os.getloadavg()
    if "direct" in args.forms and report["rounds"]:
        with open_store(args.master, table, step.master.key) as store:
            hot = hottest_page_share(store, stream, 2)
        report["direct_estimate"] = direct_estimate(report["rounds"], args.batch_rows, hot, args.master, table)  # (the cluster stopped)
        print_estimate(report["direct_estimate"])
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    return 0


def print_round(result: dict, number: int) -> None:
    one = result["p1"]
    print(f"round {number}: p=1 as the product runs it (read, collected, joined on the driver, written): "
          f"{one['tuples_per_s']:,.0f} tuples/s, {one['cpu_us_per_tuple']:.2f} us CPU a tuple, "
          f"{one['median_batch_s']} s a batch; exactly once: {'yes' if result['p1_exactly_once'] else 'NO'}; "
          f"CPU us a tuple by process over the whole run: {one['cpu_us_by_process']}")
    d = result["driver"]
    print(f"p=2 as the product runs it (the driver design: collected, parts called from the driver): {d['tuples_per_s']:,.0f} "
          f"tuples/s ({d['tuples_per_s_x_p1']:.2f}x), {d['cpu_us_per_tuple']:.2f} us CPU a tuple ({d['cpu_us_per_tuple_x_p1']:.2f}x), "
          f"rebuilds {d['rebuilds']}, exactly once: {'yes' if d['exactly_once'] else 'NO'}; by process: {d['cpu_us_by_process']}")
    print("| rows on the executors, parts | tuples/s | x p=1 | CPU us/tuple | x p=1 | batch s | slowest join s "
          "| slowest task s | rebuilds a batch | parts moved a batch | exactly once |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in result["executor"]:
        shared = ", hottest page shared" if r["shared_hot_page"] else ""
        print(f"| {r['partitions']} ({r['form']}{shared}) | {r['tuples_per_s']:,.0f} | {r['tuples_per_s_x_p1']:.2f} | {r['cpu_us_per_tuple']:.2f} | "
              f"{r['cpu_us_per_tuple_x_p1']:.2f} | {r['median_batch_s']} | {r['median_slowest_join_s']} | "
              f"{r['median_slowest_task_s']} | {r['rebuilds']} | {r['moved']} | {'yes' if r['exactly_once'] else 'NO'} |")
    for r in result["executor"]:
        print(f"  p={r['partitions']} {r['form']}{' shared' if r['shared_hot_page'] else ''} CPU us a tuple by process over the whole run: "
              f"{r['cpu_us_by_process']}; inside the parts' tasks (their processes' CPU while they ran): {r['tasks_cpu_us_per_tuple']}")
    sys.stdout.flush()


if __name__ == "__main__":
    # the tasks' functions are pickled by reference to the imported module, whose _HELD each Python worker keeps
    from airflow_provider_semijoin.bench import executor_parts

    sys.exit(executor_parts.main())
