"""The state a step carries across micro-batches, driven through the ``foreachBatch`` body
(:class:`BatchProcessor`) without Spark: a micro-batch is the generator's rows handed to
``process`` as Spark would collect them, a crash is a processor dropped without closing its
steps, a replay is the same batch id handed again - as Spark does after a restart when the
batch's commit is missing."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.core.errors import ConfigError
from airflow_provider_semijoin.core.joins.registry import planner
from airflow_provider_semijoin.core.session import sized_for_rows
from airflow_provider_semijoin.spark.ahead import KEEP_INSIDE
from airflow_provider_semijoin.job.spec import DeadlineSpec
from airflow_provider_semijoin.spark.joinstate import DEADLINE, StateFiles, with_deadlines
from airflow_provider_semijoin.spark.runner import BatchProcessor
from airflow_provider_semijoin.spark.sinks import read_parquet_sink
from airflow_provider_semijoin.workloads.stream import generator_rows

from spark_jobs import Clock, assert_sinks_equal_oracle, generator_job, write_master




def rows_of(spec, start: int, end: int, arrival: float) -> pa.Table:
    rows = generator_rows(spec.source.settings(), start, end)
    return rows.append_column("sj_arrival", pa.array(np.full(end - start, arrival)))


def job(tmp_path, backend, n: int, algorithm="meshjoin", **step):
    store = write_master(backend, 2000)
    params = {"page_rows": 16, "partition_pages": 4} if algorithm == "meshjoin" else {"page_rows": 16}
    if algorithm in ("hybridjoin", "cachejoin"):  # no riders while the stream goes on: a small batch stays inside
        params["rider_repeats"] = 0                # after its slice, one page per step, as the papers have it
    spec = generator_job(tmp_path, backend.url, store.table, algorithm=algorithm, total_rows=n, master_rows=2000,
                         params=params)
    spec.steps[0].max_queue_time_s = None
    for name, value in step.items():
        setattr(spec.steps[0], name, value)
    return store, spec


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(sizes=st.lists(st.integers(1, 400), min_size=3, max_size=12), crashes=st.sets(st.integers(0, 11), max_size=4),
       algorithm=st.sampled_from(["meshjoin", "hybridjoin", "ssij"]), data=st.data())
def test_crashes_and_replays_leave_every_tuple_once(tmp_path_factory, sqlite_backend, sizes, crashes, algorithm, data):
    """After each crash the batch is replayed (its state was not committed) or the next one
    comes (it was): the sinks end up equal to the oracle, and tuples were inside at the crashes."""
    tmp_path = tmp_path_factory.mktemp("carried")
    store, spec = job(tmp_path, sqlite_backend, sum(sizes), algorithm)
    clock = Clock()
    processor = BatchProcessor(spec, None, False, clock)
    start, inside = 0, []
    for batch_id, n in enumerate(sizes):
        batch = rows_of(spec, start, start + n, clock.now)
        if batch_id == len(sizes) - 1:
            processor.request_drain("end_of_input")
        processor.process(batch, batch_id)
        if batch_id in crashes and batch_id < len(sizes) - 1:
            inside.append(processor.steps[0].carried.count)
            processor.close()
            processor = BatchProcessor(spec, None, False, clock)  # the old one's memory is lost
            if data.draw(st.booleans(), label=f"replay {batch_id}"):
                processor.process(batch, batch_id)  # Spark had not committed it
        start += n
        clock.now += 1.0
    assert processor.drained == "end_of_input" and processor.steps[0].carried.count == 0
    assert_sinks_equal_oracle(store, spec)
    matched = read_parquet_sink(spec.sinks.matched.path)
    assert len(set(matched["sj_id"].to_pylist())) == matched.num_rows
    if algorithm == "meshjoin" and inside:
        assert max(inside) > 0  # MESHJOIN holds tuples for its cycle: they were carried over a crash


def test_a_quiet_stream_lets_no_tuple_wait_past_max_queue_time(tmp_path, sqlite_backend):
    """A few tuples, then only heartbeat micro-batches a second apart: MESHJOIN alone would wait
    for w tuples; each tuple leaves in a batch ending before its arrival + max_queue_time_s."""
    store, spec = job(tmp_path, sqlite_backend, 40, max_queue_time_s=4.0)
    spec.trigger_interval_s, spec.stop.end_of_input = 1.0, False
    clock = Clock()
    processor = BatchProcessor(spec, None, False, clock)
    left_at = {}
    for batch_id in range(12):
        batch = rows_of(spec, 0, 40, clock.now) if batch_id == 0 else rows_of(spec, 0, 0, clock.now)
        record = processor.process(batch, batch_id)
        for table in (read_parquet_sink(spec.sinks.matched.path), read_parquet_sink(spec.sinks.dead_letter.path)):
            for sj_id in (table["sj_id"].to_pylist() if table.num_rows else []):
                left_at.setdefault(sj_id, clock.now)
        if batch_id == 1:
            assert record["queue_tuples"] == 40  # not yet due, and too few for a MESHJOIN chunk
        clock.now += 1.0
    assert len(left_at) == 40 and max(left_at.values()) <= 1000.0 + 4.0 + 0.5
    assert processor.steps[0].carried.count == 0 and processor.drained is None  # no drain: forced out
    assert_sinks_equal_oracle(store, spec)


def test_retry_holds_a_missing_key_in_the_state_until_it_appears(tmp_path, sqlite_backend):
    """on_missing retry: a tuple whose key is not in R is held (in the checkpoint's state, so a
    restart keeps it) and joins once the key is inserted; past the grace it goes to the dead letter."""
    store, spec = job(tmp_path, sqlite_backend, 60, algorithm="hybridjoin", on_missing="retry", retry_grace_s=5.0)
    spec.stop.end_of_input = False
    clock = Clock()
    processor = BatchProcessor(spec, None, False, clock)
    processor.process(rows_of(spec, 0, 60, clock.now), 0)
    held = processor.steps[0].held
    assert held is not None and held.num_rows > 0
    state = StateFiles(spec.checkpoint + "/sj_state", 10).read(0, 1)[1]
    assert state.filter(pa.compute.is_null(state["sj_seq"])).num_rows == held.num_rows
    missing_key = held["nk"][0].as_py()
    sqlite_backend.execute(f"INSERT INTO \"{store.table}\" (nk, name, category) VALUES (?, 'late', 'late')", (missing_key,))
    clock.now += 1.0
    processor.close()
    processor = BatchProcessor(spec, None, False, clock)  # a restart: the held tuples come from the state
    processor.process(rows_of(spec, 0, 0, clock.now), 1)
    matched = read_parquet_sink(spec.sinks.matched.path)
    late = matched.filter(pa.compute.equal(matched["nk"], missing_key))
    assert late.num_rows >= 1 and set(late["name"].to_pylist()) == {"late"}
    clock.now += 10.0  # past the grace: the rest leave with their reason
    processor.request_drain("end_of_input")
    processor.process(rows_of(spec, 0, 0, clock.now), 2)
    dead = read_parquet_sink(spec.sinks.dead_letter.path)
    assert matched.num_rows + dead.num_rows == 60 and set(dead["reason"].to_pylist()) <= {"not_in_master", "null_key"}
    assert processor.steps[0].held is None


def test_a_stop_while_the_end_of_input_waits_for_the_grace_is_a_pause(tmp_path, sqlite_backend):
    """The end of input with tuples held for a retry: the batches drain but the job does not end
    while their grace runs; a stop asked then ends it at the next batch (a pause), the held
    tuples kept in the checkpoint's state for the next run."""
    _, spec = job(tmp_path, sqlite_backend, 60, algorithm="hybridjoin", on_missing="retry", retry_grace_s=5.0)
    clock = Clock()
    processor = BatchProcessor(spec, None, False, clock)
    record = processor.process(rows_of(spec, 0, 60, clock.now), 0)  # the generator's last row: the end of input
    held = processor.held_for_retry()
    assert record["drained"] == "end_of_input" and held > 0 and processor.drained is None
    clock.now += 1.0
    assert processor.process(rows_of(spec, 0, 0, clock.now), 1)["drained"] == "end_of_input"
    assert processor.drained is None and processor.held_for_retry() == held
    processor.request_drain("stop_requested")
    clock.now += 1.0
    assert processor.process(rows_of(spec, 0, 0, clock.now), 2)["drained"] == "stop_requested"
    assert processor.drained == "stop_requested" and processor.held_for_retry() == held
    state = StateFiles(spec.checkpoint + "/sj_state", 10).read(0, 3)[1]
    assert state.filter(pa.compute.is_null(state["sj_seq"])).num_rows == held
    processor.close()


