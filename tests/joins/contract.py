"""The contract every join algorithm must pass, on SQLite and on MySQL/MariaDB.

A plain module (pytest does not collect it): each ``tests/joins/test_<algorithm>.py`` declares
``class Test<Algorithm>(JoinContract)`` with ``algorithm`` and its ``params``. Every test runs
the algorithm through :func:`run_join` and compares its output with the oracle's plain hash
join as multisets of (stream row id, master row) and (stream row id, reason) pairs, and checks
the run's exactly-once report. Deadlines (SSIJ sec. IV-F): misses counted exactly with a clock that
counts steps. Updates (SSIJ sec. IV-E): while a writer installs hundreds of batches, every run of
the same algorithm object equals the join with the one version of R it saw.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from airflow_provider_semijoin.core.errors import BudgetError, ConfigError
from airflow_provider_semijoin.core.joins import ALGORITHMS, JoinAlgorithm, JoinOutput, create
from airflow_provider_semijoin.core.oracle import engine_pairs, hash_join
from airflow_provider_semijoin.core.runner import JoinRun, feed_keys, run_join
from airflow_provider_semijoin.core.session import JoinSession, materialise
from airflow_provider_semijoin.core.stores import DatabaseURL, create_change_tables, install_changes, stage_changes

ROW_ID = "rid"  # the stream's row position: the oracle numbers stream tuples 0..n-1
STREAM_KEY = "sk"
RANDOM_EXAMPLES = {"sqlite": 60, "mysql": 15}


# ------------------------------------------------------------------------------ data


def stream_of(keys, type: pa.DataType | None = None) -> pa.Table:
    """A stream table: ``rid`` = row position, ``sk`` = the join key column."""
    column = keys if isinstance(keys, (pa.Array, pa.ChunkedArray)) else pa.array(keys, type=type)
    return pa.table({ROW_ID: pa.array(np.arange(len(column)), pa.int64()), STREAM_KEY: column})


def master_of(keys) -> pa.Table:
    """R with unique keys ``nk`` and two master columns: ``v`` (int) and ``label`` (text)."""
    keys = list(keys)
    ints = bool(keys) and isinstance(keys[0], (int, np.integer))
    return pa.table(
        {
            "nk": pa.array(keys, pa.int64() if ints or not keys else pa.string()),
            "v": pa.array([3 * int(k) + 1 if ints else i for i, k in enumerate(keys)], pa.int64()),
            "label": pa.array([f"name-{k}" for k in keys], pa.string()),
        }
    )


def one_to_k_master(multiplicity: dict[int, int]) -> pa.Table:
    """R with an ``id`` primary key and ``multiplicity[k]`` rows of key ``k`` (a 1:K master)."""
    nk = [k for k, times in sorted(multiplicity.items()) for _ in range(times)]
    ids = np.arange(len(nk), dtype=np.int64)
    return pa.table({"id": ids, "nk": pa.array(nk, pa.int64()), "v": ids * 7})


def zipf_keys(rng: np.random.Generator, keys: np.ndarray, n: int, exponent: float) -> np.ndarray:
    """``n`` draws from ``keys`` with Zipf-like skew: the i-th hottest (random order) has weight i^-s."""
    weights = 1.0 / np.arange(1, len(keys) + 1) ** exponent
    hot = rng.permutation(len(keys))
    return keys[hot[rng.choice(len(keys), size=n, p=weights / weights.sum())]]


@dataclass
class RandomCase:
    master: pa.Table
    primary_key: str | None  # "id" for a 1:K master
    stream: pa.Table
    page_rows: int
    budget_factor: float


@st.composite
def random_cases(draw) -> RandomCase:
    """Int keys with gaps (unique, or 1..3 rows each); a skewed stream of present, absent,
    out-of-range and null keys."""
    n_master = draw(st.integers(1, 300))  # an empty R: test_empty_master
    one_to_k = draw(st.booleans())
    max_gap = draw(st.integers(1, 6))
    offset = draw(st.integers(-500, 500))
    n_stream = draw(st.integers(0, 1000))
    exponent = draw(st.floats(0.0, 2.5))
    # weights of: present in R, anywhere in R's range, outside R's range, null
    mix = np.array(draw(st.tuples(*[st.integers(0, 6)] * 4).filter(any)), dtype=float)
    column_type = draw(st.sampled_from(["int64", "int32", "float64", "string"]))
    page_rows = draw(st.integers(2, 50))
    budget_factor = draw(st.sampled_from([1.0, 1.05, 1.5, 4.0, 30.0, 400.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    keys = offset + np.cumsum(rng.integers(1, max_gap + 1, n_master))
    lo, hi = (int(keys[0]), int(keys[-1])) if n_master else (offset, offset + 10)
    kind = rng.choice(4, size=n_stream, p=mix / mix.sum())
    values = rng.integers(lo, hi + 1, n_stream)  # anywhere in the range: present or absent
    present = kind == 0
    if n_master:
        values[present] = zipf_keys(rng, keys, int(present.sum()), exponent)
    outside = kind == 2
    below = rng.random(n_stream) < 0.5
    values[outside & below] = lo - rng.integers(1, 60, n_stream)[outside & below]
    values[outside & ~below] = hi + rng.integers(1, 60, n_stream)[outside & ~below]
    null = kind == 3
    if column_type == "string":
        column = pa.array([None if n else str(v) for v, n in zip(values.tolist(), null)], pa.string())
    else:
        numpy_type = {"int64": np.int64, "int32": np.int32, "float64": np.float64}[column_type]
        column = pa.array(values.astype(numpy_type), mask=null)
    if one_to_k:
        master = one_to_k_master({k: int(rng.integers(1, 4)) for k in keys.tolist()})
        return RandomCase(master, "id", stream_of(column), page_rows, budget_factor)
    return RandomCase(master_of(keys.tolist()), None, stream_of(column), page_rows, budget_factor)


# ------------------------------------------------------------------------------ checks


def _first(counter: Counter, n: int = 5) -> list:
    return sorted(counter.elements(), key=repr)[:n]


def assert_exact(store, stream: pa.Table, run: JoinRun) -> None:
    """The run left every tuple exactly once and its output equals the oracle's (multisets)."""
    report = run.stats["exactly_once"]
    assert report["ok"], f"exactly once violated: {report}"
    want_matched, want_unmatched = hash_join(store, stream, STREAM_KEY)
    got_matched, got_unmatched = engine_pairs(run.matched, run.unmatched, store.select, ROW_ID)
    assert got_unmatched == want_unmatched, (
        f"unmatched differ: missing {_first(want_unmatched - got_unmatched)}, "
        f"extra {_first(got_unmatched - want_unmatched)}"
    )
    assert got_matched == want_matched, (
        f"matched pairs differ: missing {_first(want_matched - got_matched)}, "
        f"extra {_first(got_matched - want_matched)}"
    )


