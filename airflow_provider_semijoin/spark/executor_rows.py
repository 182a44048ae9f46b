"""``partitions = N`` with ``data_path: executors``: the micro-batch's rows never reach the driver.

The driver design (:mod:`.partitioned`) collects each micro-batch, routes its keys and writes the
sinks itself; the driver is then the bottleneck (issue 54: p=2 at 0.56-0.75x the throughput of
one part, at 1.7-2.5x its CPU a tuple). Here, for a Parquet files source, the driver sends each
micro-batch's **file names**, the cut points of R's key range and each part's token, and gets
back a few figures a part:

- The batch's files are read from Spark's own checkpoint (:func:`batch_files`): in
  ``foreachBatch`` a file source's micro-batch is a ``LogicalRDD`` whose ``inputFiles()`` is
  empty, but ``offsets/<b>`` names the source's log batch and ``sources/0/<k>`` (or a
  ``.compact`` file) lists its files with their modification times, which are the tuples'
  arrival (``sj_arrival``), as the driver design's ``_metadata.file_modification_time``. The
  offset log is written before the batch runs, so a replay reads the same files. The driver
  checks their footers' timestamp units against those the job decided at its start before any
  part reads them (:func:`.sources.check_units`).
- One Spark job a batch of one task a core (``sc.parallelize(range(cores))``): each task reads
  the whole batch with pyarrow, routes each row to its part by the cut points (:class:`Routes`)
  and serves **the parts its Python worker holds** in the attempt the driver took (a token
  named in that attempt's figures), wherever the scheduler put the task. A part no task served
  (the first batch, a replay, a restart, a lost worker, an attempt whose figures were lost) is
  then built by a task of its own from its state file of the batch before: a second, small job,
  only when needed, counted as ``part_rebuilds``.
- Each part joins its tuples with its session (the algorithm with its queue over the store
  restricted to its key range, :meth:`..core.stores.base.MasterStore.restrict`), reading R at
  the version the driver chose for the batch, and writes its matched and dead-letter rows, one
  Parquet file each per (batch, part) (``batch=<b>/part-<p>.parquet``: a replay replaces it),
  then its carried rows (the queue, HYBRIDJOIN sec. 4; MESHJOIN sec. 3.1) as the state file of
  (part, batch) under the checkpoint, under a pending name. Once every part has written its
  sinks, the driver renames each pending file to the name a rebuild reads
  (:meth:`PartsRun.commit_state`), then lets Spark commit the batch: a driver lost between
  the two replays the batch from the state before it, as on the driver's path.
- A tuple whose key cannot be in R (null, bad) goes to part 0, whose session lets it leave at
  once with its reason (:func:`.joinstate.slice_of`).
- A part's tuples that left go through the step's on-missing policy as the driver design's
  (:func:`.step.unknown_members`, :func:`.step.went_on`): matched or given the unknown member,
  they go on (to the matched sink, or the next step's input), else to the dead letter.

The cut points are chosen once, from the first batch's key column (read by the driver: a
control-plane sample of the keys, :class:`.partitioned.RangePartitioner`), and kept in the
checkpoint, so a restart routes as before. A pipeline runs its steps in turn, each with its own
parts and cut points; a step's parts read the rows the step before's parts passed on from their
files (:class:`.executor_steps.ExecutorSteps`, the driver's side). What this path does not do
yet, refused before any work with one sentence (:func:`refusal`): other sources and sink kinds,
retries and inferred members, as-of lookups, deadlines, refresh, re-cuts as the load moves, and
speculative tasks (two live attempts of one part could mix their files).

Measured against one part (``bench.executor_parts``, whose direct form this is): p=2 on two
one-core workers 1.12-1.60x the throughput of p=1 at 0.79-1.39x its CPU a tuple, 0 rebuilds.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
import uuid
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..core.errors import ConfigError
from ..core.files import write_whole
from ..core.joins.registry import create
from ..core.keys import KeyType, normalize
from ..core.micros import epoch_micros
from ..core.stores import open_store
from ..job.sources import FilesSource
from ..job.spec import JobSpec, StepSpec
from .joinstate import CarriedRows, StateFiles, due_times, session_from, slice_of
from .partitioned import worker_name
from .sources import file_row_ids, readable
from .sinks import dictionary_columns
from .step import renamed, unknown_members, went_on

EXECUTOR_POLICIES = ("dead_letter", "unknown_member")  # the steps' on_missing this path runs
ARRIVAL_POINTS = 101  # each part reports the arrival times of the tuples that left at this many quantiles

_HELD: dict[tuple[str, int, int], tuple[str, object, CarriedRows]] = {}  # per Python worker: (run, step, part) -> (token, session, rows)


def refusal(spec: JobSpec, spark_conf) -> str | None:
    """Why ``spec`` cannot run with ``data_path: executors`` (one sentence naming the field and
    what is expected), or None. ``spark_conf``: the session's ``spark.conf`` (None: not checked)."""
    source = spec.source
    if not isinstance(source, FilesSource) or source.format != "parquet":
        return (f"data_path: 'executors' reads the micro-batch's files on the executors, so it needs a files source "
                f"of format parquet (got {source.kind}{'' if not isinstance(source, FilesSource) else ' ' + source.format})")
    for index, step in enumerate(spec.steps):
        unsupported = [name for name, used in (
            ("on_missing", step.on_missing not in EXECUTOR_POLICIES), ("as_of", step.as_of is not None),
            ("refresh", step.refresh is not None)) if used]
        if unsupported:
            return (f"steps[{index}].{unsupported[0]}: not supported with data_path: 'executors' yet; expected "
                    f"{' or '.join(EXECUTOR_POLICIES) if unsupported[0] == 'on_missing' else 'none'}, or data_path: driver")
    if spec.deadline is not None:
        return "deadline: not supported with data_path: 'executors' yet; expected none, or data_path: driver"
    for name in ("matched", "dead_letter"):
        if getattr(spec.sinks, name).kind != "parquet":
            return (f"sinks.{name}: data_path: 'executors' has each part write its own Parquet files; expected "
                    f"kind parquet (got {getattr(spec.sinks, name).kind})")
    if spark_conf is not None and str(spark_conf.get("spark.speculation", "false")).lower() == "true":
        return ("spark.speculation: true runs two attempts of a part at once, whose files could mix; expected false "
                "with data_path: 'executors'")
    return None


