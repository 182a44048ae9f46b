"""The state-store bench at a tiny size: Spark's own state store (``transformWithStateInPandas``
on RocksDB, the queue as a ListState and as a ValueState) and the Python-worker tokens emit the
same tuples, each exactly once, in the batch the oracle says. Speed is never asserted."""

from __future__ import annotations

import numpy as np
import pytest

from airflow_provider_semijoin.bench.state_store import (
    BATCH, EMPTY_QUEUE, PART, PARTS, PATHS, SEQ, batch_table, emitted, expected, run_path, step_queue,
)


def test_step_queue_emits_each_tuple_in_the_batch_its_rule_names():
    seq, key = np.arange(6, dtype=np.int64), np.array([0, 0, 1, 1, 5, 7], np.int64)  # (seq + key) % 3: 0 1 0 1 0 0
    kept, out = step_queue(EMPTY_QUEUE, seq, key, batch=4, life=3)
    assert out.tolist() == [0, 2, 4, 5]
    assert kept[0].tolist() == [1, 3] and kept[2].tolist() == [4, 4]  # (seq, key, batch arrived)
    kept, out = step_queue(kept, seq[:0], key[:0], batch=5, life=3)
    assert out.tolist() == [1, 3] and len(kept[0]) == 0


@pytest.mark.slow
def test_every_path_emits_the_oracles_tuples_exactly_once(spark, tmp_path):
    life, batches = 3, [batch_table(b, 400, 2000) for b in range(5)]
    assert set(batches[0][PART].to_pylist()) == set(PARTS)  # both key ranges get tuples
    want, carried = expected(batches, life)
    assert carried[-1] > 0  # tuples stay across batches
    want_pairs = sorted((int(s), b) for b, seqs in enumerate(want) for s in seqs)
    for path in PATHS:
        records = run_path(spark, path, batches, life, tmp_path / path)
        assert [r["tuples"] for r in records] == [400] * 5, path
        out = emitted(tmp_path / path / "out")
        pairs = sorted(zip(out[SEQ].to_pylist(), out[BATCH].to_pylist()))
        assert pairs == want_pairs, path  # each emitted once, in its batch; none of the carried ones
    assert all(r["rebuilds"] == 0 for r in records[1:])  # the tokens path: every part found where it was left
