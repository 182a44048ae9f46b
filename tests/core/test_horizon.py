"""R's history kept within a horizon (issue 68, :mod:`airflow_provider_semijoin.core.stores.horizon`),
on SQLite and MariaDB, captured by triggers and from the binary log: readers note the version
they need, a pruner deletes what is below the lowest live reader (and R's newest versions less
``keep_versions``), a store pruned past reads R anew - every algorithm of the registry then joins
as a hash join of R now - and a read pinned at a pruned version fails in one sentence."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

from airflow_provider_semijoin.cli import main
from airflow_provider_semijoin.core.errors import StoreError
from airflow_provider_semijoin.core.joins import ALGORITHMS, create
from airflow_provider_semijoin.core.stores import open_store
from airflow_provider_semijoin.core.stores.binlog import BinlogCapture, BinlogFollower
from airflow_provider_semijoin.core.stores.capture import enable_capture
from airflow_provider_semijoin.core.stores.horizon import (READER_TTL_S, HistoryPruned, history_rows, horizon_of, log_span, note_reader,
                                                           prune_history, readers_of)
from airflow_provider_semijoin.core.stores.pruner import HistoryPruner, start_pruner
from airflow_provider_semijoin.core.stores.sql import side_tables
from airflow_provider_semijoin.core.stores.versioned import BelowHorizon
from airflow_provider_semijoin.core.stores.versions import before_table
from test_capture import commit, joined, master, oracle, params_for, stream_for, table_now, writer

LATER = 2 * READER_TTL_S  # seconds: every note taken now is stale by then


def updates(backend, table: str, n: int) -> None:
    """``n`` transactions of plain SQL from another connection: n versions of R."""
    q = backend.quote
    with writer(backend) as other:
        for i in range(n):
            commit(other, f"UPDATE {q(table)} SET {q('v')} = {q('v')} + 1 WHERE {q('nk')} = {10 + 4 * (i % 7)}")


def test_the_horizon_is_the_lowest_live_reader_and_the_pruner_keeps_what_it_needs(backend):
    store = backend.make_master(master(), select=["v"])
    enable_capture(store)
    table, now = store.table, time.time()
    updates(backend, table, 40)
    note_reader(backend.connection, table, "live", 12, now)
    note_reader(backend.connection, table, "stopped-a-week-ago", 3, now - 7 * 86400)
    h = horizon_of(backend.connection, table, now, keep_versions=5)
    assert (h.version, h.oldest, h.newest) == (13, 1, 40)  # the live reader at 12 needs 13 on; the stale one nothing
    assert [r.reader for r in h.live] == ["live"] and [r.reader for r in h.stale] == ["stopped-a-week-ago"]
    pruned = prune_history(backend.connection, table, now, keep_versions=5, batch_rows=4)
    assert pruned.done and pruned.rows == {side_tables(table)[0]: 12, before_table(table): 12}
    assert pruned.transactions == 3 + 3 + 1  # 4 rows of a table a transaction, the log first, one finding none
    assert log_span(backend.connection, table) == (13, 40)
    assert [r.reader for r in readers_of(backend.connection, table)] == ["live"]  # the stale note went too
    # the reader gone: R's newest versions less keep_versions stay
    pruned = prune_history(backend.connection, table, now + LATER, keep_versions=5)
    assert pruned.horizon.version == 36 and log_span(backend.connection, table) == (36, 40)
    assert history_rows(backend.connection, table) == {side_tables(table)[0]: 5, before_table(table): 5}
    with writer(backend) as other:  # the triggers number on from R's newest version
        commit(other, f"DELETE FROM {backend.quote(table)} WHERE {backend.quote('nk')} = 50")
    assert store.version() == 41


def test_a_prune_stops_at_max_transactions_and_goes_on_from_there(backend):
    store = backend.make_master(master(), select=["v"])
    enable_capture(store)
    updates(backend, store.table, 20)
    first = prune_history(backend.connection, store.table, time.time(), keep_versions=1, batch_rows=3, max_transactions=2)
    assert not first.done and log_span(backend.connection, store.table) == (7, 20)
    rest = prune_history(backend.connection, store.table, time.time(), keep_versions=1, batch_rows=3)
    assert rest.done and log_span(backend.connection, store.table) == (20, 20)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_every_algorithm_pruned_past_reads_r_anew_and_joins_as_r_now(backend, name, caplog):
    """A join warm on R at version 0 (its caches, page maps, queues), stopped for longer than the
    reader TTL while R changed; the history it needs is pruned: its next batch drops what it
    cached, says so in one log line, and joins as a hash join of R now."""
    store = backend.make_master(master(), select=["v"])
    enable_capture(store)
    algorithm = create(name, store, 1 << 20, params_for(name))
    stream = stream_for(list(range(10, 410, 4)))
    assert joined(algorithm, stream) == oracle(stream, table_now(backend, store.table))  # warm; noted at version 0
    assert [r.version for r in readers_of(backend.connection, store.table)] == [0]
    updates(backend, store.table, 30)
    pruned = prune_history(backend.connection, store.table, time.time() + LATER, keep_versions=5)
    assert pruned.horizon.version == 26 and not readers_of(backend.connection, store.table)
    with caplog.at_level(logging.WARNING):
        assert joined(algorithm, stream) == oracle(stream, table_now(backend, store.table))
    said = [r.getMessage() for r in caplog.records if "pruned past" in r.getMessage()]
    assert said == [f"{store.table}: R's history was pruned past version 0, which this reader's caches reflect "
                    f"(kept from version 25 on); reading R anew at version 30"]
    assert store.seen_version == 30


def test_a_store_below_the_horizon_says_so_once_then_reads_on(backend):
    store = backend.make_master(master(), select=["v"])
    enable_capture(store)
    updates(backend, store.table, 10)
    prune_history(backend.connection, store.table, time.time() + LATER, keep_versions=2)
    with pytest.raises(BelowHorizon, match=rf"the history of '{store.table}' was pruned past version 0, which this "
                                           r"reader's caches reflect; R is read anew at version 10"):
        with store.snapshot():
            pass
    with store.snapshot() as changed:
        assert len(changed) == 0 and store.seen_version == 10


def test_a_read_pinned_at_a_pruned_version_fails_in_one_sentence(backend):
    """A replayed micro-batch reads the version its first attempt read; pruned, it cannot."""
    store = backend.make_master(master(), select=["v"])
    enable_capture(store)
    updates(backend, store.table, 10)
    with store.snapshot():
        pass
    prune_history(backend.connection, store.table, time.time() + LATER, keep_versions=2)
    with store.reading_at(4):
        with pytest.raises(StoreError, match=rf"version: the history of '{store.table}' is kept from version 8 on; "
                                             r"version 4, which this read is pinned at \(a replayed micro-batch\), was "
                                             r"pruned \(`semijoin changes status` shows the horizon\)"):
            with store.snapshot():
                pass
    with store.reading_at(8), store.snapshot():  # the oldest kept is still read
        assert store.seen_version == 8


def test_a_live_reader_keeps_its_versions_through_a_prune(backend):
    """Noted before the prune (at its snapshot), the store is never pruned past: its next batch
    gets the keys changed since, from the log (no read anew)."""
    store = backend.make_master(master(), select=["v"])
    enable_capture(store)
    with store.snapshot():
        pass
    updates(backend, store.table, 10)
    pruned = prune_history(backend.connection, store.table, time.time(), keep_versions=1)
    assert pruned.horizon.version == 1 and sum(pruned.rows.values()) == 0
    with store.snapshot() as changed:
        assert sorted(changed.tolist()) == [10 + 4 * i for i in range(7)]


@pytest.mark.mysql
def test_the_binary_logs_capture_prunes_its_positions_too_and_captures_on(binlog_backend):
    table = binlog_backend.make_master(master()).table
    BinlogCapture(binlog_backend.url, table, "nk").enable()
    follower = BinlogFollower(binlog_backend.url, table, "nk").start()
    try:
        with open_store(binlog_backend.url, table, "nk", ["v"]) as store:
            updates(binlog_backend, table, 12)
            with store.snapshot():
                assert store.seen_version == 12
            pruned = prune_history(binlog_backend.connection, table, time.time() + LATER, keep_versions=3)
            log, before, positions = side_tables(table)[0], before_table(table), f"{table}__sj_binlog"
            assert pruned.horizon.version == 10  # versions 1..9 go, and the position the capture began at (0)
            assert pruned.rows == {log: 9, before: 9, positions: 10}
            updates(binlog_backend, table, 1)
            with store.snapshot() as changed:
                assert store.seen_version == 13 and changed.tolist() == [10]
    finally:
        follower.stop()


def test_changes_status_and_prune_on_the_command_line(sqlite_backend, capsys):
    store = sqlite_backend.make_master(master(), select=["v"])
    enable_capture(store)
    updates(sqlite_backend, store.table, 120)
    args = ["--master", sqlite_backend.url, "--table", store.table, "--key", "nk"]
    assert main(["changes", "status", *args]) == 0
    out = capsys.readouterr().out
    assert f"history  versions 1..120 ({store.table}__sj_changes 120, {store.table}__sj_before 120 rows)" in out
    assert "readers  0 seen within 3600 s; 0 not seen since (no longer counted)" in out
    assert "horizon  version 21: 20 versions below it may be pruned (`semijoin changes prune`)" in out
    assert main(["changes", "prune", *args, "--batch-rows", "8"]) == 0
    assert (f"pruned {store.table}'s history below version 21 in 7 transactions ({store.table}__sj_changes 20, "
            f"{store.table}__sj_before 20 rows deleted)") in capsys.readouterr().out
    assert main(["changes", "prune", *args, "--keep-versions", "0"]) == 2
    assert "semijoin: error: --keep-versions: 0 is not a positive whole number" in capsys.readouterr().err


def test_changes_asked_for_below_the_horizon_fail_in_one_sentence(backend):
    store = backend.make_master(master(), select=["v"])
    enable_capture(store)
    updates(backend, store.table, 10)
    assert store.changes_since(3)[1].tolist() == [10, 14, 18, 22, 26, 30, 34]
    prune_history(backend.connection, store.table, time.time() + LATER, keep_versions=2)
    with pytest.raises(HistoryPruned, match=rf"changes: the history of '{store.table}' is kept from version 8 on; "
                                            r"the changes after version 3 were pruned"):
        store.changes_since(3)
    assert store.changes_since(8)[1].tolist() == [14, 18]


@pytest.mark.mysql
def test_a_page_map_kept_at_a_pruned_version_is_built_from_r_anew(mysql_backend):
    """A map kept beside R (MySQL keeps them) is brought up to date from the change log when R
    is opened again; with the versions since pruned it cannot be, and is built from R (the keys
    inserted then are on it)."""
    backend = mysql_backend
    store = backend.make_master(master(), select=["v"])
    enable_capture(store)
    store.page_map(8)
    assert store.kept_page_rows() == [8]
    q, k = backend.quote(store.table), backend.quote("nk")
    with writer(backend) as other:
        commit(other, f"INSERT INTO {q} ({k}, v) VALUES (201, 1), (203, 1), (205, 1)")  # pages away from the updates
    updates(backend, store.table, 10)
    prune_history(backend.connection, store.table, time.time() + LATER, keep_versions=2)
    with open_store(backend.url, store.table, "nk") as reopened:
        page_map = reopened.page_map(8)
    now = sorted(table_now(backend, store.table))
    pages = page_map.page_of(np.array(now, dtype=np.int64))
    assert (pages >= 0).all() and page_map.n_rows == len(now) == 103
    assert np.bincount(pages, minlength=page_map.n_pages).tolist() == page_map.sizes.tolist()


def wait_for(found, timeout_s: float = 30.0):
    """Polls ``found()`` until it is true (a thread of the job's does the work)."""
    deadline = time.monotonic() + timeout_s
    while not found() and time.monotonic() < deadline:
        time.sleep(0.05)
    return found()


def test_a_jobs_pruner_prunes_on_a_thread_every_round_until_stopped(backend):
    """A step's ``prune_history`` (:func:`start_pruner`): rounds every ``every_s`` seconds on a
    connection of its own, the first at once; R's newest versions less ``keep_versions`` stay."""
    store = backend.make_master(master(), select=["v"])
    enable_capture(store)
    assert start_pruner(store, backend.url, None) is None  # prune_history: false
    updates(backend, store.table, 20)
    pruner = start_pruner(store, backend.url, {"every_s": 0.2, "reader_ttl_s": 1.0, "keep_versions": 2})
    try:
        assert wait_for(lambda: log_span(backend.connection, store.table) == (19, 20))
        updates(backend, store.table, 5)  # the next rounds prune what these leave below the horizon
        assert wait_for(lambda: log_span(backend.connection, store.table) == (24, 25))
    finally:
        pruner.stop()
    assert pruner.rows == 2 * 23 and pruner.rounds >= 2 and pruner.horizon == 24


@pytest.mark.mysql
def test_a_pruner_whose_server_is_unreachable_says_so_and_tries_again(caplog):
    with caplog.at_level(logging.WARNING):
        pruner = HistoryPruner("mysql://semijoin:semijoin@127.0.0.1:1/nowhere", "dim", every_s=0.2,
                               reader_ttl_s=1.0, keep_versions=1).start()
        try:
            assert wait_for(lambda: sum("pruning its history failed" in r.getMessage() for r in caplog.records) >= 2)
        finally:
            pruner.stop()
    said = next(r.getMessage() for r in caplog.records if "pruning its history failed" in r.getMessage())
    assert said.startswith("dim: pruning its history failed (") and said.endswith("); trying again in 0.2 s")
    assert "semijoin:" not in said and pruner.rounds == 0  # (the URL's password is never said)


def test_a_note_waits_briefly_for_a_locked_sqlite_file_and_the_join_goes_on(sqlite_backend, caplog):
    """A reader notes before its snapshot, on the micro-batch's path: while another connection
    holds SQLite's write lock the note gives up after NOTE_WAIT_MS (not the connection's 5 s),
    says so once, and the snapshot reads on; the connection's own busy timeout is left as it was."""
    from airflow_provider_semijoin.core.stores.horizon import NOTE_WAIT_MS

    store = sqlite_backend.make_master(master(), select=["v"])
    enable_capture(store)
    statements: list[str] = []
    store.connection.set_trace_callback(statements.append)
    with writer(sqlite_backend) as other:
        cursor = other.cursor()
        cursor.execute("BEGIN IMMEDIATE")  # the write lock, held
        try:
            with caplog.at_level(logging.WARNING), store.snapshot() as changed:
                assert len(changed) == 0
        finally:
            cursor.execute("ROLLBACK")
    store.connection.set_trace_callback(None)
    note = next(i for i, sql in enumerate(statements) if "semijoin_history_readers" in sql and "REPLACE" in sql)
    assert statements[note - 1] == f"PRAGMA busy_timeout = {NOTE_WAIT_MS}"  # (not the connection's 5 s)
    assert statements[note + 1] == "PRAGMA busy_timeout = 5000"
    said = [r.getMessage() for r in caplog.records if "could not note" in r.getMessage()]
    assert said == [f"{store.table}: could not note the version this reader needs (database is locked); "
                    "a pruner will not wait for it"]
    assert store.bookkeeping_query("PRAGMA busy_timeout")[0][0] == 5000
    assert readers_of(sqlite_backend.connection, store.table) == []
