"""``bench.executor_parts``: issue 54's design with the join in (the rows shuffled by key range to a
task a part, each part joining and writing its own sinks and state), on local Spark and a SQLite R;
and its parts' task function outside Spark, where a worker that lost the part's state must
rebuild it from the state file of the batch before and leave exactly what a warm worker leaves."""

from __future__ import annotations

import dataclasses
import json
import sqlite3

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.bench import executor_parts
from airflow_provider_semijoin.bench.executor_parts import (PART_COLUMN, SLOT_COLUMN, PartRun, join_part, left_once, part_ranges,
                                                             parts_of_rows, route, run_parts, serve_parts)
from airflow_provider_semijoin.bench.partitions import batches, measure, stream_files
from airflow_provider_semijoin.job.spec import StepSpec
from airflow_provider_semijoin.workloads import generate_master

pytestmark = pytest.mark.acceptance  # a prototype's bench (the product's executors' path: tests/spark/test_executor_rows.py)


@pytest.fixture
def step(tmp_path):
    master = f"sqlite:///{tmp_path / 'r.db'}"
    generate_master(master, "r", 5_000, seed=0)
    return StepSpec(column="nk", master={"url": master, "table": "r", "key": "nk"}, algorithm="hybridjoin",
                    memory="64K", master_static=True)


def _stream(count: int = 5):
    # keys up to 6,000 over an R of 5,000: some tuples fall above R's range and leave unmatched
    return list(batches(rows=6_000, batch_rows=1_500, count=count, exponent=1.0, seed=1))


def test_rows_on_the_executors_in_every_form_leave_each_tuple_once_and_match_what_one_part_matches(spark, step, tmp_path):
    stream = _stream()
    files = stream_files(stream, tmp_path / "stream")
    measure(spark, step, 1, stream, 1, tmp_path / "one", files=files)
    one = left_once(stream, tmp_path / "one" / "p1-read")
    assert one["exactly_once"] and one["matched"]
    for parts, form, share in ((1, "shuffled", False), (2, "shuffled", False), (3, "shuffled", False), (2, "keyed", False),
                               (2, "shuffled", True), (3, "shuffled", True), (1, "direct", False), (2, "direct", False),
                               (3, "direct", False), (2, "direct", True), (3, "direct", True)):
        folder = tmp_path / f"p{parts}-{form}-{share}"
        run = run_parts(spark, step, parts, stream, files, 1, folder, form, share)
        assert (run["partitions"], run["batches"]) == (parts, 3)
        checked = left_once(stream, folder)
        assert checked["exactly_once"], (parts, form, share)
        assert checked["matched"] == one["matched"], (parts, form, share)
        assert len(list((folder / "matched" / "batch=1").glob("part-*.parquet"))) == parts


def _carried_after(run: PartRun, part: int, batch_id: int) -> int:
    return pa.ipc.open_file(str(run.state_path(part, batch_id))).read_all().num_rows


def _sent(batch: pa.Table, key_range: tuple, part: int):
    """The tuples of ``batch`` the shuffle sends ``part``, as its task receives them."""
    low, high = key_range
    keys = batch["nk"].to_numpy()
    mine = batch.filter(((keys >= low) if low is not None else True) & ((keys < high) if high is not None else True))
    return iter(mine.append_column(PART_COLUMN, pa.array([part] * mine.num_rows, pa.int32()))
                .append_column(SLOT_COLUMN, pa.array([0] * mine.num_rows, pa.int64())).to_batches())


def test_a_worker_without_the_parts_state_rebuilds_it_from_the_file_and_leaves_what_a_warm_one_leaves(step, tmp_path):
    stream = _stream(6)
    ranges, _, _ = part_ranges(step, 2, stream[0])
    assert all(r is not None for r in ranges)
    left = {}
    for name, forget in (("warm", set()), ("cold", {1, 3, 4})):
        run = PartRun(name, json.dumps(dataclasses.asdict(step)), ranges, step.memory_bytes // 2, str(tmp_path / name),
                      stream[0].schema)
        rebuilt, tokens = [], {}
        for batch_id, batch in enumerate(stream):
            if batch_id in forget:  # a task that lands on a worker that never held the part (or lost it)
                executor_parts._HELD.clear()
            for part in (0, 1):
                (figures,) = join_part(run, batch_id, batch_id == len(stream) - 1, tokens, _sent(batch, ranges[part], part),
                                       part=part)
                rebuilt.append(figures.column("rebuilt")[0].as_py())
                tokens[part] = figures.column("token")[0].as_py()
        left[name] = {sink: sorted(pq.read_table(tmp_path / name / sink, columns=["sj_id"])["sj_id"].to_pylist())
                      for sink in ("matched", "dead")}
        every = sorted(i for b in stream for i in b["sj_id"].to_pylist())
        assert sorted(left[name]["matched"] + left[name]["dead"]) == every, name
        assert _carried_after(run, 0, 2) + _carried_after(run, 1, 2) > 0  # tuples were carried across batches
        assert _carried_after(run, 0, 5) + _carried_after(run, 1, 5) == 0  # the last batch drained them
        executor_parts._HELD.clear()
        left[name]["rebuilt"] = sum(rebuilt)
    assert left["warm"]["rebuilt"] == 2  # the first batch builds each part
    assert left["cold"]["rebuilt"] == 2 + 2 * 3  # and each forgotten batch rebuilds both from the files
    assert left["cold"]["matched"] == left["warm"]["matched"] and left["cold"]["dead"] == left["warm"]["dead"]


