"""``semijoin bench --as-of``: the as-of lookup's rate on a type-2 dimension against the
equality rate of the same algorithm and against the simple SQL a user would write (issue 55).

R is a type-2 table ``asof_r<rows>_s<seed>`` of about ``rows`` rows: ``rows / 3`` natural keys,
each with 1-5 versions (uniform), columns ``sk`` (the surrogate key, 1..n, primary key), ``nk``,
``valid_from`` and ``valid_to`` (epoch seconds; ``valid_to`` NULL for the current version; one
version in five ends before the next starts, so there are gaps), indexed on ``(nk,
valid_from)``. The stream is Zipf(``zipf``) over the keys (the ``random`` shape: hot keys spread
over R), each tuple's event time uniform from its key's first ``valid_from`` to the end of the
span - so a tuple in a gap leaves as ``no_version_valid`` - or, one in twenty, the instant one of
its versions starts (the half-open interval's edges).

On the same stream, in the same memory, each algorithm runs through the core engine as a
micro-batch step does (:class:`StreamBuffer` kept a backlog, fed ``batch_rows`` tuples at a
time; the reads of HYBRIDJOIN sec. 4.1 / the cache front-stage of CMESHJOIN sec. 3.1 returning
all of a key's versions): (a) with :func:`..core.asof.pick_versions` on each step's output, as
the Spark step's ``_as_of`` does, and (b) with plain equality (every version returned). The
Spark step itself is not used: its overhead a micro-batch (scheduling, the Arrow transfers;
``--spark`` measures it) is the same for (a) and (b), and on this shared machine would hide the
lookup's own cost in noise. (c) is the strongest simple alternative: per micro-batch, one query
joining R with the batch's ``(tid, nk, t)`` as a table value constructor on ``nk = nk AND
valid_from <= t AND (t < valid_to OR valid_to IS NULL)``, which the database serves from the
``(nk, valid_from)`` index. (d) is the IN-list form: per micro-batch, every version of the
batch's distinct keys by ``WHERE nk IN (...)`` (MariaDB turns a list of 1,000 or more into a
table value constructor joined by ``ref`` on that index; SQLite searches the index per key),
the valid one picked in pandas. The per-tuple form ``WHERE (nk = k AND valid_from <= t AND
(t < valid_to OR valid_to IS NULL)) OR ...`` is not measured: MariaDB serves it by a range
scan of that index too (EXPLAIN: ``range``), but one batch of 10,000 took 3-11 s at R = 2M
rows (its EXPLAIN alone 1.2 s), under 3,500 tuples/s (BETWEEN, closed at both ends, would give two versions at the instant one ends and the next
starts).

Rates are the stream's tuples over the seconds each way took to serve all of them: for (a) and
(b) from the first step (the stream a backlog, fed as the buffer runs low, its feeding not
timed) to the last tuple's leaving, H_S's filling and the end-of-stream drain included, as
(c)'s and (d)'s every query is. The check: (a), (c) and (d) give the same multiset of (tuple, sk).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa

from ..core.asof import AsOf, pick_versions
from ..core.checks import check_number, check_positive
from ..core.errors import ConfigError
from ..core.joins import ALGORITHMS, StreamBuffer, create
from ..core.keys import normalize
from ..core.stores import DatabaseURL, open_store, redact
from ..core.stores.sql import write_table
from ..workloads.master import key_array
from ..workloads.zipf import zipf_rows
from .steady import Stopwatch, backlog_target

DEFAULT_ALGORITHMS = ("hybridjoin", "cachejoin")
MEAN_VERSIONS = 3  # versions per key, uniform 1-5
SPAN_S = 10 * 365 * 86_400  # the versions' valid_from lie in [0, SPAN_S) (epoch seconds)
GAP_SHARE = 0.2  # versions that end before the next one starts
BOUNDARY_SHARE = 0.05  # tuples whose event time is the instant a version starts
AS_OF = AsOf("t", "valid_from", "valid_to")
SELECT = ["sk", "valid_from", "valid_to"]


@dataclass
class AsOfBenchConfig:
    master: str
    rows: int = 2_000_000  # R's rows, about: rows / 3 keys of 1-5 versions
    stream_rows: int = 400_000
    batch_rows: int = 10_000  # tuples a micro-batch
    memory: int = 50 * 2**20
    zipf: float = 1.0
    algorithms: list[str] = field(default_factory=lambda: list(DEFAULT_ALGORITHMS))
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("rows", "stream_rows", "batch_rows", "memory"):
            check_positive(name, getattr(self, name), "a positive whole number", integer=True)
        if self.rows < MEAN_VERSIONS:
            raise ConfigError(f"rows: {self.rows} is fewer than {MEAN_VERSIONS}; expected at least one key's versions")
        check_number("zipf", self.zipf, "a Zipf exponent >= 0", minimum=0)
        self.algorithms = list(self.algorithms)
        for i, name in enumerate(self.algorithms):
            if name not in ALGORITHMS:
                raise ConfigError(f"algorithms[{i}]: {name!r} is not one of {sorted(ALGORITHMS)}")

    @property
    def keys(self) -> int:
        return self.rows // MEAN_VERSIONS


def type2_table(keys: int, seed: int) -> pa.Table:
    """R of ``keys`` natural keys (the bench's keys, :func:`key_array`), 1-5 versions each."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 6, keys)
    key_of = np.repeat(np.arange(keys, dtype=np.int64), counts)
    starts = rng.integers(0, SPAN_S, len(key_of))
    order = np.lexsort((starts, key_of))
    first = np.r_[True, key_of[1:] != key_of[:-1]]
    rank = np.arange(len(key_of)) - np.maximum.accumulate(np.where(first, np.arange(len(key_of)), 0))
    valid_from = starts[order] + rank  # strictly increasing within a key
    last = np.r_[key_of[1:] != key_of[:-1], True]
    following = np.r_[valid_from[1:], 0]
    gap = rng.random(len(key_of)) < GAP_SHARE
    valid_to = np.where(gap, following - (following - valid_from) // 4, following)
    return pa.table({"sk": pa.array(np.arange(1, len(key_of) + 1)), "nk": key_array(key_of, "int"),
                     "valid_from": pa.array(valid_from), "valid_to": pa.array(valid_to, mask=last)})


def asof_stream(config: AsOfBenchConfig, r: pa.Table) -> pa.Table:
    """``stream_rows`` tuples ``(tid, nk, t)``: Zipf keys, ``t`` uniform from the key's first
    version to the end of the span, or (a share :data:`BOUNDARY_SHARE`) the instant one of the
    key's versions starts - where the previous one ends unless there is a gap."""
    stream = zipf_rows(0, config.stream_rows, config.keys, exponent=config.zipf, shape="random", seed=config.seed)
    r_keys, starts, nk = r["nk"].to_numpy(), r["valid_from"].to_numpy(), stream["nk"].to_numpy()
    first = np.searchsorted(r_keys, nk)  # R is in (nk, valid_from) order
    versions = np.searchsorted(r_keys, nk, side="right") - first
    rng = np.random.default_rng(config.seed + 1)
    t = starts[first] + (rng.random(len(nk)) * (SPAN_S - starts[first])).astype(np.int64)
    on_a_start = rng.random(len(nk)) < BOUNDARY_SHARE
    t[on_a_start] = starts[first + (rng.random(len(nk)) * versions).astype(np.int64)][on_a_start]
    return pa.table({"tid": stream["tid"], "nk": stream["nk"], "t": pa.array(t)})


def write_type2(config: AsOfBenchConfig, r: pa.Table, out) -> str:
    """R in ``asof_r<rows>_s<seed>`` on ``master`` (reused when it holds R's row count)."""
    table = f"asof_r{config.rows}_s{config.seed}"
    db = DatabaseURL.parse(config.master)
    q = db.dialect.quote
    connection = db.connect()
    try:
        cursor = connection.cursor()
        try:
            cursor.execute(f"SELECT COUNT(*) FROM {q(table)}")
            reused = int(cursor.fetchone()[0]) == r.num_rows
        except Exception:  # no such table yet (the drivers' errors differ)
            connection.rollback()
            reused = False
        started = time.perf_counter()
        if not reused:
            write_table(connection, table, r, primary_key="sk")
            cursor.execute(f"CREATE INDEX {q('ix_' + table + '_nk_from')} ON {q(table)} ({q('nk')}, {q('valid_from')})")
            connection.commit()
        cursor.close()
    finally:
        connection.close()
    out(f"master {redact(config.master)} table {table}: {r.num_rows:,} rows, {config.keys:,} keys "
        f"({'reused' if reused else f'generated, {time.perf_counter() - started:.1f} s'})")
    return table


def run_engine(config: AsOfBenchConfig, table: str, name: str, stream: pa.Table, as_of: bool,
               clock=time.perf_counter) -> tuple[dict, np.ndarray, np.ndarray]:
    """``name`` on ``stream`` through the core engine, fed ``batch_rows`` at a time, with
    :func:`pick_versions` on each step's output when ``as_of``; its figures and the matched
    ``(tid, sk)`` of every tuple; the clock runs but while the stream is fed."""
    tids, times = stream["tid"].to_numpy(), stream["t"]
    with open_store(config.master, table, "nk", SELECT) as store:
        algorithm = create(name, store, config.memory, {})
        keys = normalize(stream["nk"], store.key_type).keys
        buffer = StreamBuffer(store.key_type, clock)
        watch = Stopwatch(clock)
        fed = done = 0
        matched, sks = [], []
        while done < len(tids):
            if fed < len(tids) and buffer.available < backlog_target(algorithm):
                store.wait_for_reads()
                with watch.stopped():
                    while fed < len(tids) and buffer.available < backlog_target(algorithm):
                        end = min(fed + config.batch_rows, len(tids))
                        buffer.append(tids[fed:end], keys[fed:end])
                        fed = end
                    if fed == len(tids):
                        buffer.close()  # the end of the stream: the rest is drained
            out = algorithm.step(buffer)
            if as_of:
                out = pick_versions(out, times.take(pa.array(out.matched_ids)), AS_OF)
            with watch.stopped():
                buffer.taken.clear()
                done += out.completed
                matched.append(out.matched_ids)
                sks.append(out.master["sk"].to_numpy(zero_copy_only=False))
        store.wait_for_reads()
        seconds = watch.read()
        peak = algorithm.stats()["structure_bytes_peak"]
    pairs = np.concatenate(matched), np.concatenate(sks)
    return ({"algorithm": name, "lookup": "as-of" if as_of else "equality", "tuples_per_s": _round(done / seconds),
             "tuples": done, "seconds": round(seconds, 6), "structure_bytes_peak": peak,
             "memory_ok": peak <= config.memory, "matched_pairs": len(pairs[0]),
             "matched_tuples": len(np.unique(pairs[0]))}, *pairs)


ON_VALID = "r.nk = s.nk AND r.valid_from <= s.t AND (s.t < r.valid_to OR r.valid_to IS NULL)"


def run_sql(config: AsOfBenchConfig, table: str, stream: pa.Table, clock=time.perf_counter):
    """The user's alternative: per micro-batch of ``batch_rows`` tuples, one query joining R
    with the batch's ``(tid, nk, t)`` (a table value constructor) as of ``t``."""
    return _per_batch(config, table, stream, "sql", "as-of, one query a micro-batch", _values_join, clock)


def run_inlist(config: AsOfBenchConfig, table: str, stream: pa.Table, clock=time.perf_counter):
    """The other alternative a user writes: per micro-batch, every version of the batch's
    distinct keys by ``WHERE nk IN (...)`` (served from the ``(nk, valid_from)`` index), the
    valid one picked in pandas (merge on ``nk``, keep ``valid_from <= t < valid_to``)."""
    return _per_batch(config, table, stream, "inlist", "as-of, IN list + pandas pick", _inlist_pick, clock)


def _values_join(cursor, r: str, tid: np.ndarray, nk: np.ndarray, t: np.ndarray) -> list[tuple]:
    values = ",".join(f"({a},{b},{c})" for a, b, c in zip(tid.tolist(), nk.tolist(), t.tolist()))  # int64s: literals are safe
    cursor.execute(f"WITH s(tid, nk, t) AS (VALUES {values}) SELECT s.tid, r.sk FROM s JOIN {r} r ON {ON_VALID}")
    return cursor.fetchall()


def _inlist_pick(cursor, r: str, tid: np.ndarray, nk: np.ndarray, t: np.ndarray) -> list[tuple]:
    cursor.execute(f"SELECT nk, sk, valid_from, valid_to FROM {r} WHERE nk IN ({','.join(map(str, set(nk.tolist())))})")
    versions = pd.DataFrame(cursor.fetchall(), columns=["nk", "sk", "valid_from", "valid_to"])
    pairs = pd.DataFrame({"tid": tid, "nk": nk, "t": t}).merge(versions, on="nk")
    valid = (pairs.valid_from <= pairs.t) & (pairs.valid_to.isna() | (pairs.t < pairs.valid_to))
    return list(zip(pairs.tid[valid].tolist(), pairs.sk[valid].tolist()))


def _per_batch(config: AsOfBenchConfig, table: str, stream: pa.Table, name: str, lookup: str, query, clock):
    """One ``query(cursor, R, tid, nk, t)`` a micro-batch of ``batch_rows`` tuples, each giving
    ``(tid, sk)`` rows; its figures and the pairs. The clock runs from the first query to the
    last pair."""
    db = DatabaseURL.parse(config.master)
    columns = [stream[c].to_numpy() for c in ("tid", "nk", "t")]
    tids, sks = [], []
    connection = db.connect()
    try:
        cursor = connection.cursor()
        started = clock()
        for begin in range(0, stream.num_rows, config.batch_rows):
            for tid, sk in query(cursor, db.dialect.quote(table), *(c[begin:begin + config.batch_rows] for c in columns)):
                tids.append(tid)
                sks.append(sk)
        seconds = clock() - started
        cursor.close()
    finally:
        connection.close()
    tid_array = np.asarray(tids, np.int64)
    return ({"algorithm": name, "lookup": lookup, "tuples_per_s": _round(stream.num_rows / seconds),
             "tuples": stream.num_rows, "seconds": round(seconds, 6), "matched_pairs": len(tid_array),
             "matched_tuples": len(np.unique(tid_array))}, tid_array, np.asarray(sks, np.int64))


def same_pairs(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> bool:
    """Whether two ``(tids, sks)`` are the same multiset of pairs."""
    def ordered(tids, sks):
        order = np.lexsort((sks, tids))
        return tids[order], sks[order]
    (ta, sa), (tb, sb) = ordered(*a), ordered(*b)
    return len(ta) == len(tb) and bool(np.array_equal(ta, tb) and np.array_equal(sa, sb))


def run_asof_bench(config: AsOfBenchConfig, out=print) -> dict:
    r = type2_table(config.keys, config.seed)
    table = write_type2(config, r, out)
    stream = asof_stream(config, r)
    sql, *sql_pairs = run_sql(config, table, stream)
    inlist, *inlist_pairs = run_inlist(config, table, stream)
    results, checks = [], {"inlist": same_pairs(tuple(inlist_pairs), tuple(sql_pairs))}
    for name in config.algorithms:
        as_of, *pairs = run_engine(config, table, name, stream, True)
        equality, *_ = run_engine(config, table, name, stream, False)
        checks[name] = same_pairs(tuple(pairs), tuple(sql_pairs))
        for row in (as_of, equality):
            row["x_equality"] = _ratio(row["tuples_per_s"], equality["tuples_per_s"])
            results.append(row)
    sql["x_equality"] = inlist["x_equality"] = None
    results += [sql, inlist]
    for row in results:
        row["x_sql"] = _ratio(row["tuples_per_s"], sql["tuples_per_s"])
        row["x_inlist"] = _ratio(row["tuples_per_s"], inlist["tuples_per_s"])
    out("")
    out(f"as-of lookups: R = {r.num_rows:,} rows of {config.keys:,} keys (1-5 versions), stream {config.stream_rows:,} "
        f"tuples Zipf({config.zipf:g}), micro-batch {config.batch_rows:,}, memory {config.memory / 2**20:g} MiB "
        f"({redact(config.master)})")
    out(f"{'algorithm':<11} {'lookup':<31} {'tuples/s':>11} {'x equality':>10} {'x sql':>7} {'x inlist':>8} "
        f"{'pairs':>10} {'peak MiB':>8}")
    for row in results:
        peak = f"{row['structure_bytes_peak'] / 2**20:.1f}" if "structure_bytes_peak" in row else "-"
        out(f"{row['algorithm']:<11} {row['lookup']:<31} {_tps(row['tuples_per_s']):>11} "
            f"{_ratio_text(row['x_equality']):>10} {_ratio_text(row['x_sql']):>7} {_ratio_text(row['x_inlist']):>8} "
            f"{row['matched_pairs']:>10,} {peak:>8}")
    for name, same in checks.items():
        out(f"{name}{'' if name == 'inlist' else ' as-of'} and sql: {'the same' if same else 'NOT the same'} "
            "multiset of (tuple, sk)")
    return {"config": {**config.__dict__, "master": redact(config.master)}, "table": table, "r_rows": r.num_rows,
            "keys": config.keys, "results": results, "same_as_sql": checks}


def _round(value):
    return round(value, 1) if value is not None else None


def _ratio(value, base):
    return round(value / base, 3) if value and base else None


def _ratio_text(value) -> str:
    return f"{value:.2f}" if value is not None else "-"


def _tps(value) -> str:
    return f"{value:,.0f}" if value is not None else "-"