def test_the_queue_counts_in_the_memory_figures_and_the_structures_stay_in_budget(tmp_path, sqlite_backend):
    """MESHJOIN holds tuples for its cycle: while they are carried the progress records count
    the bytes of their rows, and the algorithm's structures, the queue's keys included, never
    exceed the step's memory budget."""
    store, spec = job(tmp_path, sqlite_backend, 1200)
    processor = BatchProcessor(spec, None, False, Clock())
    records = [processor.process(rows_of(spec, start, start + 300, 1000.0), i) for i, start in enumerate(range(0, 1200, 300))]
    carried = [r for r in records if r["queue_tuples"]]
    assert carried and all(r["queue_bytes"] > 0 and r["memory_bytes"] > 0 for r in carried)
    assert records[-1]["drained"] == "end_of_input" and records[-1]["queue_bytes"] == 0
    assert 0 < max(r["structure_bytes_peak"] for r in records) <= spec.steps[0].memory_bytes
    assert_sinks_equal_oracle(store, spec)


@pytest.mark.parametrize("algorithm", ["meshjoin", "hybridjoin"])
def test_the_carried_rows_count_against_the_budget(tmp_path, sqlite_backend, algorithm):
    """A budget far too small for the rows of every tuple the algorithm could hold at the full
    budget: the step sizes the algorithm down to leave room for them, forces the oldest out
    when the rows would not fit, and the structures' peak plus the carried bytes stay within
    M in every batch; every tuple still leaves exactly once."""
    memory = 96 * 1024
    store, spec = job(tmp_path, sqlite_backend, 6000, algorithm=algorithm, memory=str(memory))
    processor = BatchProcessor(spec, None, False, Clock())
    step = processor.steps[0]
    whole = planner(algorithm, step.store, spec.steps[0].params).plan(memory)  # the structures alone
    records = [processor.process(rows_of(spec, start, start + 750, 1000.0), i) for i, start in enumerate(range(0, 6000, 750))]
    assert step.sized and step.algorithm_memory < memory
    assert whole.capacity_tuples > step.algorithm.capacity_tuples
    assert all(r["memory_budget_bytes"] == memory for r in records)
    assert all(0 < r["memory_peak_bytes"] <= memory for r in records), [r["memory_peak_bytes"] for r in records]
    assert any(r["queue_bytes"] for r in records)
    assert records[-1]["drained"] == "end_of_input" and records[-1]["queue_bytes"] == 0
    assert_sinks_equal_oracle(store, spec)


