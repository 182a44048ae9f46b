"""Issue 52 through the real Spark path: a join running while another connection commits plain SQL
to R (its writes captured by triggers, ``change_capture: triggers``, on SQLite and MariaDB; or
from MariaDB's binary log, ``change_capture: binlog``, on a private server with it on), at
partitions 1 and 2, with every algorithm of the registry.

One job per (backend, partitions), its driver a plain process (as ``test_recovery``): a landing
folder of Parquet files -> one step per algorithm of :data:`ALGORITHMS`, each joining the
stream's ``nk`` with the same R and adding R's ``v`` under a name of its own (``rename``;
``on_missing: unknown_member``, so every tuple goes through every step) -> Parquet sinks. The
test writes a file, waits for the micro-batch that takes it, commits a transaction on its own
connection - INSERT inside, below and above R's key range; UPDATE of hot keys; DELETE; an UPDATE
that moves a key; a multi-row transaction; REPLACE - waits for the bound and writes the next file.
Every other file's tuples arrived long ago (the job's ``arrival_column``), so every step forces
them out in the micro-batch that takes them; the others may wait inside the steps across
micro-batches and commits.

The bound: a micro-batch reads R, at every step, as of every commit that ended before it started
- where the steps work ahead between micro-batches in the driver (partitions 1, ``work_ahead``),
before the micro-batch before it started: a step's slice reads the version its work-ahead read,
begun at the end of the batch before (:mod:`...spark.ahead`), so the first micro-batch that
starts after a commit may still read the old version there; the next one cannot. Each part
(partitions 2) reads the version the driver chose when the micro-batch called it.

What holds (:func:`check_batches`, :func:`check_tuples`):

* every version a step reads in a micro-batch (the record's ``master_versions``) is one a whole
  transaction left, no older than the bound allows and none newer than the commits begun before
  the micro-batch ended (tuples that left before a commit joined with the table before it);
* each value a tuple carries is R at the version its step read in the micro-batch the tuple left
  that step in: it leaves step i in batch b_i, the batch that took its file <= b_0 <= b_1 <= ...
  <= the batch of its sink row;
* a file written after a commit and its bound joins with the new table: its tuples that left
  before the next commit equal the hash join with the new table at every step (every tuple of
  the files forced out at once among them);
* exactly once: every input tuple is in the matched sink once (unknown members included), none
  in the dead letter;
* the driver is killed (SIGKILL, its whole process group) right after the DELETE's commit, once
  Spark has committed the micro-batch before it, with tuples inside the steps (at partitions 1
  worked ahead on the old version), and restarted on the same checkpoint: all of the above holds
  over both drivers' micro-batches.

Issue 54: a tuple whose key cannot be in R, fed to a rebuilt session - a part's rebuilding call
(every part's first) sends this batch's new tuples too; a restarted store holds string keys at
R's longest key's width now - leaves it unmatched instead of failing the micro-batch (the files
hold a null key: at partitions 2 a micro-batch failed where its part was rebuilt; and the two
tests at the end of this module).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflow_provider_semijoin.core.stores.binlog import server_position, wait_captured
from airflow_provider_semijoin.core.joins import ALGORITHMS, create
from airflow_provider_semijoin.core.progress import parse_line
from airflow_provider_semijoin.core.reasons import Unmatched, labels
from airflow_provider_semijoin.core.stores import DatabaseURL, open_store, store_for
from airflow_provider_semijoin.spark.joinstate import DUE, PART, SEQ, session_from, slice_of
from airflow_provider_semijoin.spark.partitioned import _PARTS, REASON_CODE, PartCall, PartInput, from_ipc, serve_part, to_ipc
from airflow_provider_semijoin.spark.sinks import read_parquet_batch
from airflow_provider_semijoin.job.spec import JobSpec, StepSpec
from spark_jobs import driver_summary, landing_job

KEYS = list(range(10, 410, 4))  # R's keys at the start: gaps for inserts between, below and above
HOT = [10, 14, 18, 22, 26, 34, 38]  # repeated in every file: the caches hold them when they change
EXTRA = [2, 11, 12, 43, 47, 999, 1001, 5000, None]  # inserted (below, inside, above R's range), moved to, never, null
NOT_IN_MASTER = Unmatched.NOT_IN_MASTER.label
UNKNOWN = -7  # the unknown member's v (no version of R has it)
# the longest a tuple waits inside a step (MESHJOIN's would wait for its cycle), by partitions: a
# tuple due within two batch gaps leaves now, and a batch (13 Spark jobs at partitions 2) takes
# seconds, tens of them on a loaded 2-core machine: well above two such gaps, so the carried file's
# tuples are still inside at the kill and some leave after the next commit, whatever the load
# (at 30 s, partitions 2 on two busy xdist workers once found none inside)
MAX_QUEUE_S = {1: 30.0, 2: 120.0}
WAIT_S = 240.0  # the longest a batch is waited for (a loaded 2-core machine)


def out_column(name: str) -> str:
    return "v_" + name.replace("-", "_")


# each step prunes R's history every second down to its readers' horizon (issue 68): the readers -
# every step's store, the parts', the killed driver's - keep what they and a replay read
PRUNE = {"every_s": 1.0, "keep_versions": 1}
SMALL = {"page_rows": 4, "partition_pages": 2}  # small pages: R of 100 rows is many, a tuple may wait inside


def job(tmp_path: Path, url: str, table: str, partitions: int, capture: str = "triggers") -> JobSpec:
    steps = [{"column": "nk", "master": {"url": url, "table": table, "key": "nk", "select": ["v"]}, "algorithm": name,
              "memory": "1M", "params": {p: v for p, v in SMALL.items() if p in ALGORITHMS[name].params},
              "on_missing": "unknown_member", "unknown_member": {out_column(name): UNKNOWN}, "rename": {"v": out_column(name)},
              "max_queue_time_s": MAX_QUEUE_S[partitions], "change_capture": capture,
              "prune_history": PRUNE} for name in ALGORITHMS]
    return landing_job(tmp_path, "tid BIGINT, nk BIGINT, arrived DOUBLE", steps, partitions, arrival_column="arrived")


# what another application commits, a transaction each, by what it does ({t}: R, {k}: its key)
TRANSACTIONS = {
    "insert inside, below and above R's range": ["INSERT INTO {t} ({k}, v) VALUES (12, 120000), (2, 20000), (999, 9990000)"],
    "update hot keys": ["UPDATE {t} SET v = v + 1 WHERE {k} IN (10, 14, 18, 22)"],
    "delete": ["DELETE FROM {t} WHERE {k} IN (26, 30, 2)"],
    "move a key": ["UPDATE {t} SET {k} = 1001 WHERE {k} = 34"],
    "multi-row": ["UPDATE {t} SET v = -1 WHERE {k} = 38", "DELETE FROM {t} WHERE {k} = 42",
                  "INSERT INTO {t} ({k}, v) VALUES (43, 430)", "UPDATE {t} SET v = -2 WHERE {k} = 38",
                  "UPDATE {t} SET v = v + 5 WHERE {k} IN (10, 14, 18)"],
    "replace": ["REPLACE INTO {t} ({k}, v) VALUES (46, 4646), (47, 4747), (10, 1010)"],
}
KILL_AFTER = "delete"  # the driver is killed right after this commit, a carried file's tuples inside


def transactions(backend, table: str) -> dict[str, list[str]]:
    t, k = backend.quote(table), backend.quote("nk")
    return {what: [sql.format(t=t, k=k) for sql in statements] for what, statements in TRANSACTIONS.items()}


class Writer:
    """Another connection to R's database, committing transactions; R after each (the test is
    R's only writer, so what it reads after its commit is R at the version the commit left)."""

    def __init__(self, backend, table: str):
        self.backend, self.table = backend, table
        self.connection = DatabaseURL.parse(backend.url).connect()
        self.store = store_for(self.connection, table, "nk")
        self.versions = {0: self.table_now()}  # version a commit left -> R then (key -> v)
        self.commits: list[tuple[float, float, int]] = []  # (began, ended, version it left)

    def table_now(self) -> dict:
        q = self.backend.quote
        cursor = self.connection.cursor()
        try:
            cursor.execute(f"SELECT {q('nk')}, {q('v')} FROM {q(self.table)}")
            return dict(cursor.fetchall())
        finally:
            cursor.close()

    def commit(self, statements: list[str]) -> int:
        began = time.time()
        cursor = self.connection.cursor()
        try:
            cursor.execute("BEGIN")
            for sql in statements:
                cursor.execute(sql)
            cursor.execute("COMMIT")
        finally:
            cursor.close()
        ended = time.time()
        version = self.version_now()
        assert version > max(self.versions), statements
        self.versions[version] = self.table_now()
        self.commits.append((began, ended, version))
        return version

    def version_now(self) -> int:
        """R's version after this writer's last commit (from the binary log: once captured)."""
        if not self.store.captured_from_binlog():
            return self.store.version()
        cursor = self.connection.cursor()
        try:
            at = server_position(cursor)
        finally:
            cursor.close()
        return wait_captured(self.connection, self.table, at.file, at.pos, WAIT_S)

    def close(self) -> None:
        self.connection.close()


