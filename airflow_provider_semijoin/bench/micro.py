"""``semijoin bench --micro``: the cache-hit path alone, on one core (issue 12).

A skewed stream is served mostly from H_R, the tuple-level cache of the front-stage joins (SSJ,
CMESHJOIN sec. 3.1, CACHEJOIN): a stream tuple whose key is cached is matched by a probe of
H_R and a take of its cached rows, without the disk stage. This times that path alone, with no
database and no I/O, on one core (Arrow's thread pool set to one thread; numpy's work here is
single-threaded), for batches of several sizes:

* ``h_r``: :meth:`MasterCache.probe` + :meth:`MasterCache.rows` of a batch whose keys are all
  cached: the probe (``searchsorted`` on the sorted keys, the frequency recorder) and the take;
* ``cachejoin``: the front stage as the engine runs it, :meth:`JoinAlgorithm.step` of CACHEJOIN
  over a stream buffer holding the batch, every key cached (its probe rounds, the stream
  buffer, the output assembled);
* what a user would write instead, on the same one thread: ``pandas-index``, a hash index of the
  cached keys built once (``pandas.Index``) and ``get_indexer`` + take per batch (the strongest
  simple alternative: hashing beats H_R's ``searchsorted``, the take is the same), and
  ``arrow-join``, Arrow's hash join (``Table.join``) of the batch with the cached rows, which
  builds its hash table anew for every batch.

Each figure is the best of ``repeat`` runs (the machine is shared: the best is the least
disturbed), in stream tuples per second, with CACHEJOIN's ratio to the pandas index.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from ..core.errors import ConfigError
from ..core.joins.base import StreamBuffer
from ..core.joins.master_cache import MasterCache
from ..core.joins.registry import create
from ..core.keys import KeyType
from ..core.stores.memory import MemoryStore
from ..workloads import master_table
from ..workloads.zipf import zipf_rows

PATHS = ("h_r", "cachejoin", "pandas-index", "arrow-join")
INNER_BYTES = 16 << 20  # the disk stage behind H_R (idle here: every key is cached)
TARGET_TPS = 2_000_000  # issue 12: the cache-hit path runs at >= 2M tuples/s on one core


@dataclass
class MicroConfig:
    cache_keys: int = 200_000
    batches: tuple = (10_000, 100_000, 1_000_000)
    zipf: float = 1.0
    repeat: int = 5
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.cache_keys, int) or self.cache_keys < 1:
            raise ConfigError(f"cache_keys: {self.cache_keys!r} is not a number of cached keys >= 1")
        self.batches = tuple(self.batches)
        if not self.batches or not all(isinstance(b, int) and b >= 1 for b in self.batches):
            raise ConfigError(f"batches: {self.batches!r} are not stream batch sizes >= 1")
        if not isinstance(self.repeat, int) or self.repeat < 1:
            raise ConfigError(f"repeat: {self.repeat!r} is not a number of runs >= 1")


def _best_of(repeat: int, run) -> float:
    """The shortest of ``repeat`` runs of ``run()`` in seconds (each run checked by ``run`` itself)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


class HitPath:
    """R of ``cache_keys`` rows, every one of them in the H_R of a CACHEJOIN."""

    def __init__(self, config: MicroConfig):
        rows = master_table(config.cache_keys, seed=config.seed)
        order = np.argsort(rows["nk"].to_numpy())
        rows = rows.take(order)
        self.keys = rows["nk"].to_numpy()
        store = MemoryStore(self.keys, rows.drop_columns(["nk"]), KeyType("int"), (1e-3, 1e-7))
        cache_bytes = config.cache_keys * MasterCache.bytes_per_key(8, 1, store.row_bytes(store.page_map()))
        self.join = create("cachejoin", store, int(cache_bytes) + INNER_BYTES,
                           {"cache_keys": config.cache_keys, "threshold": 1, "adaptive": 0})
        self.cached = rows.select(["nk", *self.join.schema.names])
        self.join.cache.admit(self.keys, np.full(len(self.keys), 1e9), self.cached.select(self.join.schema.names),
                              np.ones(len(self.keys), np.int32))
        self.index = pd.Index(self.keys)  # built once, as a user's cache would be
        self.index.get_indexer(self.keys[:1])  # (pandas builds its hash table on first use)
        self.stream = zipf_rows(0, max(config.batches), config.cache_keys, exponent=config.zipf, shape="noperm",
                                missing=0.0, seed=config.seed + 1)["nk"].to_numpy()

    def h_r(self, keys: np.ndarray) -> None:
        hit, _, log_rows = self.join.cache.probe(keys)
        matched = self.join.cache.rows(log_rows)
        if not hit.all() or matched.num_rows != len(keys):
            raise AssertionError(f"h_r: {int(hit.sum())} of {len(keys)} keys hit, {matched.num_rows} rows taken")

    def cachejoin(self, keys: np.ndarray) -> None:
        buffer = StreamBuffer(self.join.store.key_type)
        buffer.append(np.arange(len(keys)), keys)
        buffer.close()
        matched = 0
        while not (buffer.exhausted and self.join.pending == 0):
            matched += len(self.join.step(buffer).matched_ids)
        if matched != len(keys):
            raise AssertionError(f"cachejoin: {matched} of {len(keys)} tuples matched")

    def pandas_index(self, keys: np.ndarray) -> None:
        at = self.index.get_indexer(keys)
        if (at < 0).any():
            raise AssertionError(f"pandas-index: {int((at >= 0).sum())} of {len(keys)} keys found")
        self.cached.take(at)

    def arrow_join(self, keys: np.ndarray) -> None:
        joined = pa.table({"nk": keys}).join(self.cached, "nk", join_type="inner", use_threads=False)
        if joined.num_rows != len(keys):
            raise AssertionError(f"arrow-join: {joined.num_rows} of {len(keys)} tuples matched")


def run_micro(config: MicroConfig, out=print) -> dict:
    threads = pa.cpu_count()
    pa.set_cpu_count(1)
    try:
        path = HitPath(config)
        results = []
        for batch in config.batches:
            keys = path.stream[:batch]
            row = {"batch": batch}
            for name, run in (("h_r", path.h_r), ("cachejoin", path.cachejoin), ("pandas-index", path.pandas_index),
                              ("arrow-join", path.arrow_join)):
                row[name] = batch / _best_of(config.repeat, lambda: run(keys))
            results.append(row)
    finally:
        pa.set_cpu_count(threads)
    out(f"cache-hit path on one core, stream tuples/s: H_R of {config.cache_keys:,} keys, every stream key cached, Zipf {config.zipf}, "
        f"best of {config.repeat}")
    for line in format_micro(results):
        out(line)
    return {"config": {**config.__dict__, "batches": list(config.batches)}, "target_tps": TARGET_TPS, "results": results}


def format_micro(results: list[dict]) -> list[str]:
    lines = [f"{'batch':>10} " + " ".join(f"{p:>13}" for p in PATHS) + f" {'cachejoin / pandas-index':>25}"]
    for r in results:
        cells = " ".join(f"{r[p]:>13,.0f}" for p in PATHS)
        lines.append(f"{r['batch']:>10,} {cells} {r['cachejoin'] / r['pandas-index']:>24.2f}x")
    return lines