def chosen_path(spec: JobSpec, spark_conf) -> tuple[str, str]:
    """Where the job's micro-batches go, ``driver`` or ``executors``, and why, in one sentence for
    the task log: ``data_path: executors`` where it can run (else :class:`ConfigError`), ``auto``
    where it can and ``partitions >= 2`` (one part: the driver, as before), ``driver`` always."""
    refused = refusal(spec, spark_conf)
    if spec.data_path == "executors" and refused is not None:
        raise ConfigError(refused)
    if spec.data_path == "executors" or (spec.data_path == "auto" and refused is None and spec.partitions > 1):
        return "executors", (f"data_path: {spec.data_path}: the {spec.partitions} parts read each micro-batch's files "
                             "and write the sinks on the executors")
    why = "data_path: driver" if spec.data_path == "driver" else (
        "one part" if refused is None else refused.replace("data_path: 'executors'", "the executors' path"))
    return "driver", f"the micro-batches are collected to the driver ({why})"


# -- the batch's files, from Spark's checkpoint ----------------------------------------------------
def _log_offset(checkpoint: Path, batch_id: int) -> int:
    """The file source's log batch at the end of ``batch_id`` (-1: none yet): the first source's
    line of ``offsets/<batch_id>`` (the query's sources in plan order: the files, then the heartbeat)."""
    if batch_id < 0:
        return -1
    path = checkpoint / "offsets" / str(batch_id)
    lines = path.read_text().splitlines()  # "v1", the batch's metadata, one offset a source
    offset = lines[2].strip() if len(lines) > 2 else "-"
    return json.loads(offset)["logOffset"] if offset.startswith("{") else -1