class Batches:
    """The progress records of the job, as they come (a replayed batch's record replaces the
    first attempt's); waits on them."""

    def __init__(self):
        self.records: dict[int, dict] = {}
        self.changed = threading.Condition()
        self.ended = False  # the driver's output ended (it exited, or was killed)

    def end(self) -> None:
        with self.changed:
            self.ended = True
            self.changed.notify_all()

    def add(self, record: dict) -> None:
        with self.changed:
            self.records[record["batch_id"]] = record
            self.changed.notify_all()

    def wait(self, found, what: str) -> dict:
        """The first record (by batch id) for which ``found(record)`` holds, once there is one."""
        with self.changed:
            self.changed.wait_for(lambda: self._first(found) is not None or self.ended, WAIT_S)
            first = self._first(found)
            assert first is not None, f"no micro-batch {what}" + (" (the driver ended)" if self.ended else "")
            return first

    def _first(self, found):
        return next((r for _, r in sorted(self.records.items()) if found(r)), None)

    def started_after(self, moment: float, what: str) -> dict:
        """The first micro-batch that started after ``moment``."""
        return self.wait(lambda r: started(r) > moment, what)


class Landing:
    """The landing folder: each file whole (renamed into place), one per micro-batch. A file's
    tuples carry their arrival time (the job's ``arrival_column``): now, so they may wait inside
    the steps across batches and commits, or long past, so every step forces them out in the
    micro-batch that takes them (due: arrival + ``max_queue_time_s``)."""

    def __init__(self, folder: str):
        self.folder = Path(folder)
        self.files: list[tuple[str, pa.Table]] = []

    def write(self, carried: bool) -> pa.Table:
        keys = HOT * 10 + KEYS + EXTRA
        first = sum(t.num_rows for _, t in self.files)
        arrived = time.time() - (0 if carried else 3600)
        rows = pa.table({"tid": pa.array(range(first, first + len(keys)), pa.int64()), "nk": pa.array(keys, pa.int64()),
                         "arrived": pa.array([arrived] * len(keys), pa.float64())})
        name = f"f{len(self.files):03d}.parquet"
        pq.write_table(rows, self.folder / f"_{name}")  # (a name starting with _ is not read)
        os.replace(self.folder / f"_{name}", self.folder / name)
        self.files.append((name, rows))
        return rows


