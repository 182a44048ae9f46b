"""``python -m airflow_provider_semijoin.bench.state_store``: where a part's queue lives between
micro-batches - Spark's own state store (``groupBy(part).transformWithStateInPandas`` on the
RocksDB provider) against the Python-worker tokens of :mod:`..spark.partitioned` (issue 54).

Both paths do the same work on the same stream: the project's Zipf generator
(:func:`..workloads.zipf.zipf_rows`, shape ``random`` so both key ranges get load) in
micro-batches of ``batch_rows`` tuples, each tuple in the part of its key range (2 parts: keys
below ``master_rows / 2``, and the rest). A part's queue holds (seq, key, batch arrived) of its tuples
inside; a batch appends its tuples and emits those the stand-in for the join "matches": a tuple
that arrived in batch ``b`` is matched in batch ``b + (seq + key) % life`` (``life`` 1: at once).
The queue then carries about ``batch_rows * (life - 1) / 2`` tuples in steady state, so
``life`` sets the size of the state each path keeps and moves (3: ~100k, 21: ~1M at 100k a batch).

* ``tws-list``: the queue as a ``ListState`` of (seq, key, arrived) rows: each batch reads the whole
  list (``get``) and writes back what stays (``put``: the API has no delete of one element).
* ``tws-value``: the queue as one ``ValueState`` row holding its three int64 arrays as bytes:
  one read and one write of the whole queue a batch.
* ``tokens``: the minimal equivalent of :mod:`..spark.partitioned`'s mechanism (not its serve
  path, which needs a step, a store and an algorithm): one RDD job a batch of one task per core
  (``sc.parallelize(requests).mapPartitions``), each request naming every part with its token and
  new tuples (zstd Arrow IPC), a task serving the parts its Python worker holds in module globals;
  a part no task served is sent whole from the driver's copy (a rebuild, counted); the driver
  keeps the carried tuples (less the emitted ones) and writes them each batch to an Arrow file,
  as the runner's checkpoint does, and writes the emitted tuples to Parquet.

The TWS paths read the batch's Parquet file as a file stream (one file a trigger, dropped when
the batch before has finished) and write the emitted tuples with Spark's Parquet sink; their
checkpoint holds the RocksDB state (``spark.sql.shuffle.partitions`` 2, the parts hashed to
different shuffle partitions: one state store each). Per path: the batch's seconds (TWS: the
trigger's ``triggerExecution``; tokens: the driver's wall time), CPU seconds of every process
(driver, JVM, Python workers: :func:`.partitions.cpu_seconds`) a tuple, the state operator's
metrics (``numRowsTotal``, ``memoryUsedBytes``, ``commitTimeMs``, RocksDB's own), the
checkpoint's bytes on disk, and the floor: the same path on batches of one tuple per part.
Medians over the batches after ``life + 1`` warm-up batches (the queue at its steady size).

Measured (100k tuples a batch, 3 batches after warm-up, local[2] on a shared 2-core machine; the
first of 2 runs, the second within 10% but the tokens' 1M row, 0.16 s, and floor, 0.16 s):

    path       carried  s/batch  CPU us/tuple  commit s (file sync)  checkpoint MB
    tws-list   100k       3.10      33.3        0.26 (0.17)             7.2
    tws-value  100k       1.12      10.5        0.40 (0.22)             5.4
    tokens     100k       0.17       2.4        -                       2.8 (the Arrow file)
    tws-list   1M        24.0      250          0.56 (0.38)           219
    tws-value  1M         1.44      14.6        0.35 (0.20)           185
    tokens     1M         0.26       2.2        -                      28
    floor (a tuple a part): tws-list 0.69 s, tws-value 0.78 s (commit 0.43 s), tokens 0.32 s

The state store costs as the queue grows because a batch rewrites it whole: RocksDB wrote 3.7 MB a
batch at 100k carried and 37 MB at 1M (ListState; ValueState 2.4 and 24 MB), and the ListState's
rows cross the state server one by one each way (``allUpdatesTimeMs`` 30 s, summed over the two
tasks). No store was loaded again from the checkpoint (``rocksdbNumLoadedFromDfs`` 0): the stores
stayed on their executor. ``handleInputRows`` is called once per grouping key per batch with
all its rows, so with the part as the key one call steps over the part's whole queue; but a
probe logging each ``init`` and call showed a new processor instance in every task, every batch,
and the two parts changing Python worker between batches, so an algorithm's warm structures
(caches, page maps) survive a batch only by being written into the state and read back. Chosen:
the tokens (:mod:`..spark.partitioned`): 5.5-8x less time a batch than the ValueState (18-150x
than the ListState), 4-7x less CPU a tuple, and 2.4-4x less at the floor.
"""