@pytest.mark.parametrize("form", ["shuffled", "direct"])
def test_the_hottest_page_is_split_between_two_parts_that_both_read_it(spark, step, tmp_path, form):
    stream = _stream(4)
    files = stream_files(stream, tmp_path / "stream")
    ranges, cuts, shared = part_ranges(step, 2, stream[0], share_hot=True)
    low, high, owner, other = shared
    assert {owner, other} == {0, 1} and len(cuts) == 1
    run_parts(spark, step, 2, stream, files, 1, tmp_path / "shared", form, share_hot=True)
    for part in (0, 1):
        keys = pq.read_table(tmp_path / "shared" / "matched" / "batch=1" / f"part-{part}.parquet")["nk"].to_numpy()
        on_hot_page = (keys >= low if low is not None else keys == keys) & (keys < high)
        assert on_hot_page.sum() > 0.2 * len(keys), part  # each part joins a share of the hottest page's tuples


@pytest.mark.parametrize(("form", "share", "message"), [("broadcast", False, "form 'broadcast' is not one of"),
                                                         ("keyed", True, "a source keyed by range has no shared page")])
def test_a_form_not_measured_is_refused_before_any_work(step, tmp_path, form, share, message):
    with pytest.raises(ValueError, match=message):
        run_parts(None, step, 2, _stream(1), [], 1, tmp_path / "refused", form, share)
    assert not (tmp_path / "refused").exists()


def _direct(run: PartRun, files: list[str], cuts: list, tokens: dict, batch_id: int, build: bool, parts=()) -> list:
    """One task of the direct form in this process, as the worker whose parts ``_HELD`` holds now."""
    return serve_parts(run, batch_id, batch_id == len(files) - 1, [files[batch_id]], cuts, None, "nk", tokens, build, iter(parts))


def _taken(figures: list, tokens: dict) -> list:
    """The figures' parts and whether each was rebuilt; the driver takes their tokens."""
    tokens.update((f["part"], f["token"]) for f in figures)
    return [(f["part"], f["rebuilt"]) for f in figures]


def test_the_direct_form_serves_held_parts_builds_the_rest_and_a_replayed_batch_rebuilds_from_the_batch_before(step, tmp_path):
    stream = _stream(4)
    files = stream_files(stream, tmp_path / "stream")
    ranges, cuts, _ = part_ranges(step, 2, stream[0])
    left = {}
    for name, replay in (("once", False), ("replayed", True)):
        run = PartRun(name, json.dumps(dataclasses.asdict(step)), ranges, step.memory_bytes // 2, str(tmp_path / name),
                      stream[0].schema)
        executor_parts._HELD.clear()
        tokens = {}
        assert _direct(run, files, cuts, tokens, 0, build=False) == []  # this worker holds no part yet
        assert _taken(_direct(run, files, cuts, tokens, 0, build=True, parts=[0, 1]), tokens) == [(0, True), (1, True)]
        if replay:  # batch 1's first attempt, whose figures never reach the driver: Spark replays the batch
            assert [f["rebuilt"] for f in _direct(run, files, cuts, tokens, 1, build=False)] == [False, False]
            assert _direct(run, files, cuts, tokens, 1, build=False) == []  # the state held is that after batch 1
            assert _taken(_direct(run, files, cuts, tokens, 1, build=True, parts=[1, 0]), tokens) == [(1, True), (0, True)]
        else:
            assert _taken(_direct(run, files, cuts, tokens, 1, build=False), tokens) == [(0, False), (1, False)]
        for batch_id in (2, 3):
            assert _taken(_direct(run, files, cuts, tokens, batch_id, build=False), tokens) == [(0, False), (1, False)]
        checked = left_once(stream, tmp_path / name)
        assert checked["exactly_once"], name
        left[name] = checked["matched"]
        assert _carried_after(run, 0, 1) + _carried_after(run, 1, 1) > 0  # tuples were carried across batch 1
    executor_parts._HELD.clear()
    assert left["replayed"] == left["once"] and left["once"]