class Driver:
    """The job's driver as a plain process in a process group of its own (as ``test_recovery``);
    its progress lines go to ``batches`` as they come."""

    def __init__(self, spec_file: Path, batches: Batches):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "airflow_provider_semijoin.spark.driver", "--spec", str(spec_file), "--master", "local[2]"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable})
        self.lines: list[str] = []
        self.batches = batches
        self.reader = threading.Thread(target=self._read, args=(batches,), daemon=True)
        self.reader.start()

    def _read(self, batches: Batches) -> None:
        for line in self.process.stdout:
            self.lines.append(line)
            record = parse_line(line)
            if record is not None:
                batches.add(record)
        batches.end()

    def kill(self) -> None:
        """SIGKILL, the whole process group (the driver and its JVM)."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)
        self.reader.join(timeout=60)
        assert self.process.returncode == -signal.SIGKILL
        self.batches.ended = False

    def end(self, timeout: float) -> int:
        """Wait for the driver to exit; its exit code."""
        self.process.wait(timeout=timeout)
        self.reader.join(timeout=60)
        return self.process.returncode

    def close(self) -> None:
        """Never leave a driver (and its JVM) behind."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=60)


def lag(spec: JobSpec) -> int:
    """The bound, in micro-batches: 1 where steps work ahead between micro-batches in the driver
    (partitions 1, ``work_ahead``: a step's slice reads the version its work-ahead read, begun at
    the end of the batch before), else 0 (each part reads the version the driver chose when the
    batch called it)."""
    return int(spec.work_ahead and spec.partitions == 1)