def measured_as(store, query_s: float, row_s: float, in_query_s: float, in_key_s: float):
    """``store`` as if its calibration had measured these costs (S, T, and an IN query's fixed
    and per-key cost): tests of a cost-based choice must not depend on this machine's speed."""
    return store.assume_costs((query_s, row_s), (in_query_s, in_key_s))


def record_calls(store, method: str, entry) -> list:
    """From now on, record ``entry(*args)`` of every call of ``store.<method>``, on its own
    session or its reader's (read-ahead), until ``del store.<method>``."""
    calls = []

    def recorder(target):
        call = getattr(type(target), method).__get__(target)  # the class's, not an earlier recorder

        def recording_call(*args):
            if vars(store).get(method) is recording:
                calls.append(entry(*args))
            return call(*args)

        return recording_call

    recording = recorder(store)
    setattr(store, method, recording)
    reader = store.reader() if hasattr(store, "reader") else None
    for sibling in reader.siblings if reader is not None else []:
        setattr(sibling, method, recorder(sibling))
    return calls


def record_loads(store) -> list[tuple[int, int]]:
    """``(first, count)`` of every page load of ``store`` from now on (:func:`record_calls`)."""
    return record_calls(store, "load_pages", lambda page_map, first, count=1: (first, count))


class StepClock:
    """A clock that reads how many steps ``algorithm`` has begun (0 before the first), and
    ``completed[row]``: the step that completed each stream row, read from the steps' outputs
    (0 for rows that never reach a step), independently of the runner's own bookkeeping."""

    def __init__(self, algorithm, n_rows: int):
        self.now = 0.0
        self.completed = np.zeros(n_rows)
        step = algorithm.step

        def counted_step(buffer):
            self.now += 1.0
            out = step(buffer)
            self.completed[out.matched_ids] = self.now
            self.completed[out.unmatched_ids] = self.now
            return out

        algorithm.step = counted_step

    def __call__(self) -> float:
        return self.now


