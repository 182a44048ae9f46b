"""MESHJOIN: the contract, the cyclic scan of R and the bound on H_S."""

import numpy as np
from contract import JoinContract, master_of, record_loads
from hypothesis import strategies as st

from airflow_provider_semijoin.core.joins import StreamBuffer, create


class TestMeshJoin(JoinContract):
    algorithm = "meshjoin"
    param_strategies = {"partition_pages": st.integers(0, 6)}


def test_every_partition_is_read_once_per_cycle_in_order_and_hs_holds_at_most_w_k(backend):
    store = backend.make_master(master_of(range(400)))
    mesh = create("meshjoin", store, 1 << 16, {"page_rows": 10, "partition_pages": 4})
    k, w, b = mesh.partitions, mesh.chunk_tuples, mesh.partition_pages
    assert (k, b) == (10, 4) and w >= 20
    n = 40 * w  # a long stream: 40 chunks, 4 cycles of R
    keys = np.random.default_rng(1).integers(0, 400, n)
    buffer = StreamBuffer(store.key_type)
    buffer.append(np.arange(n), keys)
    buffer.close()
    calls = record_loads(store)
    queries_before = store.counters.queries
    admitted_at, completed_at, step = np.full(n, -1), np.full(n, -1), 0
    while not (buffer.exhausted and mesh.pending == 0):
        out = mesh.step(buffer)
        for ids, _ in buffer.taken:
            admitted_at[ids] = step
        buffer.taken.clear()
        for ids in (np.unique(out.matched_ids), out.unmatched_ids):
            assert (completed_at[ids] == -1).all()  # nothing leaves twice
            completed_at[ids] = step
        assert mesh.table.size <= w * k
        step += 1
    assert (completed_at >= 0).all() and (admitted_at >= 0).all()
    # each tuple meets every partition within one cycle: it leaves at most k-1 steps after entering
    assert (completed_at - admitted_at).max() <= k - 1
    # while the stream flows, every step loads the next partition in cyclic order
    flowing = n // w
    assert [first for first, _ in calls[:flowing]] == [(i % k) * b for i in range(flowing)]
    assert all(count == b for _, count in calls)
    assert mesh.counters.loads == len(calls) == store.counters.queries - queries_before
    assert flowing <= len(calls) <= flowing + k - 1


def test_a_disk_invocation_waits_for_w_tuples_until_the_stream_ends(backend):
    store = backend.make_master(master_of(range(200)))
    mesh = create("meshjoin", store, 1 << 16, {"page_rows": 10, "partition_pages": 2})
    w = mesh.chunk_tuples
    assert w >= 3
    buffer = StreamBuffer(store.key_type)
    buffer.append(np.arange(w - 1), np.arange(w - 1))
    before = store.counters.queries
    for _ in range(3):
        out = mesh.step(buffer)
        assert out.completed == 0 and mesh.pending == 0 and buffer.available == w - 1
    assert store.counters.queries == before
    buffer.close()
    done = []
    for _ in range(mesh.partitions):
        done.extend(mesh.step(buffer).matched_ids.tolist())
    assert sorted(done) == list(range(w - 1)) and mesh.pending == 0
