"""``semijoin bench``: service rate of every algorithm on the same data, in one run.

The papers' method (HYBRIDJOIN sec. 6.1): the stream is always available (a backlog), each
algorithm runs for a warm-up and is measured over a window after it; the service rate is the
number of stream tuples completed per second in the window. Here the clock only runs while the
algorithm steps: producing the benchmark stream is not charged to the join. Every algorithm
gets the same master table, the same stream (same seed) and the same memory budget, and its
peak structure bytes are checked against the budget. Machines are shared and noisy: compare
the algorithms through the ratios of one run, not with figures from another run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .core.errors import ConfigError
from .core.joins import ALGORITHMS, StreamBuffer, create
from .core.keys import normalize
from .core.metrics import latency_ms
from .core.stores import open_store, redact
from .workloads import generate_master, zipf_stream_chunks

SHAPES = ("noperm", "random")
CHUNK_ROWS = 100_000


@dataclass
class BenchConfig:
    master: str
    rows: int = 2_000_000
    memory: int = 50 * 2**20
    zipf: float = 1.0
    shapes: list[str] | None = None
    algorithms: list[str] | None = None
    warmup_s: float = 10.0
    window_s: float = 20.0
    params: dict = field(default_factory=dict)  # "algorithm.param" -> value
    seed: int = 0

    def __post_init__(self) -> None:
        self.shapes = list(self.shapes or SHAPES)
        self.algorithms = list(self.algorithms or ALGORITHMS)
        for i, shape in enumerate(self.shapes):
            if shape not in SHAPES:
                raise ConfigError(f"shapes[{i}]: {shape!r} is not one of {list(SHAPES)}")
        for i, name in enumerate(self.algorithms):
            if name not in ALGORITHMS:
                raise ConfigError(f"algorithms[{i}]: {name!r} is not one of {sorted(ALGORITHMS)}")
        for key in self.params:
            algorithm, dot, _ = key.partition(".")
            if not dot or algorithm not in ALGORITHMS:
                raise ConfigError(f"--set {key}: expected ALGORITHM.NAME=VALUE with ALGORITHM one of {sorted(ALGORITHMS)}")
        if self.warmup_s < 0 or self.window_s <= 0:
            raise ConfigError(f"window: warm-up {self.warmup_s} s and window {self.window_s} s must be >= 0 and > 0")

    def params_for(self, algorithm: str) -> dict:
        prefix = algorithm + "."
        return {k[len(prefix):]: v for k, v in self.params.items() if k.startswith(prefix)}


def _backlog_target(algorithm) -> int:
    """Tuples the buffer should hold so the algorithm never waits for input (a cache
    front-stage probes more tuples than its disk phase takes: twice the demand)."""
    return 2 * algorithm.demand + CHUNK_ROWS


def measure(config: BenchConfig, table: str, algorithm_name: str, shape: str, clock=time.perf_counter) -> dict:
    """Run one algorithm on one stream shape; the service rate over the window after the warm-up."""
    with open_store(config.master, table, "nk") as store:
        algorithm = create(algorithm_name, store, config.memory, config.params_for(algorithm_name))
        chunks = zipf_stream_chunks(CHUNK_ROWS, config.rows, exponent=config.zipf, shape=shape, seed=config.seed)
        buffer = StreamBuffer(store.key_type, clock)
        entered = np.zeros(0)
        fed = 0
        joined_s = window_s = 0.0
        window_done = 0
        processing: list[np.ndarray] = []
        io_start = None
        while joined_s < config.warmup_s + config.window_s:
            while buffer.available < _backlog_target(algorithm):
                chunk = next(chunks)
                keys = normalize(chunk["nk"], store.key_type)
                buffer.append(chunk["tid"].to_numpy(), keys.keys)
                fed += chunk.num_rows
            if len(entered) < fed:
                entered = np.concatenate([entered, np.zeros(fed - len(entered))])
            t0 = clock()
            out = algorithm.step(buffer)
            step_s = clock() - t0
            for ids, _ in buffer.taken:
                entered[ids] = joined_s
            buffer.taken.clear()
            joined_s += step_s
            if joined_s > config.warmup_s:
                if io_start is None:
                    io_start = dict(store.counters.as_dict(), loads=algorithm.counters.loads)
                window_done += out.completed
                window_s += step_s
                done = np.concatenate([np.unique(out.matched_ids), out.unmatched_ids])
                processing.append(joined_s - entered[done])
        io_end = dict(store.counters.as_dict(), loads=algorithm.counters.loads)
        stats = algorithm.stats()
    io_start = io_start or io_end
    queries = io_end["disk_queries"] - io_start["disk_queries"]
    rows = io_end["disk_rows"] - io_start["disk_rows"]
    latency = latency_ms(np.concatenate(processing) if processing else np.zeros(0))
    return {
        "algorithm": algorithm_name,
        "shape": shape,
        "service_rate_tps": round(window_done / window_s, 1) if window_s else 0.0,
        "window_s": round(window_s, 3),
        "tuples_in_window": int(window_done),
        "disk_queries_per_s": round(queries / window_s, 1) if window_s else 0.0,
        "rows_per_query": round(rows / queries, 1) if queries else 0.0,
        "disk_time_share": round((io_end["disk_s"] - io_start["disk_s"]) / window_s, 3) if window_s else 0.0,
        "processing_ms_p50": latency["p50"],
        "processing_ms_p99": latency["p99"],
        "structure_bytes_peak": stats["structure_bytes_peak"],
        "memory_budget_bytes": config.memory,
        "memory_ok": stats["structure_bytes_peak"] <= config.memory,
        "memory_split": stats["memory_split"],
        "cache_hit_ratio": stats.get("cache_hit_ratio"),
        "extra": {k: v for k, v in stats.items() if k in ("pq_loads", "starvation_loads", "threshold_now", "cache_admissions")},
    }


def format_table(results: list[dict]) -> list[str]:
    lines = [
        f"{'shape':<7} {'algorithm':<14} {'tuples/s':>11} {'x INLJ':>8} {'x IN-list':>9} {'queries/s':>9} "
        f"{'rows/query':>10} {'disk share':>10} {'p50 ms':>9} {'p99 ms':>9} {'peak MiB':>8} {'mem ok':>6}"
    ]
    for shape in dict.fromkeys(r["shape"] for r in results):
        rows = [r for r in results if r["shape"] == shape]
        base = {r["algorithm"]: r["service_rate_tps"] for r in rows}
        for r in rows:
            def ratio(name):
                return f"{r['service_rate_tps'] / base[name]:.1f}" if base.get(name) else "-"
            lines.append(
                f"{shape:<7} {r['algorithm']:<14} {r['service_rate_tps']:>11,.0f} {ratio('inlj'):>8} {ratio('inlist'):>9} "
                f"{r['disk_queries_per_s']:>9,.0f} {r['rows_per_query']:>10,.0f} {r['disk_time_share']:>10.0%} "
                f"{r['processing_ms_p50'] or 0:>9,.1f} {r['processing_ms_p99'] or 0:>9,.1f} "
                f"{r['structure_bytes_peak'] / 2**20:>8.1f} {'yes' if r['memory_ok'] else 'NO':>6}"
            )
    return lines


def run_bench(config: BenchConfig, out=print) -> dict:
    table = f"bench_r{config.rows}"
    started = time.perf_counter()
    info = generate_master(config.master, table, config.rows, seed=0)
    out(f"master {redact(config.master)} table {table}: {config.rows:,} rows "
        f"({'reused' if info['reused'] else 'generated'}, {time.perf_counter() - started:.1f} s)")
    results = []
    for shape in config.shapes:
        for name in config.algorithms:
            r = measure(config, table, name, shape)
            out(f"  {shape:<7} {name:<14} {r['service_rate_tps']:>11,.0f} tuples/s")
            results.append(r)
    out("")
    out(f"service rate, Zipf {config.zipf}, memory {config.memory / 2**20:.0f} MiB, R = {config.rows:,} rows, "
        f"window {config.window_s:.0f} s after {config.warmup_s:.0f} s warm-up")
    for line in format_table(results):
        out(line)
    return {
        "config": {**config.__dict__, "master": redact(config.master)},
        "results": results,
    }