def batch_files(checkpoint: str, batch_id: int) -> list[tuple[str, float]]:
    """Each file of micro-batch ``batch_id`` of the files source, as (URI, arrival in epoch
    seconds), in the order of Spark's log; [] for a batch that read no file."""
    root = Path(checkpoint)
    first, last = _log_offset(root, batch_id - 1) + 1, _log_offset(root, batch_id)
    if last < first:
        return []
    log = root / "sources" / "0"
    entries = []
    for path in sorted(log.iterdir(), key=lambda p: int(p.name.split(".")[0]) if p.name.split(".")[0].isdigit() else -1):
        number = path.name.split(".")[0]
        if not number.isdigit() or (path.suffix != ".compact" and not first <= int(number) <= last) or \
                (path.suffix == ".compact" and int(number) < first):
            continue
        for line in path.read_text().splitlines()[1:]:
            entry = json.loads(line)
            if first <= entry["batchId"] <= last:
                entries.append(entry)
    seen, files = set(), []
    for entry in entries:  # (a compact file repeats the entries of the batches it compacts)
        if entry["path"] not in seen:
            seen.add(entry["path"])
            files.append((entry["path"], entry["timestamp"] / 1000.0))
    return files


def read_batch(files: list[tuple[str, float]], columns: list[str] | None, arrival_column: str | None = None,
               id_column: str | None = None) -> pa.Table | None:
    """The batch's rows as the driver design gives them (``sj_id`` = the ``id_column`` as text, or
    ``<file name>#<row>``; the columns; ``sj_arrival`` = the file's modification time, or
    ``arrival_column`` as epoch seconds, :func:`.sources.stream_frame`); None for no file."""
    tables = []
    for uri, modified in files:
        table = pq.read_table(readable(uri), columns=columns)
        name = Path(unquote(urlparse(uri).path)).name
        ids = table[id_column].cast(pa.string()) if id_column is not None else file_row_ids(pa.scalar(name), np.arange(table.num_rows))
        arrival = pa.array(np.full(table.num_rows, modified)) if arrival_column is None else epoch_seconds(table[arrival_column])
        tables.append(table.add_column(0, "sj_id", ids).append_column("sj_arrival", arrival))
    return pa.concat_tables(tables, promote_options="default") if tables else None