class MasterWriter(threading.Thread):
    """Installs ``batches`` small update batches into R from a connection of its own while joins
    run (SSIJ sec. IV-E): each batch changes 1-4 distinct keys drawn with ``weights`` from
    ``keys`` (hot keys change often): an upsert (new values; a new key when it was absent,
    below, inside or above R's key range; K = 1-3 rows for a 1:K master) or a delete. Odd
    versions are staged and installed from pending, even ones given directly.

    ``states[v]`` is R after version v as ``{key: [master row tuple, ...]}``: the oracle.
    It starts after ``reading`` is set (the first join has read version 0).
    """

    def __init__(self, backend, store, initial: pa.Table, keys: np.ndarray, weights: np.ndarray,
                 batches: int, seed: int):
        super().__init__(daemon=True)
        self.url, self.table, self.select = backend.url, store.table, store.select
        self.one_to_k = "id" in initial.column_names
        self.keys, self.weights, self.batches = keys, weights, batches
        self.rng = np.random.default_rng(seed)
        state: dict = {}
        for row in initial.to_pylist():
            state.setdefault(row["nk"], []).append(tuple(row[c] for c in self.select))
        self.states = [state]
        self.reading = threading.Event()
        self.error: BaseException | None = None
        self._next_id = 10**6

    def batch(self, version: int) -> tuple[pa.Table, dict]:
        """A batch of changes and R after it."""
        state = dict(self.states[-1])
        chosen = self.rng.choice(self.keys, size=int(self.rng.integers(1, 5)), replace=False, p=self.weights)
        columns: dict[str, list] = {"op": [], "nk": [], **{c: [] for c in self.select}}
        for i, key in enumerate(chosen.tolist()):
            if self.rng.random() < 0.3:
                changed = [("D", dict.fromkeys(self.select))]
            else:
                k = int(self.rng.integers(1, 4)) if self.one_to_k else 1
                changed = [("U", {"id": self._next_id + j, "v": version * 1000 + 10 * i + j, "label": f"v{version}"})
                           for j in range(k)]
                self._next_id += k
            for op, values in changed:
                columns["op"].append(op)
                columns["nk"].append(key)
                for c in self.select:
                    columns[c].append(values[c])
            state[key] = [tuple(values[c] for c in self.select) for op, values in changed if op == "U"]
            if not state[key]:
                del state[key]
        return pa.table({"op": pa.array(columns.pop("op"), pa.string()), "nk": pa.array(columns.pop("nk"), pa.int64()),
                         **{c: pa.array(v, pa.int64() if c != "label" else pa.string()) for c, v in columns.items()}}), state

    def run(self) -> None:
        connection = DatabaseURL.parse(self.url).connect()
        try:
            self.reading.wait(60)
            for version in range(1, self.batches + 1):
                changes, state = self.batch(version)
                if version % 2:
                    stage_changes(connection, self.table, "nk", changes)
                    installed = install_changes(connection, self.table, "nk")
                else:
                    installed = install_changes(connection, self.table, "nk", changes)
                assert installed.version == version, (installed, version)
                self.states.append(state)
        except BaseException as exc:  # the test thread reports it
            self.error = exc
        finally:
            connection.close()


def expected_pairs(state: dict, stream: pa.Table) -> tuple[Counter, Counter]:
    """The join of an int-key stream (no null keys) with the R of ``state``."""
    matched, unmatched = Counter(), Counter()
    for row_id, key in enumerate(stream[STREAM_KEY].to_pylist()):
        if key in state:
            for master_row in state[key]:
                matched[(row_id, master_row)] += 1
        else:
            unmatched[(row_id, "not_in_master")] += 1
    return matched, unmatched


def reasons_by_row(run: JoinRun) -> dict[int, str]:
    return dict(zip(run.unmatched[ROW_ID].to_pylist(), run.unmatched["reason"].to_pylist()))


# ------------------------------------------------------------------------------ the contract


def worked_ahead_in_pieces(algorithm, stream: pa.Table, piece_rows: int, steps_ahead: int,
                           advance_first: bool) -> JoinOutput:
    """``stream`` fed to one session in pieces; after each piece (and a slice, ``advance_first``)
    the session works ahead with ``steps_ahead`` steps granted and must end between joins;
    finally drained. Returns every output."""
    session = JoinSession(algorithm, time.perf_counter)
    outputs = []
    for lo in range(0, stream.num_rows, piece_rows):
        piece = stream.slice(lo, piece_rows)
        invalid, _ = feed_keys(algorithm, piece[STREAM_KEY], np.arange(lo, lo + piece.num_rows), None,
                               time.perf_counter, session)
        outputs += [invalid, session.advance()] if advance_first else [invalid]
        asked = []
        outputs.append(session.work_ahead(lambda: asked.append(1) or len(asked) <= steps_ahead))
        assert algorithm.between_joins and len(asked) <= steps_ahead + 1
    outputs.append(session.drain())
    return JoinOutput.concat(outputs, algorithm.schema)