def test_a_budget_without_room_for_a_row_is_refused_in_one_sentence(tmp_path, sqlite_backend):
    store, spec = job(tmp_path, sqlite_backend, 100, algorithm="hybridjoin")
    processor = BatchProcessor(spec, None, False, Clock())
    with pytest.raises(ConfigError, match=r"^memory: \d+ bytes leaves no room for the rows of the tuples hybridjoin holds"):
        sized_for_rows(planner("hybridjoin", processor.steps[0].store, {"page_rows": 16}),
                       processor.steps[0].algorithm.memory, 10**9)


def test_a_part_rebuilt_from_rows_that_crossed_a_shuffle_takes_them_in_any_order(sqlite_backend):
    """A part's resent rows come out of ``repartition`` in any order (seen in partitions_bench as
    "row ids must increase from feed to feed" on a rebuild); the session takes them by sj_seq."""
    from airflow_provider_semijoin.core.joins import create
    from airflow_provider_semijoin.spark.joinstate import DUE, SEQ, session_from, slice_of

    keys = np.arange(1, 201)
    store = sqlite_backend.make_master(pa.table({"nk": keys, "name": [f"n{k}" for k in keys]}))
    rng = np.random.default_rng(5)

    def shuffled(first: int, n: int) -> pa.Table:
        order = rng.permutation(n)
        return pa.table({"nk": rng.integers(1, 260, n)[order], SEQ: np.arange(first, first + n)[order],
                         DUE: np.full(n, np.inf)})

    session = session_from(create("hybridjoin", store, 1 << 20, {"page_rows": 16}), "nk", shuffled(0, 300))
    assert session.pending == 300
    out, stats = slice_of(session, "nk", shuffled(300, 200), horizon=0.0, until=0.0, drain=True)
    left = np.concatenate([out.matched_ids, out.unmatched_ids])
    assert sorted(left.tolist()) == list(range(500)) and stats.balanced and session.pending == 0