def scenario(spec: JobSpec, landing: Landing, batches: Batches, writer: Writer, statements: dict[str, list[str]],
             after_commit) -> None:
    """A file, its micro-batch, a commit, the bound (where it is one micro-batch: one that
    started after the commit), the next file, ...; ``after_commit(what)`` runs right after the
    commit of ``what`` (the kill)."""
    batches.wait(lambda r: True, "ran")  # the query runs (a heartbeat's micro-batch)
    for j, what in enumerate([None, *statements]):
        if what is not None:
            writer.commit(statements[what])
            after_commit(what)
            if lag(spec):
                batches.started_after(writer.commits[-1][1], f"started after the commit of {what}")
        after = max(batches.records, default=-1)
        rows = landing.write(carried=j % 2 == 0)
        batches.wait(lambda r: r["batch_id"] > after and r["input_rows"] == rows.num_rows, f"took file {j}")


def started(record: dict) -> float:
    return record["time"] - record["batch_duration_s"]


def sink_rows(spec: JobSpec, records: dict) -> tuple[list[dict], list[dict]]:
    """The sinks' rows, each with the micro-batch that wrote it (``sj_batch``)."""
    matched, dead = [], []
    for rows, path in ((matched, spec.sinks.matched.path), (dead, spec.sinks.dead_letter.path)):
        for folder in Path(path).glob("batch=*"):
            batch_id = int(folder.name.split("=")[1])
            assert batch_id in records, folder
            rows += [{**row, "sj_batch": batch_id} for row in read_parquet_batch(folder).to_pylist()]
    return matched, dead


def file_batches(landing: Landing, records: dict) -> dict[str, int]:
    """The micro-batch that took each file (one a batch, in the order written)."""
    taking = [b for b, r in sorted(records.items()) if r["input_rows"]]
    assert [records[b]["input_rows"] for b in taking] == [rows.num_rows for _, rows in landing.files]
    return {name: b for (name, _), b in zip(landing.files, taking)}


def check_batches(records: dict, writer: Writer, lag: int) -> int:
    """Each micro-batch read, at every step, a version a whole transaction left: none newer than
    the commits begun before it ended, none older than those ended before it started (``lag``
    0) or before the batch before it started (``lag`` 1): the bound. How many batches read, at
    some step, a version older than a commit ended before they started."""
    assert sorted(records) == list(range(len(records)))  # every batch reported (a replay's record replaces the first)
    lagged = 0
    for b, r in records.items():
        read = r["master_versions"]
        assert len(read) == len(ALGORITHMS) and set(read) <= set(writer.versions), (b, read, sorted(writer.versions))
        assert max(read) <= max([0] + [v for began, _, v in writer.commits if began < r["time"]]), (b, read)
        if b >= lag:
            bound = [v for _, ended, v in writer.commits if ended < started(records[b - lag])]
            assert min(read) >= max(bound, default=0), (b, read, bound)
        lagged += min(read) < max([0] + [v for _, ended, v in writer.commits if ended < started(r)])
    return lagged