class JoinContract:
    """Shared tests; a subclass sets ``algorithm`` and, if it needs them, ``params``."""

    algorithm: str
    params: dict = {}
    # hypothesis strategies for more parameters the random test draws (e.g. partition_pages)
    param_strategies: dict = {}
    memory = 4 << 20  # budget of the fixed-data tests
    page_rows = 4  # default for algorithms that take page_rows: many pages on small tables

    # -- helpers ----------------------------------------------------------------------------
    @property
    def paged(self) -> bool:
        """The algorithm reads R in pages of the page map (and takes ``page_rows``)."""
        return "page_rows" in ALGORITHMS[self.algorithm].params

    def settings_for(self, **overrides) -> dict:
        params = {"page_rows": self.page_rows} if self.paged else {}
        return {**params, **self.params, **overrides}

    def make(self, store, memory: int | None = None, **overrides):
        return create(self.algorithm, store, memory or self.memory, self.settings_for(**overrides))

    def join(self, store, stream: pa.Table, memory: int | None = None, **overrides) -> JoinRun:
        """Run the algorithm over ``stream`` and check it against the oracle."""
        run = run_join(self.make(store, memory, **overrides), stream, STREAM_KEY)
        assert_exact(store, stream, run)
        return run

    def smallest_budget(self, store, **overrides) -> int:
        """About the smallest budget (within 2%) the algorithm accepts for ``store``."""

        def fits(memory: int) -> bool:
            try:
                self.make(store, memory, **overrides)
                return True
            except BudgetError:
                return False

        hi = 1
        while not fits(hi):
            hi *= 2
            assert hi < 2**34, "no budget up to 16 GiB is accepted"
        lo = hi // 2
        while hi - lo > max(hi // 50, 1):
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if fits(mid) else (mid, hi)
        return hi

    # -- random data ------------------------------------------------------------------------
    def test_random_streams_match_the_oracle(self, backend):
        strategies = {"case": random_cases(), "extra": st.fixed_dictionaries(self.param_strategies)}

        @settings(
            max_examples=RANDOM_EXAMPLES[backend.name],
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(**strategies)
        def check(case: RandomCase, extra: dict):
            store = backend.make_master(case.master, primary_key=case.primary_key)
            overrides = {**extra, **({"page_rows": case.page_rows} if self.paged else {})}
            memory = int(self.smallest_budget(store, **overrides) * case.budget_factor)
            note(f"memory={memory} params={self.settings_for(**overrides)} R={case.master.num_rows} rows")
            self.join(store, case.stream, memory, **overrides)

        check()

    def test_random_string_keys_match_the_oracle(self, backend):
        """Keys sharing prefixes, of 1- to 4-byte UTF-8 characters, around R's longest key."""
        alphabet = st.sampled_from(
            ["P", "p", "-", "0", "1", "9", "~", "\x7f", "é", "\u07ff", "\u0800", "東", "\ufffd", "😀"]
        )
        texts = st.text(alphabet, max_size=6)

        @settings(
            max_examples=RANDOM_EXAMPLES[backend.name] // 3,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        @given(
            keys=st.lists(texts, min_size=1, max_size=60, unique=True),
            others=st.lists(texts, max_size=30),
            seed=st.integers(0, 2**32 - 1),
            page_rows=st.integers(1, 6),
        )
        def check(keys, others, seed, page_rows):
            keys = sorted(set(keys) | {"-"}, key=str.encode)  # an ASCII smallest key: see the non-ASCII test
            store = backend.make_master(master_of(keys))
            rng = np.random.default_rng(seed)
            stream = [keys[i] for i in rng.integers(0, len(keys), 80)] + others + [None]
            self.join(store, stream_of(rng.permutation(np.array(stream, dtype=object)).tolist(), pa.string()),
                      **({"page_rows": page_rows} if self.paged else {}))

        check()

    # -- keys of every kind ------------------------------------------------------------------
    def test_string_keys_business_codes_unicode_and_too_long(self, backend):
        codes = [f"P-{i:06d}" for i in range(0, 240, 3)]
        keys = sorted(codes + ["P-00012", "P-0001234", "Ü-17", "東京-3", "😀-9", "a", "zz"])
        store = backend.make_master(master_of(keys))
        rng = np.random.default_rng(5)
        stream = [str(k) for k in rng.choice(keys, 300)] + [
            "P-000001",  # absent, between R's keys
            "P-0",  # a prefix of R's keys
            "P-000123 ",  # trailing space: not the same key as P-000123
            "p-000123",  # case differs: not the same key
            "Ü-18",
            "東京-3",
            "😀-9",
            "",  # the empty string is a key, absent from R
            "A",  # below R's smallest key
            "zzz",  # between "zz" and "Ü-17"
            "P-000123-000000000000",  # longer than R's longest key: not_in_master without I/O
            "東京-3東京-3東京-3",
            "P-0\x00",  # NUL byte: bad_key
            None,
        ]
        run = self.join(store, stream_of(stream, pa.string()))
        reasons = reasons_by_row(run)
        n = 300
        assert run.stats["tuples_matched"] == n + 2  # 東京-3 and 😀-9 match too
        assert [reasons.get(n + i) for i in range(len(stream) - n)] == [
            "not_in_master", "not_in_master", "not_in_master", "not_in_master", "not_in_master",
            None, None, "not_in_master", "not_in_master", "not_in_master",
            "not_in_master", "not_in_master", "bad_key", "null_key",
        ]

    def test_string_master_whose_keys_are_all_non_ascii(self, backend):
        keys = sorted(["Ärö-1", "Ärö-2", "Øst-7", "東京-3", "😀-9"], key=str.encode)
        store = backend.make_master(master_of(keys))
        run = self.join(store, stream_of(keys * 2 + ["Ärö-3", "Ä", "A"], pa.string()))
        assert run.stats["tuples_matched"] == 2 * len(keys)

    def test_string_keys_that_differ_by_control_characters(self, backend):
        """Byte order: 'a' < 'a\\t' < 'a\\tb' < 'b' < 'b\\n' < 'c' (a PAD SPACE collation differs)."""
        keys = ["a", "a\t", "a\tb", "b", "b\n", "c"]
        store = backend.make_master(master_of(keys))
        stream = stream_of(keys * 3 + ["a\n", "b\t", "a "], pa.string())
        run = self.join(store, stream, **({"page_rows": 1} if self.paged else {}))
        assert run.stats["tuples_matched"] == 18

    @pytest.mark.parametrize(
        "values, type, expected",
        [
            (
                ["12", " 7 ", "x", "1.5", "", "+3", "-0", None, "99999999999999999999", "\t20\n", "0x10"],
                pa.string(),
                [12, 7, "bad_key", "bad_key", "bad_key", 3, "not_in_master", "null_key", "bad_key", 20, "bad_key"],
            ),
            (
                [3.0, 2.5, float("nan"), None, float("inf"), -1e30, 12.0, -0.0, 4.0],
                pa.float64(),
                [3, "bad_key", "null_key", "null_key", "bad_key", "bad_key", 12, "not_in_master", "not_in_master"],
            ),
            ([None, None, None], pa.int64(), ["null_key"] * 3),
            ([None, None], pa.null(), ["null_key"] * 2),
            ([True, False, None], pa.bool_(), ["bad_key", "bad_key", "null_key"]),
            ([b"12", b"7"], pa.binary(), ["bad_key", "bad_key"]),
        ],
        ids=["strings", "floats", "int-nulls", "null-type", "bools", "binary"],
    )
    def test_bad_keys_for_an_int_master(self, backend, values, type, expected):
        store = backend.make_master(master_of([1, 3, 7, 12, 20, 33]))
        run = self.join(store, stream_of(values, type))
        reasons = reasons_by_row(run)
        matched = dict(zip(run.matched[ROW_ID].to_pylist(), run.matched["v"].to_pylist()))
        got = [reasons[i] if i in reasons else (matched[i] - 1) // 3 for i in range(len(values))]
        assert got == expected

    @pytest.mark.parametrize(
        "values, type",
        [([1, 2, None], pa.int64()), ([1.0, None], pa.float64()), ([True], pa.bool_()), ([b"P-1"], pa.binary())],
        ids=["ints", "floats", "bools", "binary"],
    )
    def test_non_string_keys_for_a_string_master_are_bad_keys(self, backend, values, type):
        store = backend.make_master(master_of(["1", "2", "P-1"]))
        run = self.join(store, stream_of(values, type))
        assert reasons_by_row(run) == {
            i: "null_key" if v is None else "bad_key" for i, v in enumerate(values)
        }
        assert run.stats["disk_queries"] == 0

    def test_extreme_int_keys_and_null_master_columns(self, backend):
        lo, hi = -(2**63), 2**63 - 1
        keys = [lo, lo + 1, -1, 0, 1, hi - 1, hi]
        master = pa.table({
            "nk": pa.array(keys, pa.int64()),
            "v": pa.array([None, 1, 2, None, 4, 5, 6], pa.int64()),
            "label": pa.array(["min", None, "-1", "0", None, "max-1", "max"], pa.string()),
        })
        store = backend.make_master(master)
        stream = keys + [lo + 2, -2, 2, hi - 2, None] + [str(hi), float(2**62)]
        run = self.join(store, stream_of([None if k is None else str(k) for k in stream], pa.string()))
        assert run.stats["tuples_matched"] == 8

    # -- a master with K rows per key --------------------------------------------------------
    def test_one_to_k_master_yields_k_pairs_per_match(self, backend):
        rng = np.random.default_rng(11)
        multiplicity = {k: int(rng.integers(0, 5)) for k in range(0, 120, 2)}  # 0 rows = absent
        store = backend.make_master(one_to_k_master(multiplicity), primary_key="id", select=["id", "v"])
        assert store.key_unique is False
        keys = rng.integers(-5, 125, 600)
        run = self.join(store, stream_of(keys.tolist()))
        pairs = Counter(run.matched[ROW_ID].to_pylist())
        for row, key in enumerate(keys.tolist()):
            assert pairs[row] == multiplicity.get(key, 0), (row, key)

    def test_one_algorithm_joins_run_after_run(self, backend):
        """Spark micro-batches: one algorithm object (caches alive) drains stream after stream."""
        store = backend.make_master(master_of(range(0, 400, 2)))
        algorithm = self.make(store)
        rng = np.random.default_rng(7)
        for _ in range(4):
            stream = stream_of(zipf_keys(rng, np.arange(0, 440, 2), 300, 1.0))
            assert_exact(store, stream, run_join(algorithm, stream, STREAM_KEY))
        assert algorithm.pending == 0

    # -- degenerate streams ------------------------------------------------------------------
    def test_empty_stream(self, backend):
        store = backend.make_master(master_of(range(0, 50, 2)))
        run = self.join(store, stream_of([], pa.int64()))
        assert run.matched.num_rows == 0 and run.unmatched.num_rows == 0
        assert run.stats["tuples_in"] == 0 and run.stats["disk_queries"] == 0

    def test_stream_of_only_invalid_keys_needs_no_io(self, backend):
        store = backend.make_master(master_of(range(0, 50, 2)))
        values = ["x", None, "1.5", "", None, "--3"] * 20
        run = self.join(store, stream_of(values, pa.string()))
        assert run.matched.num_rows == 0
        assert Counter(run.unmatched["reason"].to_pylist()) == {"bad_key": 80, "null_key": 40}
        assert run.stats["disk_queries"] == 0

    def test_stream_with_no_key_in_master(self, backend):
        store = backend.make_master(master_of(range(100, 300, 2)))
        rng = np.random.default_rng(3)
        outside = np.concatenate([rng.integers(-50, 100, 200), rng.integers(299, 500, 200)])
        between = rng.integers(50, 150, 200) * 2 + 1  # odd keys inside R's range
        run = self.join(store, stream_of(np.concatenate([outside, between]).tolist()))
        assert run.matched.num_rows == 0
        assert reasons_by_row(run) == dict.fromkeys(range(600), "not_in_master")
        if self.paged:  # keys outside R's key range are known absent from the page map
            only_outside = self.join(store, stream_of(outside.tolist()))
            assert only_outside.stats["disk_queries"] == 0

    def test_empty_master(self, backend):
        store = backend.make_master(master_of([]))
        run = self.join(store, stream_of([1, 2, None, 2]))
        assert reasons_by_row(run) == {0: "not_in_master", 1: "not_in_master", 2: "null_key", 3: "not_in_master"}

    # -- deadlines (SSIJ sec. IV-F) -----------------------------------------------------------
    def deadline_case(self, backend, seed: int) -> tuple:
        """R, a stream of present, absent, out-of-range and invalid keys, a small budget (many
        steps), and the algorithm with a :class:`StepClock`."""
        store = backend.make_master(master_of(range(0, 400, 2)))
        rng = np.random.default_rng(seed)
        values = [str(v) for v in rng.integers(-20, 420, 500)] + ["x", None, "2.5"] * 10
        stream = stream_of(rng.permutation(np.array(values, dtype=object)).tolist(), pa.string())
        algorithm = self.make(store, int(self.smallest_budget(store) * 1.5))
        return store, stream, algorithm, StepClock(algorithm, stream.num_rows), rng

    def test_deadline_misses_are_counted_exactly(self, backend):
        """A tuple misses when it completes after its deadline, matched or not; NaN = none."""
        store, stream, algorithm, clock, rng = self.deadline_case(backend, 29)
        deadlines = rng.choice([0.0, 0.5, 2.0, 6.0, np.inf, np.nan], stream.num_rows)
        run = run_join(algorithm, stream, STREAM_KEY, clock=clock, deadline=pa.array(deadlines))
        assert_exact(store, stream, run)
        assert np.array_equal(run.completed_at, clock.completed)
        late = clock.completed > np.nan_to_num(deadlines, nan=np.inf)
        assert run.stats["deadline_misses"] == int(late.sum()) > 0
        assert run.stats["tuples_with_deadline"] == int((~np.isnan(deadlines)).sum())
        invalid = [row for row, why in reasons_by_row(run).items() if why in ("bad_key", "null_key")]
        assert len(invalid) == 30 and (run.completed_at[invalid] == 0).all()  # they leave at the start

    def test_max_latency_sets_deadlines_from_arrival(self, backend):
        store, stream, algorithm, clock, rng = self.deadline_case(backend, 31)
        arrival = -rng.uniform(0, 3, stream.num_rows)  # arrived before the run started (at 0)
        run = run_join(algorithm, stream, STREAM_KEY, clock=clock, arrival=arrival, max_latency_s=2.5)
        assert_exact(store, stream, run)
        latency_s = clock.completed - arrival
        assert run.stats["deadline_misses"] == int((latency_s > 2.5).sum())
        assert run.stats["tuples_with_deadline"] == stream.num_rows
        p50, p99 = np.percentile(latency_s, [50, 99]) * 1000
        assert (run.stats["latency_ms_p50"], run.stats["latency_ms_p99"]) == (round(p50, 3), round(p99, 3))

    # -- master-data updates (SSIJ sec. IV-E) ------------------------------------------------
    update_batches = 200

    @pytest.mark.parametrize("master", ["unique", "1:K"])
    def test_every_tuple_sees_one_version_of_r_while_updates_install(self, backend, master):
        """A writer installs small batches (upserts, inserts in and outside R's key range,
        deletes) while the SAME algorithm object joins the stream in run after run (its
        caches live on, like across Spark micro-batches). Every run's output equals the join
        with the version of R that run saw: each tuple saw one version, never a mix, and left
        exactly once."""
        rng = np.random.default_rng(41)
        if master == "unique":
            initial = master_of(range(0, 400, 2))
            store = backend.make_master(initial)
        else:
            initial = one_to_k_master({k: int(rng.integers(1, 4)) for k in range(0, 400, 2)})
            store = backend.make_master(initial, primary_key="id", select=["id", "v"])
        create_change_tables(backend.connection, store.table, "nk")
        keys = rng.permutation(np.arange(-40, 440))  # hottest first; R holds 0..398 even
        weights = 1.0 / np.arange(1, len(keys) + 1)
        weights /= weights.sum()
        algorithm = self.make(store)
        writer = MasterWriter(backend, store, initial, keys, weights, self.update_batches, seed=43)
        writer.start()
        runs = []
        try:
            while True:
                finished = not writer.is_alive()  # a run that starts after the last install sees it
                stream = stream_of(keys[rng.choice(len(keys), 300, p=weights)].tolist())
                runs.append((stream, run_join(algorithm, stream, STREAM_KEY)))
                writer.reading.set()
                if finished:
                    break
                time.sleep(0.005)  # let the writer have the GIL now and then
        finally:
            writer.reading.set()
            writer.join()
        assert writer.error is None, repr(writer.error)
        for stream, run in runs:
            version = run.stats["master_version"]
            assert run.stats["exactly_once"]["ok"], run.stats["exactly_once"]
            got = engine_pairs(run.matched, run.unmatched, store.select, ROW_ID)
            assert got == expected_pairs(writer.states[version], stream), f"a run that saw version {version}"
        versions = [run.stats["master_version"] for _, run in runs]
        assert versions[0] == 0 and versions[-1] == self.update_batches and versions == sorted(versions)
        if type(algorithm).invalidate is not JoinAlgorithm.invalidate:  # it caches R: stale entries were dropped
            assert sum(run.stats["invalidated"] for _, run in runs) > 0

    # -- memory ------------------------------------------------------------------------------
    @pytest.mark.parametrize("factor", [1.0, 30.0])
    @pytest.mark.parametrize("master", ["unique", "1:K"])
    def test_structure_bytes_stay_within_the_budget(self, backend, master, factor):
        rng = np.random.default_rng(17)
        if master == "unique":
            store = backend.make_master(master_of(range(0, 900, 3)))
        else:
            multiplicity = {k: int(rng.integers(1, 6)) for k in range(0, 300)}
            store = backend.make_master(one_to_k_master(multiplicity), primary_key="id")
        stream = stream_of(zipf_keys(rng, np.arange(-20, 920), 1500, 1.0).tolist())
        memory = int(self.smallest_budget(store) * factor)
        run = self.join(store, stream, memory)
        assert run.stats["memory_budget_bytes"] == memory
        assert 0 < run.stats["structure_bytes_peak"] <= memory

    def test_pending_never_exceeds_capacity_tuples(self, backend):
        """``capacity_tuples`` bounds what the algorithm holds (a Spark step sizes the carried
        rows' share of the budget by it): fed a backlog far larger, stepped until drained."""
        store = backend.make_master(master_of(range(0, 900, 3)))
        algorithm = self.make(store, self.smallest_budget(store) * 3)
        keys = zipf_keys(np.random.default_rng(5), np.arange(-20, 920), 20 * algorithm.capacity_tuples + 500, 1.0)
        _, session = feed_keys(algorithm, pa.chunked_array([pa.array(keys)]), np.arange(len(keys)), None, time.perf_counter)
        held = []
        while session.pending:
            session.step()
            held.append(algorithm.pending)
            if len(held) == 2000:
                session.buffer.closed = True  # the end of the stream: the rest drains
        assert max(held) <= algorithm.capacity_tuples, (max(held), algorithm.capacity_tuples)
        assert session.completed == len(keys)

    def test_a_drain_reopens_the_stream_unless_it_had_ended(self, backend):
        """A drain closes the buffer while it steps and reopens it for the next tuples; a stream
        that had ended (``close()``) stays closed and final, and a later feed is refused."""
        store = backend.make_master(master_of(range(0, 90, 3)))
        algorithm = self.make(store)
        keys = pa.chunked_array([pa.array([3, 4, 6, 3])])
        _, session = feed_keys(algorithm, keys, np.arange(4), None, time.perf_counter)
        assert session.drain().completed == 4 and not (session.buffer.closed or session.buffer.final)
        feed_keys(algorithm, keys, np.arange(4, 8), None, time.perf_counter, session)
        session.buffer.close()
        assert session.drain().completed == 4 and session.buffer.closed and session.buffer.final
        with pytest.raises(RuntimeError, match="^append to a closed stream buffer$"):
            feed_keys(algorithm, keys, np.arange(8, 12), None, time.perf_counter, session)

    @pytest.mark.parametrize("max_pending", [0, 9])
    def test_a_slice_leaves_at_most_max_pending_inside(self, backend, max_pending):
        """A caller out of room for the rows of waiting tuples caps them: after each slice at most
        ``max_pending`` wait (the oldest beyond are forced out), and the output is the oracle's."""
        store = backend.make_master(master_of(range(0, 900, 3)))
        algorithm = self.make(store)
        stream = stream_of(zipf_keys(np.random.default_rng(8), np.arange(-20, 920), 700, 1.0).tolist())
        session = JoinSession(algorithm, time.perf_counter)
        outputs, waiting = [], []
        for lo in range(0, stream.num_rows, 100):
            piece = stream.slice(lo, 100)
            invalid, _ = feed_keys(algorithm, piece[STREAM_KEY], np.arange(lo, lo + piece.num_rows), None,
                                   time.perf_counter, session)
            outputs += [invalid, session.advance(max_pending=max_pending)]
            waiting.append(session.pending)
        outputs.append(session.drain())
        assert max(waiting) <= max_pending
        matched, unmatched = materialise(stream, JoinOutput.concat(outputs, algorithm.schema), algorithm.schema)
        assert engine_pairs(matched, unmatched, store.select, ROW_ID) == hash_join(store, stream, STREAM_KEY)
        left = np.concatenate([np.unique(matched[ROW_ID].to_numpy()), unmatched[ROW_ID].to_numpy()])
        assert sorted(left.tolist()) == list(range(stream.num_rows))

    @pytest.mark.parametrize("steps_ahead", [1, 7, 10_000])
    def test_working_ahead_stops_when_told_between_joins_and_matches_the_oracle(self, backend, steps_ahead):
        """``work_ahead`` (a Spark step between micro-batches) steps over what was fed while told
        to: it stops after the step under way with no tuple half joined, however few steps it
        was given, and the output stays the oracle's."""
        store = backend.make_master(master_of(range(0, 900, 3)))
        algorithm = self.make(store)
        stream = stream_of(zipf_keys(np.random.default_rng(4), np.arange(-20, 920), 900, 1.0).tolist())
        out = worked_ahead_in_pieces(algorithm, stream, 150, steps_ahead, advance_first=True)
        matched, unmatched = materialise(stream, out, algorithm.schema)
        assert engine_pairs(matched, unmatched, store.select, ROW_ID) == hash_join(store, stream, STREAM_KEY)
        left = np.concatenate([np.unique(matched[ROW_ID].to_numpy()), unmatched[ROW_ID].to_numpy()])
        assert sorted(left.tolist()) == list(range(stream.num_rows))

    def test_a_budget_too_small_is_refused(self, backend):
        store = backend.make_master(master_of(range(0, 900, 3)))
        with pytest.raises(ConfigError, match=r"^memory: 16 bytes is too small for "):
            self.make(store, 16)

    def test_default_parameters_and_parameters_given_as_text(self, backend):
        store = backend.make_master(master_of(range(0, 3000, 3)))
        stream = stream_of(zipf_keys(np.random.default_rng(2), np.arange(-30, 3030), 2000, 0.7).tolist())
        run = run_join(create(self.algorithm, store, self.memory, dict(self.params)), stream, STREAM_KEY)
        assert_exact(store, stream, run)
        text = {name: str(value) for name, value in self.settings_for().items()}
        algorithm = create(self.algorithm, store, self.memory, text)
        assert all(algorithm.settings[name] == value for name, value in self.settings_for().items())
        assert_exact(store, stream, run_join(algorithm, stream, STREAM_KEY))

    def test_unknown_parameter_is_refused(self, backend):
        store = backend.make_master(master_of(range(10)))
        with pytest.raises(ConfigError, match=rf"^{self.algorithm}\.warp_speed: not a parameter"):
            create(self.algorithm, store, self.memory, {**self.settings_for(), "warp_speed": 9})