def test_records_count_tuples_not_rows_when_r_has_several_rows_per_key(tmp_path, sqlite_backend):
    """A batch's ``matched`` counts stream tuples: on a unique key one row each (counted without
    looking at the ids), on a 1:K master each tuple once however many rows it joined."""
    from airflow_provider_semijoin.workloads.master import master_table

    from spark_jobs import SELECT

    base = master_table(2000)
    twice = pa.concat_tables([base, base.slice(0, 500)])  # the first 500 keys have two rows
    twice = twice.append_column("id", pa.array(np.arange(twice.num_rows)))
    for rows, primary_key in ((base, None), (twice, "id")):
        store = sqlite_backend.make_master(rows, select=SELECT, primary_key=primary_key)
        _, spec = job(tmp_path / store.table, sqlite_backend, 600, algorithm="hybridjoin")
        spec.steps[0].master.table = store.table
        processor = BatchProcessor(spec, None, False, Clock())
        record = processor.process(rows_of(spec, 0, 600, 1000.0), 0)  # the last batch of 600: a drain
        processor.close()
        matched = read_parquet_sink(spec.sinks.matched.path)
        assert record["matched"] == len(set(matched["sj_id"].to_pylist())) and record["output_rows"] == matched.num_rows
        assert record["matched"] + record["unmatched"] == 600
        assert (record["output_rows"] > record["matched"]) == (primary_key is not None)
        assert_sinks_equal_oracle(store, spec)


def carried_in_file(tmp_path, n: int):
    """``n`` carried rows written to a state file and mapped, as after a batch."""
    from airflow_provider_semijoin.spark.joinstate import CarriedRows

    carried = CarriedRows()
    carried.add(pa.table({"nk": np.arange(n, dtype=np.int64)}), np.full(n, np.inf), np.zeros(n, np.int32))
    files = StateFiles(tmp_path, retain=2)
    files.write_batches(0, 0, carried.rows.schema, carried.live_batches())
    carried.spill(files.mapped(0, 0))
    return carried


def test_a_tuple_that_left_is_not_counted_out_twice(tmp_path):
    """The count of carried tuples drops by the tuples that were still inside, so a join that
    emitted a tuple twice leaves the count off and the step's exactly-once check fails."""
    from airflow_provider_semijoin.core.joins.base import JoinOutput

    carried = carried_in_file(tmp_path, 10)
    schema = pa.schema([])
    leaving = JoinOutput(np.array([2, 5]), pa.table({}), np.array([7]), np.array([1], np.int8))
    matched, unmatched = carried.take(leaving, schema)
    assert (matched.num_rows, unmatched.num_rows, carried.count) == (2, 1, 7)
    carried.take(JoinOutput(np.array([5]), pa.table({}), np.array([], np.int64), np.array([], np.int8)), schema)
    assert carried.count == 7 and carried.carried()["nk"].to_pylist() == [0, 1, 3, 4, 6, 8, 9]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_rows_leave_by_their_sequence_numbers_however_sparse_the_numbers_left_inside(tmp_path, data):
    """Whatever has left before - a few numbers left inside far apart (looked up by binary
    search) or most of them (by a table from number to row) - and whether the rows are mapped
    from a state file or still in memory, ``take`` returns exactly the rows of the numbers asked
    for and keeps the others (each row's ``nk`` is its number here)."""
    from airflow_provider_semijoin.core.joins.base import JoinOutput
    from airflow_provider_semijoin.spark.joinstate import CarriedRows

    carried, files, expected = CarriedRows(), StateFiles(tmp_path / f"e{time.monotonic_ns()}", retain=2), []
    for batch in range(data.draw(st.integers(1, 5), label="batches")):
        n = data.draw(st.integers(0, 40), label="added")
        carried.add(pa.table({"nk": np.arange(carried.next_seq, carried.next_seq + n, dtype=np.int64)}),
                    np.full(n, np.inf), np.zeros(n, np.int32))
        expected += range(carried.next_seq - n, carried.next_seq)
        if expected and data.draw(st.booleans(), label="most leave"):  # a few far apart stay: the numbers thin out
            staying = set(data.draw(st.lists(st.sampled_from(expected), max_size=3), label="staying"))
            leaving = data.draw(st.permutations([seq for seq in expected if seq not in staying]), label="leaving")
        else:
            leaving = data.draw(st.lists(st.sampled_from(expected), unique=True), label="leaving") if expected else []
        cut = data.draw(st.integers(0, len(leaving)), label="matched")
        matched_ids, unmatched_ids = np.array(leaving[:cut], np.int64), np.array(leaving[cut:], np.int64)
        out = JoinOutput(matched_ids, pa.table({}), unmatched_ids, np.ones(len(unmatched_ids), np.int8))
        matched, unmatched = carried.take(out, pa.schema([]))
        assert matched["nk"].to_pylist() == matched_ids.tolist()
        assert unmatched["nk"].to_pylist() == unmatched_ids.tolist()
        expected = [seq for seq in expected if seq not in set(leaving)]
        inside = carried.carried()
        assert (inside["nk"].to_pylist() if inside is not None else []) == expected
        if expected and data.draw(st.booleans(), label="spill"):
            files.write_batches(0, batch, carried.rows.schema, carried.live_batches())
            carried.spill(files.mapped(0, batch))