def epoch_seconds(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """A stream's arrival column as epoch seconds, as Spark casts it to a timestamp: numbers are
    seconds, timestamps and dates their instant, to the microsecond (nanoseconds floored,
    :func:`..core.micros.epoch_micros`); null stays null."""
    if pa.types.is_timestamp(values.type) or pa.types.is_date(values.type):
        return pc.divide(epoch_micros(values).cast(pa.float64()), 1e6)
    if pa.types.is_integer(values.type) or pa.types.is_floating(values.type):
        return values.cast(pa.float64())
    raise ConfigError(f"arrival_column: its type {values.type} is not a number of seconds or a timestamp")


# -- routing --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Routes:
    """Each part's key range of R as R spells it (:meth:`.partitioned.RangePartitioner.key_ranges`;
    None: a part with no page, which gets no tuple) and how a key finds its part: the parts with
    a range in order (``owners``) and the lower bounds of all but the first (``cut_keys``, R's key
    type normalised). A key below R's range goes to the first owner, one above it to the last, a
    key that cannot be in R to part 0 (it leaves at once, with its reason)."""

    ranges: list
    key_type: KeyType

    @functools.cached_property
    def owners(self) -> np.ndarray:
        return np.array([p for p, key_range in enumerate(self.ranges) if key_range is not None], np.int64)

    @functools.cached_property
    def cut_keys(self) -> np.ndarray:
        lows = [_text(self.ranges[p][0]) for p in self.owners[1:]]
        return normalize(pa.array(lows, pa.int64() if self.key_type.kind == "int" else pa.string()), self.key_type).keys

    def parts_of(self, keys: pa.ChunkedArray) -> np.ndarray:
        normalized = normalize(keys, self.key_type)
        parts = self.owners[np.searchsorted(self.cut_keys, normalized.keys, side="right")]
        parts[~normalized.valid] = 0
        return parts


def _text(bound):
    """A bound of a string key's page map (its UTF-8 bytes) as text; any other bound as it is."""
    return bound.decode("utf-8") if isinstance(bound, bytes) else bound


def kept_bound(bound):
    """A bound as the checkpoint's JSON keeps it (a string key's bytes as ``{"utf8": text}``)."""
    return {"utf8": bound.decode("utf-8")} if isinstance(bound, bytes) else bound


def bound_of(bound):
    return bound["utf8"].encode("utf-8") if isinstance(bound, dict) else bound


# -- a part's task ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PartsRun:
    """What every part's task of one step of one driver's run shares: the step (its index in
    the pipeline), the routes, each part's memory and most tuples inside, where its input, state
    and output go."""

    name: str  # the driver's run: a worker drops what it holds of another
    step: StepSpec
    routes: Routes
    memory: int
    max_pending: int | None
    state_folder: str
    retain: int
    matched_path: str  # the matched sink's folder; of a step before the last, its rows' folder for the next step
    dead_path: str
    columns: list | None  # the source's columns (None: every column of the files)
    empty: pa.Schema  # a batch's rows (sj_id, the source's columns, sj_arrival): a batch with no file has none
    arrival_column: str | None = None  # the stream's column of arrival times (None: a file's modification time)
    index: int = 0  # the step's index in the pipeline (> 0: its input is the step before's rows, already with ids)
    last: bool = True  # the last step: its rows going on are the matched sink's
    id_column: str | None = None  # the source's tuple ids (None: <file>#<row>)

    def part_file(self, path: str, batch_id: int, part: int) -> Path:
        """Where the part writes its rows of the batch in the folder ``path`` (a replay replaces it)."""
        return Path(path) / f"batch={batch_id}" / (f"part-{part}.parquet" if self.index == 0 else
                                                     f"part-{part}-step{self.index}.parquet")

    def commit_state(self, batch_id: int) -> None:
        """The driver's, once every part has written its sinks of the batch: each part's state
        after it, written under a pending name (:func:`join_part`), renamed to the one a rebuild
        reads (:meth:`.joinstate.StateFiles.read`)."""
        files = StateFiles(Path(self.state_folder), self.retain)
        for part in self.routes.owners.tolist():
            files.commit(part, batch_id)

    def read(self, files: list) -> pa.Table:
        """The rows of the batch the step gets: the source's files, or the step before's parts' files."""
        if not files:
            return self.empty.empty_table()
        if self.index > 0:
            return pa.concat_tables([pq.read_table(readable(path)) for path, _ in files], promote_options="default")
        return read_batch(files, self.columns, self.arrival_column, self.id_column)


@dataclasses.dataclass(frozen=True)
class BatchCall:
    """One micro-batch as the driver sends it: its files, R's version, the slice's bounds, and
    each part's attempt of the batch before that the driver took (its token)."""

    batch_id: int
    files: list
    version: int
    master_read_at: float | None
    horizon: float
    until: float
    drain: bool
    tokens: dict


def _state_before(run: PartsRun, call: BatchCall, part: int, files: StateFiles):
    """The part's session and carried rows after the batch before: held by this worker in the
    attempt the driver took, or rebuilt from the part's newest state file before the batch (a
    fresh algorithm over the part's key range fed its rows; caches cold)."""
    held = _HELD.pop((run.name, run.index, part), None)
    token = call.tokens.get(part)
    if held is not None and token is not None and held[0] == token:
        return held[1], held[2], False
    step = run.step
    store = held[1].algorithm.store if held is not None else None
    if store is None:
        store = open_store(step.master.url, step.master.table, step.master.key, step.master_select).restrict(*run.routes.ranges[part])
    else:  # built anew: R's pages read anew too
        store.forget_page_maps()
    found = files.read(part, call.batch_id)
    rows = found[1] if found is not None and found[1].num_rows else None
    session = session_from(create(step.algorithm, store, run.memory, step.params), step.column, rows)
    return session, CarriedRows(rows, rows.nbytes if rows is not None else 0), True


def _write_parquet(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, lambda partial: pq.write_table(table, partial, use_dictionary=dictionary_columns(table.schema)))


def join_part(run: PartsRun, call: BatchCall, part: int, new: pa.Table) -> dict:
    """Part ``part``'s share ``new`` of the batch: joined with its state, its sinks written, then
    its state file, pending until the driver commits it; the session kept in this worker under a
    new token; its figures."""
    started, cpu = time.perf_counter(), time.process_time()
    step, files = run.step, StateFiles(Path(run.state_folder), run.retain)
    session, carried, rebuilt = _state_before(run, call, part, files)
    tagged = carried.add(new, due_times(new, step.max_queue_time_s), np.full(new.num_rows, part))
    with session.algorithm.store.reading_at(call.version, call.master_read_at):
        result, stats = slice_of(session, step.column, tagged, call.horizon, call.until, call.drain,
                                 max_pending=run.max_pending)
    matched, unmatched = carried.take(result, session.algorithm.schema)
    select = session.algorithm.store.select
    matched = renamed(step, select, matched)
    going_on = [matched]
    if step.on_missing == "unknown_member":
        members, unmatched = unknown_members(step, select, matched.schema, unmatched)
        going_on.append(members)
    passed, dead = went_on(step, run.index, going_on, unmatched)
    _write_parquet(passed, run.part_file(run.matched_path, call.batch_id, part))
    _write_parquet(dead, run.part_file(run.dead_path, call.batch_id, part))
    files.write_batches(part, call.batch_id, carried.rows.schema if carried.rows is not None else tagged.schema,
                        carried.live_batches(), pending=True)
    carried.spill(files.mapped(part, call.batch_id, pending=True))
    token = f"{call.batch_id}:{uuid.uuid4().hex}"  # this attempt's: the driver names it back if it takes these figures
    _HELD[(run.name, run.index, part)] = (token, session, carried)
    left = pa.concat_tables([passed.select(["sj_arrival"]), dead.select(["sj_arrival"])] if run.last else [dead.select(["sj_arrival"])])
    arrivals = left["sj_arrival"].to_numpy() if left.num_rows else np.zeros(0)
    return {
        "part": part, "token": token, "worker": worker_name(), "rebuilt": rebuilt, "slice": dataclasses.asdict(stats),
        "matched": len(np.unique(result.matched_ids)) + passed.num_rows - matched.num_rows,  # tuples going on
        "output_rows": passed.num_rows, "unmatched": dead.num_rows,
        "reasons": {entry["values"]: entry["counts"] for entry in dead["reason"].value_counts().to_pylist()},
        "arrivals": np.quantile(arrivals, np.linspace(0, 1, ARRIVAL_POINTS)).tolist() if len(arrivals) else [],
        "left": len(arrivals), "carried": carried.count, "queue_bytes": carried.nbytes + stats.log_bytes,
        "carried_file_bytes": carried.mapped_bytes, "task_s": time.perf_counter() - started,
        "cpu_s": time.process_time() - cpu,
    }


def serve_parts(run: PartsRun, call: BatchCall, build: bool, indices) -> list[str]:
    """A task: it reads the batch's files itself and joins the parts it is given - ``build``: the
    parts ``indices``, rebuilt here; otherwise every part whose attempt the driver took
    (``call.tokens``) this worker holds, wherever the scheduler put the task. Returns each
    part's figures (JSON).

    A worker that holds another attempt of a part - one whose figures never reached the driver
    (the part was then built again elsewhere), or the first attempt of a batch Spark replays -
    does not serve it: a (batch, part)'s sinks and state come from one attempt."""
    for name, index, part in list(_HELD):
        held = _HELD[(name, index, part)]
        if name != run.name:  # another driver's run (a restart): its parts are rebuilt from the files
            _HELD.pop((name, index, part))[1].algorithm.store.close()
        elif index == run.index and call.tokens.get(part) != held[0] and int(held[0].split(":")[0]) < call.batch_id:
            _HELD.pop((name, index, part))[1].algorithm.store.close()  # an attempt the driver did not take, of a batch it moved past
    wanted = list(indices) if build else sorted(p for (name, index, p), held in _HELD.items()
                                                if index == run.index and call.tokens.get(p) == held[0])
    if not wanted:
        return []
    read_started, read_cpu = time.perf_counter(), time.process_time()
    rows = run.read(call.files)
    parts = run.routes.parts_of(rows[run.step.column])
    read_s, read_cpu_s = time.perf_counter() - read_started, time.process_time() - read_cpu
    figures = []
    for part in wanted:
        new = rows.filter(pa.array(parts == part))
        figure = join_part(run, call, part, new)
        figures.append(json.dumps({**figure, "read_s": read_s, "cpu_s": figure["cpu_s"] + read_cpu_s / len(wanted),
                                   "task_s": figure["task_s"] + read_s}))
    return figures