def check_tuples(spec: JobSpec, records: dict, writer: Writer, landing: Landing) -> dict:
    """Exactly once, and each value a tuple carries is R at the version its step read in the
    micro-batch it left that step in: b_0 <= b_1 <= ... <= its sink's batch, none before the
    batch that took its file. Tuples of a file written after commit j that left before commit
    j + 1 began equal the hash join with R after commit j at every step. What was seen."""
    matched, dead = sink_rows(spec, records)
    assert dead == [], dead[:3]  # unknown members go on: every tuple is in the matched sink
    ids = Counter(row["sj_id"] for row in matched)
    assert [i for i, n in ids.items() if n > 1] == []  # no tuple twice
    assert set(ids) == {f"{name}#{i}" for name, rows in landing.files for i in range(rows.num_rows)}  # none lost
    taken, versions = file_batches(landing, records), writer.versions
    names = [name for name, _ in landing.files]
    after = [0] + [v for _, _, v in writer.commits]  # the version file j was written after
    seen = Counter()
    for row in matched:
        name = row["sj_id"].split("#")[0]
        first, last, key = taken[name], row["sj_batch"], row["nk"]
        b = first
        for i, step in enumerate(ALGORITHMS):
            while b <= last and row[out_column(step)] != versions[records[b]["master_versions"][i]].get(key, UNKNOWN):
                b += 1
            assert b <= last, (row, step, [records[x]["master_versions"][i] for x in range(first, last + 1)])
        j = names.index(name)
        next_commit = writer.commits[j][0] if j < len(writer.commits) else float("inf")
        if records[last]["time"] < next_commit:
            expected = versions[after[j]].get(key, UNKNOWN)
            assert [row[out_column(s)] for s in ALGORITHMS] == [expected] * len(ALGORITHMS), (row, after[j])
            seen["oracle"] += 1
        else:
            seen["left_after_the_next_commit"] += 1
        seen["forced_at_once"] += row["arrived"] < records[first]["time"] - 600 and last == first
    return seen


def master() -> pa.Table:
    return pa.table({"nk": pa.array(KEYS, pa.int64()), "v": pa.array([10 * k for k in KEYS], pa.int64())})


# each capture (triggers on SQLite and MariaDB, MariaDB's binary log) at one part or two in the first
# tier, each at the other in the acceptance tier
FIRST_TIER = (("sqlite", 2), ("mysql", 1), ("binlog", 2))
CASES = [pytest.param(name, partitions, marks=[pytest.mark.mysql] * (name != "sqlite")
                      + [pytest.mark.acceptance] * ((name, partitions) not in FIRST_TIER), id=f"{name}-{partitions}")
         for name in ("sqlite", "mysql", "binlog") for partitions in (1, 2)]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend_name, partitions", CASES)
def test_every_algorithm_joins_each_commit_of_another_connection_from_the_bound_on(tmp_path, request, backend_name,
                                                                                   partitions):
    backend = request.getfixturevalue(f"{backend_name}_backend")  # binlog: MariaDB with its binary log on
    store = backend.make_master(master())
    spec = job(tmp_path, backend.url, store.table, partitions, "binlog" if backend_name == "binlog" else "triggers")
    spec_file = tmp_path / "job.json"
    spec_file.write_text(json.dumps(spec.to_dict()))
    writer, batches, landing = Writer(backend, store.table), Batches(), Landing(spec.source.path)
    drivers = [Driver(spec_file, batches)]
    inside = []

    def kill_and_restart(what: str) -> None:
        """Right after the commit, once Spark has committed the micro-batch before it (its state
        file is what the restart reads): SIGKILL, and a new driver on the same checkpoint."""
        if what == KILL_AFTER:
            last = max(batches.records)
            inside.append(batches.records[last]["queue_tuples"])
            committed = Path(spec.checkpoint) / "commits" / str(last)
            deadline = time.time() + WAIT_S
            while not committed.exists() and time.time() < deadline:  # a poll: Spark writes it once the batch returns
                time.sleep(0.01)
            drivers[-1].kill()
            assert committed.exists()
            drivers.append(Driver(spec_file, batches))

    try:
        scenario(spec, landing, batches, writer, transactions(backend, store.table), kill_and_restart)
        Path(spec.stop.stop_file).touch()
        code = drivers[-1].end(WAIT_S)
    finally:
        for driver in drivers:
            driver.close()
        writer.close()
    out = "".join(drivers[-1].lines)
    assert code == 0, out[-2000:]
    summary = driver_summary(out)
    assert (summary["drained"], summary["queue_tuples"]) == ("stop_file", 0)
    lagged = check_batches(batches.records, writer, lag(spec))
    seen = check_tuples(spec, batches.records, writer, landing)
    if backend_name != "binlog":  # (there the writer waits for the capture after each commit, and these
        # timings - a step working ahead across a commit, tuples inside at the kill - came out either way)
        assert (lagged > 0) == bool(lag(spec))  # at partitions 1 a step worked ahead across a commit: the bound is needed
        assert inside[0] > 0  # the kill found tuples inside the steps (worked on at the old version)
    forced = [rows.num_rows for name, rows in landing.files[1::2]]
    assert seen["forced_at_once"] == sum(forced)  # due at once: every step forced them out in their batch
    assert seen["oracle"] >= sum(forced) and seen["left_after_the_next_commit"] > 0