def test_parts_assigned_anew_count_in_memory_not_in_the_file(tmp_path):
    """``repart`` replaces the mapped part column by one in memory: its bytes count, once, and the
    rows added since the file was mapped (in memory already) are not counted twice."""
    carried = carried_in_file(tmp_path, 1000)
    assert carried.nbytes == 0
    added = carried.add(pa.table({"nk": np.arange(1000, 1200, dtype=np.int64)}), np.full(200, np.inf),
                        np.zeros(200, np.int32))
    assert carried.nbytes == added.nbytes
    carried.repart(np.ones(1200, np.int32))
    assert carried.nbytes == added.nbytes + 4 * 1000 and carried.of_part(1).num_rows == 1200
    carried.repart(np.zeros(1200, np.int32))  # the cut points moved again within the batch
    assert carried.nbytes == added.nbytes + 4 * 1000 and carried.of_part(0).num_rows == 1200


def test_between_slices_the_log_holds_one_entry_per_waiting_tuple(sqlite_backend):
    """The budget counts LOG_BYTES_PER_TUPLE per carried tuple: a slice ends with the session's
    log compacted to the tuples still inside, however many left during it."""
    from airflow_provider_semijoin.core.joins import create
    from airflow_provider_semijoin.core.session import LOG_BYTES_PER_TUPLE
    from airflow_provider_semijoin.spark.joinstate import DUE, SEQ, session_from, slice_of

    keys = np.arange(1, 2001)
    store = sqlite_backend.make_master(pa.table({"nk": keys, "name": [f"n{k}" for k in keys]}))
    rng = np.random.default_rng(3)
    session = session_from(create("hybridjoin", store, 1 << 20, {"page_rows": 16}), "nk", None)
    first, left = 0, []
    for n in (400, 400, 400):
        rows = pa.table({"nk": rng.integers(1, 2001, n), SEQ: np.arange(first, first + n), DUE: np.full(n, np.inf)})
        first += n
        out, stats = slice_of(session, "nk", rows, horizon=0.0, until=0.0, drain=False)
        left.append(stats.left)
        assert session.pending > 0
        assert stats.log_bytes == session.log_bytes
        assert 17 * session.pending < session.log_bytes <= session.pending * LOG_BYTES_PER_TUPLE  # + the rank index
    assert left[0] == 0 < sum(left[1:])  # the pages read ahead in the first slice are joined in later ones