from __future__ import annotations

import argparse
import contextlib
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
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..spark.partitioned import from_ipc, to_ipc
from ..workloads.zipf import zipf_rows
from .partitions import cpu_seconds

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PATHS = ("tws-list", "tws-value", "tokens")
SEQ, KEY, ARRIVED, PART, BATCH = "seq", "key", "arrived", "part", "batch"
INPUT_DDL = "part INT, seq LONG, key LONG, batch LONG"
OUTPUT_DDL = "part INT, seq LONG, batch LONG"
PARTS = (1, 2)  # the lower and upper key range: labels Spark hashes to different shuffle partitions of 2 (0 and 1 do not)
# RocksDB's own metrics of a trigger (summed over the state stores): rocksdbNumLoadedFromDfs counts
# stores loaded again from the checkpoint (0: each store stayed open where it was, its executor's)
ROCKSDB_METRICS = ("rocksdbCommitFlushLatency", "rocksdbCommitCheckpointLatency", "rocksdbCommitFileSyncLatencyMs",
                   "rocksdbLoadLatencyMs", "rocksdbNumLoadedFromDfs", "rocksdbNumReplayChangelogFiles",
                   "rocksdbGetCount", "rocksdbPutCount", "rocksdbSstFileSize", "rocksdbBytesCopied",
                   "rocksdbTotalBytesWritten")