def test_a_worker_holding_an_attempt_the_driver_did_not_take_does_not_serve_it(step, tmp_path, monkeypatch):
    stream = _stream(4)
    files = stream_files(stream, tmp_path / "stream")
    ranges, cuts, _ = part_ranges(step, 2, stream[0])
    run = PartRun("two-workers", json.dumps(dataclasses.asdict(step)), ranges, step.memory_bytes // 2, str(tmp_path / "out"),
                  stream[0].schema)
    workers, tokens = {"x": {}, "y": {}}, {}

    def on(worker: str, batch_id: int, build: bool, parts=()) -> list:
        monkeypatch.setattr(executor_parts, "_HELD", workers[worker])  # the module globals of that worker's process
        return _direct(run, files, cuts, tokens, batch_id, build, parts)

    assert _taken(on("x", 0, build=True, parts=[0, 1]), tokens) == [(0, True), (1, True)]
    first = on("x", 1, build=False)  # x joins both parts of batch 1, but part 1's figures are lost (its task failed)
    assert [f["part"] for f in first] == [0, 1]
    _taken(first[:1], tokens)
    assert on("y", 1, build=False) == []
    assert _taken(on("y", 1, build=True, parts=[1]), tokens) == [(1, True)]  # built again on y from batch 0's files
    # x still holds part 1 after batch 1, in the attempt whose sinks y replaced: only y serves it, and x drops it
    assert _taken(on("x", 2, build=False), tokens) == [(0, False)]
    assert sorted(p for _, p in workers["x"]) == [0]
    assert _taken(on("y", 2, build=False), tokens) == [(1, False)]
    assert _taken(on("x", 3, build=False), tokens) == [(0, False)]
    assert _taken(on("y", 3, build=False), tokens) == [(1, False)]
    checked = left_once(stream, tmp_path / "out")
    assert checked["exactly_once"]


def test_a_task_that_read_the_batch_routes_each_key_to_the_part_spark_routes_it_to(spark, step):
    stream = _stream(1)
    _, cuts, _ = part_ranges(step, 3, stream[0])
    keys = sorted({k + d for k in cuts for d in (-1, 0, 1)} | {-5, 0, 10**9})  # each side of each cut, below and above R
    table = pa.table({"nk": pa.array(keys, pa.int64()), "sj_id": pa.array([str(k) for k in keys])})
    part, _ = route(cuts, [0, 1, 2], "nk", None)
    by_spark = {r["nk"]: r["part"] for r in spark.createDataFrame(table.to_pandas()).select("nk", part.alias("part")).collect()}
    by_task = dict(zip(keys, parts_of_rows(table, "nk", cuts, None).tolist()))
    assert by_task == by_spark
    assert set(by_task.values()) == {0, 1, 2}


ALGORITHMS = ("hybridjoin", "cachejoin", "meshjoin", "ssij", "inlj")


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_the_direct_forms_protocol_leaves_each_tuple_once_however_tasks_land_fail_or_replay(step, tmp_path_factory, data):
    """The direct form's driver and tasks in this process over any placement of the tasks on three
    workers, figures lost on the way back (a failed task: its part built again elsewhere) and a new
    driver replaying a batch with nothing taken (every part built from the batch before): every
    tuple leaves once, and the matched ones are those whose key is in R."""
    algorithm = data.draw(st.sampled_from(ALGORITHMS), "algorithm")
    parts = data.draw(st.integers(1, 3), "parts")
    step = dataclasses.replace(step, algorithm=algorithm, memory="512K")  # (MESHJOIN needs 110K a part)
    stream = _stream(4)
    folder = tmp_path_factory.mktemp("direct")
    files = stream_files(stream, folder / "stream")
    ranges, cuts, _ = part_ranges(step, parts, stream[0])
    run = PartRun(folder.name, json.dumps(dataclasses.asdict(step)), ranges, step.memory_bytes // parts, str(folder / "out"),
                  stream[0].schema)
    workers, tokens = {w: {} for w in "xyz"}, {}
    replays = data.draw(st.sets(st.integers(0, 3), max_size=2), "batches replayed by a new driver")

    def on(worker: str, batch_id: int, build: bool, wanted=()) -> list:
        executor_parts._HELD = workers[worker]  # the module globals of that worker's process
        return _direct(run, files, cuts, tokens, batch_id, build, wanted)

    try:
        batch_id = 0
        while batch_id < len(stream):
            landed = data.draw(st.lists(st.sampled_from("xyz"), min_size=1, max_size=3), f"batch {batch_id}: tasks land on")
            figures = [f for w in landed for f in on(w, batch_id, build=False)]
            lost = data.draw(st.sets(st.sampled_from(range(len(figures))), max_size=len(figures)) if figures else st.just(set()),
                             f"batch {batch_id}: figures lost")
            taken = [f for i, f in enumerate(figures) if i not in lost]
            for part in sorted(set(range(parts)) - {f["part"] for f in taken}):
                taken += on(data.draw(st.sampled_from("xyz"), f"batch {batch_id}: part {part} built on"), batch_id, True, [part])
            assert sorted(f["part"] for f in taken) == list(range(parts))
            if batch_id in replays:  # the driver is lost before it commits: a new one knows no token and replays
                replays.discard(batch_id)
                tokens.clear()
                continue
            tokens.update((f["part"], f["token"]) for f in taken)
            batch_id += 1
    finally:
        executor_parts._HELD = {}
    checked = left_once(stream, folder / "out")
    assert checked["exactly_once"]
    with sqlite3.connect(step.master.url.removeprefix("sqlite:///")) as connection:
        in_r = {row[0] for row in connection.execute("SELECT nk FROM r")}
    expected = sorted(i for b in stream for i, k in zip(b["sj_id"].to_pylist(), b["nk"].to_pylist()) if k in in_r)
    assert checked["matched"] == expected