def test_a_carried_tuple_whose_key_r_deleted_leaves_unmatched_from_a_rebuilt_session(sqlite_backend):
    """Issue 54: a store opened anew - a restarted driver's step, a part rebuilt in another Spark
    worker - holds string keys at the width of R's longest key now. A tuple carried since R had a
    longer key, deleted meanwhile, cannot be in R any more: it leaves unmatched with the next
    slice, as a new tuple with that key would (the rebuild raised, and every restart from that
    checkpoint failed again)."""
    keys = [f"k{i:03d}" for i in range(40)] + ["zzzzzzzzzz"]  # the last key is R's longest
    store = sqlite_backend.make_master(pa.table({"nk": keys, "v": pa.array(range(len(keys)), pa.int64())}))
    carried = pa.table({"nk": ["zzzzzzzzzz", "k001"], SEQ: pa.array([0, 1], pa.int64()), DUE: [math.inf] * 2,
                        PART: pa.array([0, 0], pa.int32())})
    assert session_from(create("hybridjoin", store, 1 << 20), "nk", carried).pending == 2  # they entered
    sqlite_backend.execute(f"DELETE FROM {sqlite_backend.quote(store.table)} WHERE nk = 'zzzzzzzzzz'")
    sqlite_backend.connection.commit()
    with open_store(sqlite_backend.url, store.table, "nk", ["v"]) as reopened:
        session = session_from(create("hybridjoin", reopened, 1 << 20), "nk", carried)
        assert session.pending == 1
        out, stats = slice_of(session, "nk", carried.slice(0, 0), math.inf, 0.0, False)
    assert stats.balanced and (stats.left, stats.pending) == (2, 0)
    assert out.matched_ids.tolist() == [1] and out.master["v"].to_pylist() == [1]
    assert out.unmatched_ids.tolist() == [0] and labels(out.unmatched_reason).tolist() == [NOT_IN_MASTER]


def test_a_part_rebuilt_with_new_tuples_whose_key_cannot_be_in_r_lets_them_leave_unmatched(sqlite_backend):
    """Issue 54 at partitions N: a call that rebuilds a part (every part's first, one after the cut
    points moved, one on a worker that does not hold the part) sends it all its tuples, this
    batch's new ones among them; a null key among those raised 'carried tuples have keys that
    cannot be in R' and failed the micro-batch, at every replay."""
    store = sqlite_backend.make_master(master())
    step = StepSpec(column="nk", master={"url": sqlite_backend.url, "table": store.table, "key": "nk", "select": ["v"]},
                    master_static=True)
    rows = pa.table({SEQ: pa.array([0, 1], pa.int64()), "nk": pa.array([14, None], pa.int64()), DUE: [math.inf, math.inf]})
    call = PartCall(json.dumps(dataclasses.asdict(step)), 1 << 20, [(None, None)], 0, math.inf, 0.0, True, "call:0")
    _, out = serve_part(call, 0, PartInput("", "", to_ipc(rows)))  # token "": build the part from every tuple sent
    _PARTS.pop((call.step_json, 0))[1].algorithm.store.close()  # (what this process, as a worker, held)
    left = from_ipc(out)
    assert dict(zip(left[SEQ].to_pylist(), left[REASON_CODE].to_pylist())) == {0: None, 1: int(Unmatched.NULL_KEY)}
    assert left.filter(pc.is_null(left[REASON_CODE]))["v"].to_pylist() == [140]