def batch_table(batch: int, batch_rows: int, master_rows: int, seed: int = 0) -> pa.Table:
    """Micro-batch ``batch`` of the stream: each tuple's part (its key range), seq, key, batch."""
    rows = zipf_rows(batch * batch_rows, (batch + 1) * batch_rows, master_rows, shape="random", seed=seed)
    key = rows["nk"].to_numpy()
    return pa.table({PART: pa.array(np.where(key >= master_rows // 2, PARTS[1], PARTS[0]).astype(np.int32)), SEQ: rows["tid"],
                     KEY: rows["nk"], BATCH: pa.array(np.full(len(key), batch, np.int64))})


def floor_table(batch: int, master_rows: int) -> pa.Table:
    """A floor batch: one tuple per part."""
    return pa.table({PART: pa.array(PARTS, pa.int32()), SEQ: pa.array([2 * batch, 2 * batch + 1], pa.int64()),
                     KEY: pa.array([0, master_rows - 1], pa.int64()), BATCH: pa.array([batch, batch], pa.int64())})


def step_queue(queue: tuple[np.ndarray, ...], seq: np.ndarray, key: np.ndarray, batch: int, life: int):
    """The stand-in for a join step over a part's whole queue (seq, key, batch arrived): append
    the new tuples, emit those matched - arrived ``+ (seq + key) % life`` is ``batch`` or before;
    returns (queue kept, seqs emitted)."""
    held = [np.concatenate([q, new]) for q, new in zip(queue, (seq, key, np.full(len(seq), batch, np.int64)))]
    matched = held[2] + (held[0] + held[1]) % life <= batch
    return tuple(a[~matched] for a in held), held[0][matched]


EMPTY_QUEUE = (np.zeros(0, np.int64),) * 3


def _new_rows(rows) -> tuple[np.ndarray, np.ndarray, int]:
    """A TWS call's input (pandas frames of one part) as seqs, keys and the batch number."""
    import pandas as pd

    frame = pd.concat(list(rows), ignore_index=True)
    return frame[SEQ].to_numpy(np.int64), frame[KEY].to_numpy(np.int64), int(frame[BATCH].max())


def _emitted_frame(part: int, seq: np.ndarray, batch: int):
    import pandas as pd

    return pd.DataFrame({PART: np.full(len(seq), part, np.int32), SEQ: seq, BATCH: np.full(len(seq), batch, np.int64)})


def processors(life: int):
    """The two TWS processors (classes made here: Spark pickles them to its Python workers)."""
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    class ListQueue(StatefulProcessor):
        """The queue as a ListState of (seq, key, arrived) rows, read whole and put back each call."""

        def init(self, handle) -> None:
            schema = StructType([StructField(n, LongType()) for n in (SEQ, KEY, ARRIVED)])
            self.queue = handle.getListState("queue", schema)

        def handleInputRows(self, key, rows, timerValues):
            seq, keys, batch = _new_rows(rows)
            held = np.array(list(self.queue.get()), np.int64).reshape(-1, 3) if self.queue.exists() else np.zeros((0, 3), np.int64)
            kept, emitted = step_queue(tuple(held.T), seq, keys, batch, life)
            if len(emitted) and not len(kept[0]):  # (put refuses an empty list)
                self.queue.clear()
            elif len(emitted):  # a tuple left: the list is written again whole (no delete of one element)
                self.queue.put(list(zip(*(a.tolist() for a in kept))))
            elif len(seq):  # nothing left: kept is the held tuples, then the new ones
                self.queue.appendList(list(zip(*(a[len(held):].tolist() for a in kept))))
            yield _emitted_frame(int(key[0]), emitted, batch)

        def close(self) -> None:
            pass

    class ValueQueue(StatefulProcessor):
        """The queue as one ValueState row: its three int64 arrays as bytes, read and written whole each call."""

        def init(self, handle) -> None:
            self.queue = handle.getValueState("queue", StructType([StructField("arrays", BinaryType())]))

        def handleInputRows(self, key, rows, timerValues):
            seq, keys, batch = _new_rows(rows)
            held = np.frombuffer(self.queue.get()[0], np.int64).reshape(3, -1) if self.queue.exists() else EMPTY_QUEUE
            kept, emitted = step_queue(tuple(held), seq, keys, batch, life)
            self.queue.update((np.stack(kept).tobytes(),))
            yield _emitted_frame(int(key[0]), emitted, batch)

        def close(self) -> None:
            pass

    return {"tws-list": ListQueue, "tws-value": ValueQueue}


def expected(batches, life: int) -> tuple[list[np.ndarray], list[int]]:
    """The oracle: what the stand-in emits in each batch over one queue for the whole stream (the
    parts' queues are its key ranges), and the tuples carried after each batch."""
    queue, emitted_seqs, carried = EMPTY_QUEUE, [], []
    for table in batches:
        queue, seqs = step_queue(queue, table[SEQ].to_numpy(), table[KEY].to_numpy(), int(table[BATCH][0].as_py()), life)
        emitted_seqs.append(seqs)
        carried.append(len(queue[0]))
    return emitted_seqs, carried


def _checkpoint_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _state_metrics(progress: dict) -> dict:
    """The state operator's metrics of one trigger (those this bench reports)."""
    (operator,) = progress["stateOperators"]
    custom = operator.get("customMetrics", {})
    return {"rows_total": operator["numRowsTotal"], "memory_bytes": operator["memoryUsedBytes"],
            "commit_s": operator["commitTimeMs"] / 1e3, "updates_s": operator["allUpdatesTimeMs"] / 1e3,
            **{name: custom[name] for name in ROCKSDB_METRICS if name in custom}}


def _next_progress(query, seen: set[int], timeout_s: float = 600.0) -> dict:
    """The first progress record of a trigger that read tuples and is not in ``seen``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(f"state-store bench: the query failed: {query.exception()}")
        progress = query.lastProgress
        if progress is not None and progress["numInputRows"] > 0 and progress["batchId"] not in seen:
            seen.add(progress["batchId"])
            return progress
        time.sleep(0.01)
    raise RuntimeError(f"state-store bench: no trigger finished within {timeout_s} s")


@contextlib.contextmanager
def _query_conf(spark, conf: dict):
    """``conf`` set while a query starts (it keeps a copy), the session's own values back after."""
    before = {name: spark.conf.get(name, None) for name in conf}
    for name, value in conf.items():
        spark.conf.set(name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                spark.conf.unset(name)
            else:
                spark.conf.set(name, value)


def run_tws(spark, path: str, batches, life: int, work: Path) -> list[dict]:
    """``batches`` (tables) through ``groupBy(part).transformWithStateInPandas`` on the RocksDB
    store, one file a trigger: a record a batch (seconds, CPU seconds, state metrics)."""
    source, staging, out, checkpoint = (work / name for name in ("source", "staging", "out", "checkpoint"))
    for folder in (source, staging):
        folder.mkdir(parents=True)
    stream = spark.readStream.schema(INPUT_DDL).option("maxFilesPerTrigger", 1).parquet(str(source))
    joined = stream.groupBy(PART).transformWithStateInPandas(
        statefulProcessor=processors(life)[path](), outputStructType=OUTPUT_DDL, outputMode="Append", timeMode="None")
    check_parts_spread(spark)
    with _query_conf(spark, {"spark.sql.shuffle.partitions": "2", "spark.sql.streaming.stateStore.providerClass": ROCKSDB}):
        query = (joined.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
                 .trigger(processingTime="0 seconds").start())
    records, seen = [], set()
    try:
        for index, table in enumerate(batches):
            name = f"batch-{index:06d}.parquet"
            pq.write_table(table, staging / name)
            cpu, wall = cpu_seconds(), time.perf_counter()
            os.rename(staging / name, source / name)
            progress = _next_progress(query, seen)
            records.append({"tuples": progress["numInputRows"], "seconds": progress["durationMs"]["triggerExecution"] / 1e3,
                            "wall_s": time.perf_counter() - wall, "cpu_s": cpu_seconds() - cpu,
                            "checkpoint_bytes": _checkpoint_bytes(checkpoint / "state"), **_state_metrics(progress)})
    finally:
        query.stop()
    return records


_HELD: dict[tuple[str, int], tuple[str, tuple]] = {}  # per Python worker: (run, part) -> (token, queue)


def serve(run: str, life: int, batch: int, requests):
    """A task: of each request ``{part: (token, new tuples, carried tuples or None)}``, the parts
    this worker holds under ``token`` (or builds from the carried tuples: token ""), each as
    (part, new token, emitted seqs). (Pickled by reference: the registry is this module's.)"""
    for request in requests:
        for part, (token, new_ipc, carried_ipc) in request.items():
            held = _HELD.get((run, part))
            if token and (held is None or held[0] != token):
                continue  # another worker holds it, or it went away: the driver sends it whole
            if token:
                queue = held[1]
            else:
                carried = from_ipc(carried_ipc)
                queue = tuple(carried[c].to_numpy() for c in (SEQ, KEY, ARRIVED))
            new = from_ipc(new_ipc)
            queue, emitted = step_queue(queue, new[SEQ].to_numpy(), new[KEY].to_numpy(), batch, life)
            fresh = uuid.uuid4().hex
            _HELD[(run, part)] = (fresh, queue)
            yield part, fresh, emitted.tobytes()


class TokenPath:
    """The driver of the ``tokens`` path: one RDD job a batch, a task per core, the carried
    tuples kept here (less the emitted ones) and written to an Arrow file each batch."""

    def __init__(self, spark, life: int, work: Path):
        self.spark, self.life, self.run = spark, life, uuid.uuid4().hex
        self.out, self.checkpoint = work / "out", work / "carried.arrow"
        self.out.mkdir(parents=True)
        self.tokens: dict[int, str] = {}
        self.carried = pa.table({PART: pa.array([], pa.int32()), SEQ: pa.array([], pa.int64()),
                                 KEY: pa.array([], pa.int64()), ARRIVED: pa.array([], pa.int64())})
        self.rebuilds = 0

    def _whole(self, part: int, new: pa.Table) -> tuple[str, bytes, bytes]:
        held = self.carried.filter(pc.equal(self.carried[PART], part)).select([SEQ, KEY, ARRIVED])
        return "", to_ipc(new), to_ipc(held)

    def step(self, batch: int, table: pa.Table) -> np.ndarray:
        """One batch: its emitted seqs (written to Parquet), the carried tuples checkpointed."""
        new = {p: table.filter(pc.equal(table[PART], p)).select([SEQ, KEY]) for p in PARTS}
        held = {p: (self.tokens[p], to_ipc(new[p]), None) for p in self.tokens}
        requests = [held] * self.spark.sparkContext.defaultParallelism if held else []
        requests += [{p: self._whole(p, new[p])} for p in PARTS if p not in self.tokens]
        wanted, emitted = set(PARTS), []
        for _ in range(10):
            rdd = self.spark.sparkContext.parallelize(requests, len(requests))
            for part, token, seqs in rdd.mapPartitions(functools.partial(serve, self.run, self.life, batch)).collect():
                if part not in wanted:
                    raise RuntimeError(f"state-store bench: part {part} was served twice in batch {batch}")
                wanted.discard(part)
                self.tokens[part] = token
                emitted.append(pa.table({PART: pa.array(np.full(len(seqs) // 8, part, np.int32)),
                                         SEQ: pa.array(np.frombuffer(seqs, np.int64))}))
            if not wanted:
                break
            self.rebuilds += len(wanted)
            requests = [{p: self._whole(p, new[p])} for p in sorted(wanted)]
        else:
            raise RuntimeError(f"state-store bench: parts {sorted(wanted)} lost 10 times in a row")
        out = pa.concat_tables(emitted)
        out = out.append_column(BATCH, pa.array(np.full(out.num_rows, batch, np.int64)))
        pq.write_table(out, self.out / f"batch-{batch:06d}.parquet")
        arrived = table.select([PART, SEQ, KEY]).append_column(ARRIVED, table[BATCH])
        carried = pa.concat_tables([self.carried, arrived])
        self.carried = carried.filter(pa.array(~np.isin(carried[SEQ].to_numpy(), out[SEQ].to_numpy())))
        with pa.OSFile(str(self.checkpoint) + ".tmp", "wb") as sink, pa.ipc.new_file(sink, self.carried.schema) as writer:
            writer.write_table(self.carried)
        os.replace(str(self.checkpoint) + ".tmp", self.checkpoint)
        return out[SEQ].to_numpy()


def run_tokens(spark, batches, life: int, work: Path) -> list[dict]:
    """``batches`` through :class:`TokenPath`: a record a batch (seconds, CPU seconds, carried tuples)."""
    driver, records = TokenPath(spark, life, work), []
    for index, table in enumerate(batches):
        cpu, wall, rebuilds = cpu_seconds(), time.perf_counter(), driver.rebuilds
        driver.step(index, table)
        seconds = time.perf_counter() - wall
        records.append({"tuples": table.num_rows, "seconds": seconds, "wall_s": seconds, "cpu_s": cpu_seconds() - cpu,
                        "rows_total": driver.carried.num_rows, "rebuilds": driver.rebuilds - rebuilds,
                        "checkpoint_bytes": driver.checkpoint.stat().st_size})
    return records


def emitted(out: Path) -> pa.Table:
    """What a run wrote to its Parquet output: part, seq, batch of every emitted tuple."""
    return pq.read_table(out, schema=pa.schema([(PART, pa.int32()), (SEQ, pa.int64()), (BATCH, pa.int64())]))


def check_parts_spread(spark) -> None:
    """The parts' labels land in different shuffle partitions of 2 (each its own state store and task)."""
    (spread,) = spark.sql(f"SELECT count(DISTINCT pmod(hash(p), 2)) FROM VALUES {', '.join(f'({p})' for p in PARTS)} AS t(p)").first()
    if spread != 2:  # both parts in one shuffle partition: one task, one state store, would serve both
        raise RuntimeError(f"state-store bench: parts {PARTS} hash to the same shuffle partition")


def run_path(spark, path: str, batches, life: int, work: Path) -> list[dict]:
    if path == "tokens":
        return run_tokens(spark, batches, life, work)
    return run_tws(spark, path, batches, life, work)


def _median(records: list[dict], name: str) -> float | None:
    values = [r[name] for r in records if name in r]
    return statistics.median(values) if values else None


def summary(path: str, life: int, records: list[dict], warmup: int, carried: int) -> dict:
    """Medians over the batches after ``warmup``; CPU a tuple over their sum."""
    steady = records[warmup:]
    tuples = sum(r["tuples"] for r in steady)
    return {"path": path, "life": life, "batches": len(steady), "seconds": _median(steady, "seconds"),
            "cpu_us_per_tuple": 1e6 * sum(r["cpu_s"] for r in steady) / tuples,
            "carried": carried, "state_rows": steady[-1]["rows_total"], "checkpoint_mb": steady[-1]["checkpoint_bytes"] / 1e6,
            "commit_s": _median(steady, "commit_s"), "updates_s": _median(steady, "updates_s"),
            "state_memory_mb": (_median(steady, "memory_bytes") or 0) / 1e6,
            "sync_s": (_median(steady, "rocksdbCommitFileSyncLatencyMs") or 0) / 1e3,
            "reloads": sum(r.get("rocksdbNumLoadedFromDfs", 0) for r in records),
            "rebuilds": sum(r.get("rebuilds", 0) for r in records), "records": records}


def floor_summary(path: str, records: list[dict], warmup: int) -> dict:
    steady = records[warmup:]
    return {"path": path, "floor_s": statistics.median(r["seconds"] for r in steady),
            "floor_cpu_s": statistics.median(r["cpu_s"] for r in steady), "commit_s": _median(steady, "commit_s")}


def measure(spark, paths, lives, batch_rows: int, master_rows: int, measured: int, floor_batches: int, work: Path) -> dict:
    """Every path at every ``life`` (``life + 1`` warm-up batches, then ``measured``), and its floor."""
    rows, floors = [], []
    for life in lives:
        warmup = life + 1
        batches = [batch_table(b, batch_rows, master_rows) for b in range(warmup + measured)]
        carried = expected(batches, life)[1]
        for path in paths:
            records = run_path(spark, path, batches, life, work / f"{path}-{life}")
            rows.append(summary(path, life, records, warmup, carried[-1]))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "records"}), file=sys.stderr, flush=True)
    for path in paths:
        records = run_path(spark, path, [floor_table(b, master_rows) for b in range(floor_batches)], 1, work / f"{path}-floor")
        floors.append(floor_summary(path, records, min(2, floor_batches - 1)))
    return {"batch_rows": batch_rows, "master_rows": master_rows, "rows": rows, "floors": floors}


def table_text(report: dict) -> str:
    lines = ["| path | life | carried | s/batch | CPU us/tuple | commit s (file sync) | updates s | state MB (mem) "
             "| checkpoint MB | reloads / rebuilds |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        commit = "-" if r["commit_s"] is None else f"{r['commit_s']:.3f} ({r['sync_s']:.3f})"
        updates = "-" if r["updates_s"] is None else f"{r['updates_s']:.3f}"
        lines.append(f"| {r['path']} | {r['life']} | {r['carried']:,} | {r['seconds']:.3f} | {r['cpu_us_per_tuple']:.2f} "
                     f"| {commit} | {updates} | {r['state_memory_mb']:.1f} | {r['checkpoint_mb']:.1f} "
                     f"| {r['reloads'] if r['path'] != 'tokens' else r['rebuilds']} |")
    lines += ["", "| path | floor s/batch | floor CPU s/batch | commit s |", "|---|---|---|---|"]
    for f in report["floors"]:
        commit = "-" if f["commit_s"] is None else f"{f['commit_s']:.3f}"
        lines.append(f"| {f['path']} | {f['floor_s']:.3f} | {f['floor_cpu_s']:.3f} | {commit} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_provider_semijoin.bench.state_store", description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-rows", type=int, default=100_000)
    parser.add_argument("--master-rows", type=int, default=1_000_000)
    parser.add_argument("--lives", default="3,21", help="comma-separated: batches a tuple stays at most (3: ~100k carried, 21: ~1M)")
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--batches", type=int, default=3, help="measured batches after the warm-up (life + 1)")
    parser.add_argument("--floor-batches", type=int, default=6)
    parser.add_argument("--out", type=Path, help="write the report (JSON, every batch's record) here")
    args = parser.parse_args(argv)
    paths = args.paths.split(",")
    unknown = sorted(set(paths) - set(PATHS))
    if unknown:
        parser.error(f"--paths: {unknown[0]!r} is not one of {list(PATHS)}")
    from ..spark.session import get_spark

    spark = get_spark("local[2]", app_name="semijoin-state-store")
    with tempfile.TemporaryDirectory(prefix="semijoin-state-store-") as work:
        report = measure(spark, paths, [int(v) for v in args.lives.split(",")], args.batch_rows, args.master_rows,
                         args.batches, args.floor_batches, Path(work))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    print(table_text(report))
    return 0


if __name__ == "__main__":  # run through the module's own name: serve's registry must be pickled by reference
    from airflow_provider_semijoin.bench.state_store import main as module_main

    sys.exit(module_main())