def wait_for(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.mark.parametrize("algorithm", ["hybridjoin", "cachejoin", "ssij", "meshjoin"])
def test_between_batches_the_join_works_ahead_and_its_output_leaves_with_the_next_batch(tmp_path, sqlite_backend,
                                                                                        algorithm):
    """Once a batch has cut its state, the step goes on joining on a thread (spark/ahead.py):
    what it completes leaves with the next batch - a heartbeat batch with no new tuple here -
    once, and the state written after that batch holds only what is still inside."""
    store, spec = job(tmp_path, sqlite_backend, 600, algorithm)
    spec.stop.end_of_input = False  # (the first batch holds every tuple: it would drain)
    clock = Clock()
    processor = BatchProcessor(spec, None, False, clock)
    step = processor.steps[0]
    processor.process(rows_of(spec, 0, 600, clock.now), 0)
    inside = step.carried.count
    assert inside > 0 and step.ahead.running
    wait_for(lambda: step.ahead.finished)
    still_inside = step.session.pending
    worked_ahead = inside - still_inside
    record = processor.process(rows_of(spec, 0, 0, clock.now), 1)
    if algorithm in ("hybridjoin", "cachejoin"):  # each step loads the page of the oldest tuple, until half left
        assert 0 < still_inside <= inside * KEEP_INSIDE  # the rest waits for the next batch
        assert record["ahead_bytes"] >= 8 * worked_ahead  # (an id each at least, and the master rows matched)
    else:  # SSIJ's phases and MESHJOIN's chunks wait for tuples of a stream that goes on (sec. IV-A, 3.1)
        assert worked_ahead == 0 and record["ahead_bytes"] == 0
    assert record["ahead_s"] > 0 and step.ahead.running == (step.carried.count > 0)  # again, from the new cut
    assert record["matched"] + record["unmatched"] >= worked_ahead
    assert record["queue_tuples"] == step.carried.count == inside - record["matched"] - record["unmatched"]
    assert StateFiles(tmp_path / "checkpoint" / "sj_state", 10).read(0, 2)[1].num_rows == step.carried.count
    processor.request_drain("end_of_input")
    processor.process(rows_of(spec, 0, 0, clock.now), 2)
    assert_sinks_equal_oracle(store, spec)
    matched = read_parquet_sink(spec.sinks.matched.path)
    assert len(set(matched["sj_id"].to_pylist())) == matched.num_rows


def test_without_work_ahead_the_join_rests_between_batches(tmp_path, sqlite_backend):
    store, spec = job(tmp_path, sqlite_backend, 600, "hybridjoin")
    spec.work_ahead, spec.stop.end_of_input = False, False
    processor = BatchProcessor(spec, None, False, Clock())
    processor.process(rows_of(spec, 0, 600, 1000.0), 0)
    inside = processor.steps[0].carried.count
    assert inside > 0 and not processor.steps[0].ahead.running and processor.steps[0].session.pending == inside


def test_a_spec_with_work_ahead_not_a_boolean_is_refused(tmp_path, sqlite_backend):
    from airflow_provider_semijoin.core.errors import SpecError
    from airflow_provider_semijoin.job.spec import JobSpec

    _, spec = job(tmp_path, sqlite_backend, 10)
    with pytest.raises(SpecError, match=r"^work_ahead: 'yes' is not true or false$"):
        JobSpec.from_dict({**spec.to_dict(), "work_ahead": "yes"})


def test_a_batch_after_working_ahead_reads_the_version_of_r_the_stepping_ahead_read(tmp_path, sqlite_backend):
    """An install that lands while the join works ahead between two batches is seen from the
    batch after next: every tuple leaving with the next batch - worked ahead or joined in its
    slice - saw the version the stepping ahead read (SSIJ sec. IV-E), the one its record names."""
    import pyarrow.compute as pc

    from airflow_provider_semijoin.core.stores import create_change_tables, install_changes
    from airflow_provider_semijoin.workloads.master import master_table

    store, spec = job(tmp_path, sqlite_backend, 3000, "hybridjoin")
    spec.stop.end_of_input = False
    create_change_tables(sqlite_backend.url, store.table, "nk")
    clock = Clock()
    processor = BatchProcessor(spec, None, False, clock)
    step = processor.steps[0]
    processor.process(rows_of(spec, 0, 600, clock.now), 0)
    wait_for(lambda: step.ahead.finished)
    renamed = master_table(2000)
    renamed = renamed.set_column(renamed.schema.get_field_index("name"), "name",
                                 pc.binary_join_element_wise("v1-", pc.cast(renamed["nk"], pa.string()), ""))
    install_changes(sqlite_backend.url, store.table, "nk", renamed.add_column(0, "op", pa.array(["U"] * 2000)))

    def matched(batch_id: int) -> pa.Table:
        return pq.read_table(tmp_path / "matched" / f"batch={batch_id}" / "part-0.parquet")

    second = processor.process(rows_of(spec, 600, 1200, clock.now), 1)
    assert second["master_versions"] == [0] and second["ahead_s"] > 0
    tids, names = matched(1)["tid"].to_numpy(), matched(1)["name"].to_pylist()
    assert (tids < 600).sum() > 0 and (tids >= 600).sum() > 0  # worked ahead, and joined in the slice
    assert not [n for n in names if n.startswith("v1-")]
    third = processor.process(rows_of(spec, 1200, 1800, clock.now), 2)
    assert third["master_versions"] == [1] and all(n.startswith("v1-") for n in matched(2)["name"].to_pylist())


def test_the_driver_switches_threads_sooner_while_steps_work_ahead_and_restores_it(tmp_path, sqlite_backend):
    """Spark's calls in the batch's thread wait for the GIL a working-ahead step holds at most
    AHEAD_SWITCH_S, only while a job that works ahead runs."""
    import sys

    from airflow_provider_semijoin.spark.runner import AHEAD_SWITCH_S

    before = 0.005  # Python's default (a processor another test did not close may have left it lower)
    sys.setswitchinterval(before)
    _, spec = job(tmp_path, sqlite_backend, 10)
    processor = BatchProcessor(spec, None, False, Clock())
    assert sys.getswitchinterval() == pytest.approx(AHEAD_SWITCH_S)
    processor.close()
    assert sys.getswitchinterval() == pytest.approx(before)
    spec.work_ahead = False
    processor = BatchProcessor(spec, None, False, Clock())
    assert sys.getswitchinterval() == pytest.approx(before)
    processor.close()


def test_a_deadline_rides_with_its_row_and_its_miss_is_counted_when_the_row_leaves(tmp_path, sqlite_backend):
    """A column deadline (SSIJ sec. IV-F) is taken once, when the tuple enters, and carried with
    its row - inside the join across batches, in the checkpoint's state - until the record counts
    the rows leaving after it, matched and dead letter alike (the misses an oracle counts from
    the sinks' rows and the record's time). Neither sink gets the carried column; the dead
    letter's row holds the stream's own columns, as before."""
    import json

    from airflow_provider_semijoin.job.spec import DeadlineSpec
    from airflow_provider_semijoin.spark.joinstate import DEADLINE
    from airflow_provider_semijoin.spark.sinks import read_parquet_batch

    store, spec = job(tmp_path, sqlite_backend, 1200)
    spec.deadline = DeadlineSpec(column="due_at")
    clock = Clock()

    def due(tids: np.ndarray) -> np.ndarray:  # odd ids: due at once (some passed already); even ids: after the next jump
        return np.where(tids % 2 == 1, 1000.0 + 0.002 * (tids % 13), 1000.5 + 0.3 * (tids % 4))

    processor = BatchProcessor(spec, None, False, clock)
    records = []
    try:
        for batch_id, start in enumerate(range(0, 1200, 300)):
            rows = rows_of(spec, start, start + 300, 1000.0)
            records.append(processor.process(rows.append_column("due_at", pa.array(due(rows["tid"].to_numpy()))), batch_id))
            if batch_id == 0:
                state = StateFiles(tmp_path / "checkpoint" / "sj_state", 10).read(0, 1)[1]
                assert state.num_rows > 0 and np.array_equal(state[DEADLINE].to_numpy(), due(state["tid"].to_numpy()))
            clock.now += 0.5
    finally:
        processor.close()
    expected = []
    for batch_id, record in enumerate(records):
        matched = read_parquet_batch(tmp_path / "matched" / f"batch={batch_id}")
        dead = read_parquet_batch(tmp_path / "dead" / f"batch={batch_id}")
        assert DEADLINE not in matched.column_names and DEADLINE not in dead.column_names
        assert all(set(json.loads(row)) == {"tid", "nk", "qty", "amount", "due_at"} for row in dead["row"].to_pylist())
        left = np.concatenate([matched["tid"].to_numpy(), np.array([int(i) for i in dead["sj_id"].to_pylist()], np.int64)])
        expected.append(int(np.sum(record["time"] > due(left))))
    assert [r["deadline_misses"] for r in records] == expected
    assert 0 < sum(expected[1:]) and sum(expected) < 1200  # carried rows missed theirs in later batches, not every row
    assert records[-1]["drained"] == "end_of_input"
    assert_sinks_equal_oracle(store, spec)


def test_a_deadline_column_in_nanoseconds_is_floored_to_its_microsecond():
    """Issue 66: a deadline column in timestamp[ns] (pandas' default) as epoch seconds, floored to
    the microsecond (:mod:`...core.micros`), where it died with ArrowInvalid ("would lose data")."""
    rows = pa.table({"sj_arrival": [0.0, 0.0], "due": pa.array([1_767_225_600_000_000_999, -1], pa.timestamp("ns"))})
    assert with_deadlines(rows, DeadlineSpec(column="due"))[DEADLINE].to_pylist() == [1_767_225_600.0, -1e-6]
