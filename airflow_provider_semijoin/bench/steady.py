"""``semijoin bench``: service rate of every algorithm on the same data, in one run.

The papers' method (HYBRIDJOIN sec. 6.1): the stream is always available (a backlog), each
algorithm runs for a warm-up and is measured over a window after it; the service rate is the
number of stream tuples completed per second in the window. Here the clock stops only while the
benchmark stream is produced, which is not charged to the join; the reads an algorithm handed
ahead (HYBRIDJOIN's ``read_ahead``) finish before it stops, their wait counted, and run on
beside the steps as in a real run. Waiting for them after every step, as this bench did
before, took the overlap away and understated HYBRIDJOIN (``docs/measurements.md``). Every algorithm
gets the same master table, the same stream (same seed) and the same memory budget, and its
peak structure bytes are checked against the budget. Machines are shared and noisy: compare
the algorithms through the ratios of one run, not with figures from another run.

Next to each measured service rate stands the one its cost model predicts
(:func:`.core.prediction.explain`) for the memory split the algorithm chose, with unit costs
measured on this machine at the start of the run (:func:`.core.calibration.calibrate`) and the
S and T of the store the algorithm ran on.

This module measures one algorithm on one stream (:func:`measure`); :mod:`.suite` runs the
command over every algorithm and shape, with the opt-in experiments of :mod:`.sweep` (the cache
size) and :mod:`.ssij_experiments` (SSIJ paper sec. VI); :mod:`.server` looks into the database
server (its buffer pool, its own index join).
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..core.calibration import calibrate
from ..core.unitcosts import ComponentCosts
from ..core.checks import check_number
from ..core.prediction import explain
from ..core.errors import ConfigError
from ..core.joins import ALGORITHMS, StreamBuffer, create
from ..core.keys import normalize, sorted_distinct
from ..core.metrics import latency_ms
from ..core.stores import DatabaseURL, open_store, redact
from ..core.stores.sql import MYSQL
from ..workloads import generate_master, temporal_stream_chunks, zipf_stream_chunks
from ..workloads.zipf import RANDOM_SHAPE_SEED
from .server import server_cache, server_cache_line

VARIANT = re.compile(r"[a-z0-9_-]+")  # the LABEL of NAME@LABEL: a variant of an algorithm with its own --set
MODEL_SHAPES = ("noperm", "random")  # Zipf over all of R: what the cost models describe
SHAPES = MODEL_SHAPES + ("temporal",)  # + the SSIJ paper's temporal-locality stream
CHUNK_ROWS = 100_000


def registered(name: str) -> str:
    """The registry name of ``name``: NAME of a variant NAME@LABEL, ``name`` itself otherwise."""
    return name.partition("@")[0]


def check_registry_names(names: list[str]) -> None:
    """For the bench that runs registry names only (``--spark``): each of ``names`` is one, and
    a variant NAME@LABEL is refused as one."""
    for i, name in enumerate(names):
        if name in ALGORITHMS:
            continue
        if "@" in name and registered(name) in ALGORITHMS:
            raise ConfigError(f"algorithms[{i}]: {name!r} is a variant, which the steady-state and cold benches "
                              f"measure, not this one; expected one of {sorted(ALGORITHMS)}")
        raise ConfigError(f"algorithms[{i}]: {name!r} is not one of {sorted(ALGORITHMS)}")


def check_algorithms(names: list[str], params: dict) -> None:
    """``names``: registry names or variants NAME@LABEL, none twice; ``params``' keys
    ALGORITHM.NAME (--set) with ALGORITHM a registry name or a variant of one."""
    for i, name in enumerate(names):
        base, at, label = name.partition("@")
        if base not in ALGORITHMS:
            raise ConfigError(f"algorithms[{i}]: {base!r} is not one of {sorted(ALGORITHMS)}")
        if at and not VARIANT.fullmatch(label):
            raise ConfigError(f"algorithms[{i}]: {name!r}: a variant is NAME@LABEL with LABEL of a-z, 0-9, _ and -")
    if len(set(names)) < len(names):
        raise ConfigError(f"algorithms: {names} names one twice (a variant needs a label of its own)")
    for key in params:
        algorithm, dot, _ = key.partition(".")
        if not dot or registered(algorithm) not in ALGORITHMS:
            raise ConfigError(f"--set {key}: expected ALGORITHM.NAME=VALUE with ALGORITHM one of {sorted(ALGORITHMS)} "
                              "(or a variant of one, NAME@LABEL)")


def params_of(params: dict, algorithm: str) -> dict:
    """The --set ``params`` of ``algorithm``; a variant NAME@LABEL has NAME's, then its own."""
    names = dict.fromkeys([registered(algorithm), algorithm])
    return {k[len(name) + 1:]: v for name in names for k, v in params.items() if k.startswith(name + ".")}


@dataclass
class Workload:
    """What a bench of the algorithms runs, the steady-state one (:class:`BenchConfig`) and the
    cold one (:class:`.cold.ColdConfig`): R of ``rows`` rows at ``master``, Zipf(``zipf``) streams
    of ``shapes``, each algorithm in ``memory`` bytes."""

    master: str
    rows: int = 2_000_000
    memory: int = 50 * 2**20
    zipf: float = 1.0
    shapes: list[str] | None = None
    algorithms: list[str] | None = None  # registry names, or NAME@LABEL: NAME again with the --set of NAME@LABEL too
    params: dict = field(default_factory=dict)  # "algorithm.param" -> value, --set
    seed: int = 0
    allowed_shapes: ClassVar[tuple[str, ...]] = SHAPES

    def __post_init__(self) -> None:
        self.shapes = list(self.shapes or MODEL_SHAPES)
        self.algorithms = list(self.algorithms or ALGORITHMS)
        for i, shape in enumerate(self.shapes):
            if shape not in self.allowed_shapes:
                raise ConfigError(f"shapes[{i}]: {shape!r} is not one of {list(self.allowed_shapes)}")
        check_algorithms(self.algorithms, self.params)

    def params_for(self, algorithm: str) -> dict:
        """The --set parameters of ``algorithm`` (:func:`params_of`)."""
        return params_of(self.params, algorithm)


@dataclass
class BenchConfig(Workload):
    warmup_s: float = 10.0
    window_s: float = 20.0
    warmup_turnovers: float = 2.0  # the warm-up also lasts until the tuples held turned over this often
    warmup_max_s: float = 120.0  # ... but no longer than this (the result says when it stopped short)
    sweep_cache: list[float] | None = None  # shares of the memory for H_R, per cache algorithm
    io_samples: int = 8  # S and T of the predictions from loads at random places of R; 0: the store's
    temporal_interval: int = 1_000_000  # tuples per interval of the temporal-locality stream
    temporal_fraction: float = 0.05  # share of R's keys one interval draws from
    ssij_policies: bool = False  # SSIJ's cache policy against LRU (Figure 11)
    sweep_max_scan: list[int] | None = None  # maxScan values SSIJ is measured at (Figure 15)
    dbms_join: bool = False  # the DBMS's own index join of a stream chunk with R (Figure 9)
    dbms_chunk: int = 1_000_000  # stream tuples the DBMS joins in one statement

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.warmup_s < 0 or self.window_s <= 0:
            raise ConfigError(f"window: warm-up {self.warmup_s} s and window {self.window_s} s must be >= 0 and > 0")
        check_number("warmup_turnovers", self.warmup_turnovers, "a number of turnovers >= 0", minimum=0)
        check_number("warmup_max_s", self.warmup_max_s, f"seconds >= the warm-up's {self.warmup_s:g}",
                     minimum=self.warmup_s)
        self.sweep_cache = list(self.sweep_cache or [])
        for i, share in enumerate(self.sweep_cache):
            check_number(f"sweep_cache[{i}]", share, "a share of the memory in (0, 1)", above=0, below=1)
        check_number("io_samples", self.io_samples, "a whole number >= 0", integer=True, minimum=0)
        self.sweep_max_scan = list(self.sweep_max_scan or [])
        for i, value in enumerate(self.sweep_max_scan):
            check_number(f"sweep_max_scan[{i}]", value, "a number of pages >= 1", integer=True, minimum=1)
        for name in ("temporal_interval", "dbms_chunk"):
            value = getattr(self, name)
            check_number(name, value, "a whole number >= 1", integer=True, minimum=1)
        if not 0 < self.temporal_fraction <= 1:
            raise ConfigError(f"temporal_fraction: {self.temporal_fraction!r} is not a share of R's keys in (0, 1]")
        if self.dbms_join and DatabaseURL.parse(self.master).dialect is not MYSQL:
            raise ConfigError(f"dbms_join: the comparison runs inside MySQL/MariaDB; {redact(self.master)!r} is not one")


def stream_chunks(config: BenchConfig, shape: str):
    """The benchmark stream of ``shape``: Zipf over R (noperm, random) or temporal locality."""
    if shape == "temporal":
        return temporal_stream_chunks(CHUNK_ROWS, config.rows, interval_tuples=config.temporal_interval,
                                      fraction=config.temporal_fraction, exponent=config.zipf, seed=config.seed)
    return zipf_stream_chunks(CHUNK_ROWS, config.rows, exponent=config.zipf, shape=shape, seed=config.seed)


def backlog_target(algorithm) -> int:
    """Tuples the buffer should hold so the algorithm never waits for input (a cache
    front-stage probes more tuples than its disk phase takes: twice the demand)."""
    return 2 * algorithm.demand + CHUNK_ROWS


def measure(config: BenchConfig, table: str, algorithm_name: str, shape: str, clock=time.perf_counter, *,
            costs: ComponentCosts | None = None, params: dict | None = None, cpu_clock=time.thread_time) -> dict:
    """Run one algorithm (or a variant of one, ``NAME@LABEL``: :class:`BenchConfig`) on one
    stream shape; the service rate over the window after the warm-up, and the one its cost model
    predicts (``costs``: the unit costs, calibrated here if None). ``params`` add to (or
    override) the algorithm's parameters of ``config``.

    The warm-up lasts ``warmup_s`` of joining and until the tuples the algorithm holds turned
    over ``warmup_turnovers`` times (:meth:`JoinAlgorithm.turnovers`), at most ``warmup_max_s``:
    a window opened by the clock alone measured H_S filling, and a cache front-stage before its
    H_R learned the hot keys (its hit ratio, and so its rate, still rising). Warm-up and window
    end with a cycle (:func:`_window_over`): a window cut anywhere in SSIJ's cycles measured
    part of a cycle's phases, and its rate scattered far from the whole cycles' (the figures:
    ``docs/measurements.md``)."""
    base = registered(algorithm_name)
    with open_store(config.master, table, "nk") as store:
        algorithm = create(base, store, config.memory, {**config.params_for(algorithm_name), **(params or {})})
        costs = store_costs(config, store, costs)
        model = explain(base, algorithm, costs, config.rows, config.zipf, shape,
                        shape_seed=RANDOM_SHAPE_SEED) if shape in MODEL_SHAPES else None
        chunks = stream_chunks(config, shape)
        buffer = StreamBuffer(store.key_type, clock)
        joined = Stopwatch(clock)
        joined_s = 0.0
        warm_s = None  # joined seconds when the warm-up ended
        window = Window()
        sample = ProcessingSample()
        io_start = None
        while warm_s is None or not _window_over(config, algorithm, joined_s - warm_s):
            if buffer.available < backlog_target(algorithm):
                top_up(buffer, algorithm, store, joined, lambda: next(chunks))
            before, cpu_before = joined.read(), cpu_clock()
            out = algorithm.step(buffer)
            cpu_s = cpu_clock() - cpu_before
            now = joined.read()
            with joined.stopped():  # the bench's own bookkeeping, not the join's
                for ids, _ in buffer.taken:
                    sample.took(ids, before)
                buffer.taken.clear()
            step_s, joined_s = now - joined_s, now  # the step and the loop's checks since the last one
            if warm_s is None:
                if _warmed_up(config, algorithm, joined_s):
                    warm_s, turnovers = joined_s, algorithm.turnovers()
                    io_start = dict(store.counters.as_dict(), loads=algorithm.counters.loads)
                continue
            window.add(out.completed, step_s, algorithm.cycle_ended, cpu_s)
            with joined.stopped():
                sample.left(out.matched_ids, out.unmatched_ids, joined_s)
        io_end = dict(store.counters.as_dict(), loads=algorithm.counters.loads)
        stats = algorithm.stats()
    queries = io_end["disk_queries"] - io_start["disk_queries"]
    rows = io_end["disk_rows"] - io_start["disk_rows"]
    latency = latency_ms(sample.processing_seconds())
    rate = round(window.tuples / window.seconds, 1) if window.seconds else 0.0
    return {
        "algorithm": algorithm_name,
        "shape": shape,
        "service_rate_tps": rate,
        **_prediction_fields(model, rate, stats.get("cache_hit_ratio"), base, costs, config, shape, stats,
                             window),
        "warmup_s": round(warm_s, 3),
        "warmup_turnovers": round(turnovers, 2),
        "window_s": round(window.seconds, 3),
        "window_cycles": window.cycles,
        "tuples_in_window": int(window.tuples),
        "disk_queries_per_s": round(queries / window.seconds, 1) if window.seconds else 0.0,
        "rows_per_query": round(rows / queries, 1) if queries else 0.0,
        "disk_time_share": round((io_end["disk_s"] - io_start["disk_s"]) / window.seconds, 3) if window.seconds else 0.0,
        "processing_ms_p50": latency["p50"],
        "processing_ms_p99": latency["p99"],
        "structure_bytes_peak": stats["structure_bytes_peak"],
        "memory_budget_bytes": config.memory,
        "memory_ok": stats["structure_bytes_peak"] <= config.memory,
        "memory_split": stats["memory_split"],
        "settings": stats["settings"],
        "cache_hit_ratio": stats.get("cache_hit_ratio"),
        "extra": {k: v for k, v in stats.items() if k in EXTRA_STATS},
    }


class ProcessingSample:
    """The processing time of the tuples that left in the window, from a uniform sample of them
    kept in bounded memory: the joined seconds from the start of the step that took a tuple in to
    the end of the step it left in (a tuple with several matches counted once).

    Every tuple whose id is a multiple of :attr:`stride` is kept - its take while the run goes on,
    its leaving in the window - and the stride doubles (keeping the multiples of the new one)
    whenever more than ``most`` takes or leavings are kept: a run of an algorithm that serves
    millions of tuples a second from its cache (SSIJ with all of R cached, for a warm-up of up to
    ``warmup_max_s``) held 8 bytes and more of every tuple it ever took and ran out of memory. The
    times are worked out after the run: done per step inside the loop, they were timed with the
    steps and charged to the join (``docs/measurements.md``)."""

    def __init__(self, most: int = 1 << 21):
        self.most = most
        self.stride = 1
        self._taken: list[tuple[np.ndarray, np.ndarray]] = []  # (tuple ids, joined seconds of their take)
        self._left: list[tuple[np.ndarray, np.ndarray]] = []  # (tuple ids, joined seconds of their leaving)
        self._kept = [0, 0]  # ids held in _taken, in _left

    def took(self, ids: np.ndarray, seconds: float) -> None:
        self._keep(self._taken, 0, ids, seconds)

    def left(self, matched: np.ndarray, unmatched: np.ndarray, seconds: float) -> None:
        self._keep(self._left, 1, np.concatenate([sorted_distinct(matched), unmatched]), seconds)

    def processing_seconds(self) -> np.ndarray:
        """Each sampled tuple that left in the window: its processing seconds."""
        if not self._left:
            return np.zeros(0)
        taken_ids, taken_at = (np.concatenate(column) for column in zip(*self._taken))
        left_ids, left_at = (np.concatenate(column) for column in zip(*self._left))
        order = np.argsort(taken_ids, kind="stable")
        entered = taken_at[order][np.searchsorted(taken_ids[order], left_ids)]
        return left_at - entered

    def _keep(self, kept: list, which: int, ids: np.ndarray, seconds: float) -> None:
        ids = ids[ids % self.stride == 0] if self.stride > 1 else ids
        kept.append((ids, np.full(len(ids), seconds)))
        self._kept[which] += len(ids)
        while self._kept[which] > self.most:
            self.stride *= 2
            for index, held in enumerate((self._taken, self._left)):
                held[:] = [(i[i % self.stride == 0], s[i % self.stride == 0]) for i, s in held]
                self._kept[index] = sum(len(i) for i, _ in held)


def top_up(buffer: StreamBuffer, algorithm, store, watch: "Stopwatch", produce) -> int:
    """Fill ``buffer`` up to the algorithm's :func:`backlog_target` with the stream chunks
    ``produce()`` returns (tables of ``tid`` and ``nk``), ``watch`` stopped meanwhile - after
    the reads handed ahead finished, so none runs while it is stopped; the tuples fed."""
    store.wait_for_reads()
    fed = 0
    with watch.stopped():
        while buffer.available < backlog_target(algorithm):
            chunk = produce()
            buffer.append(chunk["tid"].to_numpy(), normalize(chunk["nk"], store.key_type).keys)
            fed += chunk.num_rows
    return fed


class Stopwatch:
    """Seconds of ``clock`` elapsed since it was made, but for the spans it was :meth:`stopped`."""

    def __init__(self, clock):
        self._clock = clock
        self._origin = clock()

    def read(self) -> float:
        return self._clock() - self._origin

    @contextlib.contextmanager
    def stopped(self):
        paused = self._clock()
        try:
            yield
        finally:
            self._origin += self._clock() - paused


def _warmed_up(config: BenchConfig, algorithm, joined_s: float) -> bool:
    """Whether the warm-up is over after ``joined_s`` seconds of joining (:func:`measure`): at
    the end of a cycle (:func:`_window_over`), after ``warmup_s`` and ``warmup_turnovers``, or
    ``warmup_max_s`` (a cycle that never ends stops it ``window_s`` later)."""
    if joined_s < config.warmup_s:
        return False
    if joined_s >= config.warmup_max_s + config.window_s:
        return True
    return algorithm.cycle_ended and (joined_s >= config.warmup_max_s or algorithm.turnovers() >= config.warmup_turnovers)


def _window_over(config: BenchConfig, algorithm, window_s: float) -> bool:
    """Whether the window, ``window_s`` seconds of joining so far, closes after this step: it
    lasts ``window_s`` of the config and then to the end of a cycle (:attr:`JoinAlgorithm.cycle_ended`,
    as the warm-up), so an algorithm whose tuples leave in bursts (SSIJ's join phases, a few
    seconds apart at R = 2M rows) is measured over whole cycles; at most ``warmup_max_s`` more."""
    if window_s < config.window_s:
        return False
    return algorithm.cycle_ended or window_s >= config.window_s + config.warmup_max_s


EXTRA_STATS = ("pq_loads", "starvation_loads", "threshold_now", "cache_admissions",  # the cache and PQ families
               "join_phases", "sequences", "pages_requested", "pages_read", "pages_by_in", "in_loads",  # SSIJ
               "cache_evictions")


CALIBRATION_RUNS = 3  # calibrations the unit costs are the median of (:func:`.core.calibration.calibrate`)


def store_costs(config: BenchConfig, store, costs: ComponentCosts | None) -> ComponentCosts:
    """The run's CPU costs with the S and T of ``store`` (what the algorithm sized itself with),
    or of loads at random places of R with ``config.io_samples``."""
    if costs is None:
        return calibrate(store, io_samples=config.io_samples, runs=CALIBRATION_RUNS)
    if config.io_samples:
        return costs
    return costs.with_io(*store.calibrate())


@dataclass
class Window:
    """What :func:`measure` counted in its window: the tuples completed, the seconds joined,
    the CPU seconds of the joining thread in them (its reads' client side when it reads itself;
    not the database's, nor a read-ahead thread's), the steps and the cycles ended."""

    tuples: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    steps: int = 0
    cycles: int = 0

    def add(self, completed: int, seconds: float, cycle_ended: bool, cpu_seconds: float = 0.0) -> None:
        """Count one step that completed ``completed`` tuples in ``seconds``, ``cpu_seconds`` of them on the CPU."""
        self.tuples += completed
        self.seconds += seconds
        self.cpu_seconds += cpu_seconds
        self.steps += 1
        self.cycles += bool(cycle_ended)

    def per_iteration(self, iteration: str) -> tuple[float, float, float] | None:
        """``(tuples, seconds, CPU seconds)`` per ``iteration`` (a model's
        :attr:`.costmodel.Prediction.iteration`: ``"step"`` or ``"cycle"``); None when the window
        holds none."""
        count = self.cycles if iteration == "cycle" else self.steps
        return (self.tuples / count, self.seconds / count, self.cpu_seconds / count) if count else None


def _prediction_fields(model, rate: float, measured_hits, name: str, costs: ComponentCosts, config: BenchConfig,
                       shape: str, stats: dict, window: Window) -> dict:
    """The model's rate, at the measured hit ratio too for a cache algorithm, and its iteration
    next to the window's (``iteration``: tuples and milliseconds an iteration, measured and
    predicted), which tells a wrong w from a wrong c_loop where the rates disagree; and the
    joining thread's CPU milliseconds an iteration next to the model's c_loop without its I/O,
    which tells a wrong CPU term from a wrong I/O term (or from read-ahead's overlap of the two)."""
    if model is None:
        return {"predicted_tps": None, "measured_over_predicted": None, "model": None, "model_turnover_s": None,
                "iteration": None}
    fields = {
        "predicted_tps": round(model.service_rate_tps, 1),
        "measured_over_predicted": round(rate / model.service_rate_tps, 3) if model.service_rate_tps else None,
        "model": model.model,
        "model_turnover_s": round(model.turnover_s, 3),
    }
    compared = model
    if model.hit_ratio is not None:
        fields["predicted_hit_ratio"] = round(model.hit_ratio, 4)
        if measured_hits is not None and measured_hits < 1:
            compared = explain(name, stats["memory_split"], costs, config.rows, config.zipf, shape,
                               shape_seed=RANDOM_SHAPE_SEED, p_n=measured_hits, settings=stats["settings"])
            fields["predicted_tps_at_measured_hits"] = round(compared.service_rate_tps, 1)
    measured = window.per_iteration(compared.iteration)
    fields["iteration"] = None if measured is None else {
        "per": compared.iteration, "tuples": round(measured[0], 1), "ms": round(measured[1] * 1e3, 6),
        "cpu_ms": round(measured[2] * 1e3, 6), "model_tuples": round(compared.tuples_per_iteration, 1),
        "model_ms": round(compared.iteration_s * 1e3, 6),
        "model_cpu_ms": round((compared.iteration_s - compared.io_s) * 1e3, 6)}
    return fields


def ratio_text(value) -> str:
    return f"{value:.2f}" if value is not None else "-"


def tps_text(value) -> str:
    return f"{value:,.0f}" if value is not None else "-"


def format_table(results: list[dict]) -> list[str]:
    width = max([14, *(len(r["algorithm"]) for r in results)])  # a variant's label makes a name longer
    lines = [
        f"{'shape':<7} {'algorithm':<{width}} {'tuples/s':>11} {'x INLJ':>8} {'x IN-list':>9} {'queries/s':>9} "
        f"{'rows/query':>10} {'disk share':>10} {'p50 ms':>9} {'p99 ms':>9} {'peak MiB':>8} {'mem ok':>6} "
        f"{'predicted':>11} {'meas/pred':>9}"
    ]
    for shape in dict.fromkeys(r["shape"] for r in results):
        rows = [r for r in results if r["shape"] == shape]
        base = {r["algorithm"]: r["service_rate_tps"] for r in rows}
        for r in rows:
            def ratio(name):
                return f"{r['service_rate_tps'] / base[name]:.1f}" if base.get(name) else "-"
            lines.append(
                f"{shape:<7} {r['algorithm']:<{width}} {r['service_rate_tps']:>11,.0f} {ratio('inlj'):>8} {ratio('inlist'):>9} "
                f"{r['disk_queries_per_s']:>9,.0f} {r['rows_per_query']:>10,.0f} {r['disk_time_share']:>10.0%} "
                f"{r['processing_ms_p50'] or 0:>9,.1f} {r['processing_ms_p99'] or 0:>9,.1f} "
                f"{r['structure_bytes_peak'] / 2**20:>8.1f} {'yes' if r['memory_ok'] else 'NO':>6} "
                f"{tps_text(r.get('predicted_tps')):>11} {ratio_text(r.get('measured_over_predicted')):>9}"
            )
    return lines


def bench_master(master: str, rows: int, out=print, clock=time.perf_counter) -> tuple[str, dict | None]:
    """The bench's R of ``rows`` rows (generated once, reused after), announced with whether it
    fits in the server's cache; returns its table and :func:`server_cache`."""
    table = f"bench_r{rows}"
    started = clock()
    info = generate_master(master, table, rows, seed=0)
    out(f"master {redact(master)} table {table}: {rows:,} rows "
        f"({'reused' if info['reused'] else 'generated'}, {clock() - started:.1f} s)")
    cache = server_cache(master, table)
    if cache is not None:
        out(server_cache_line(cache))
    return table, cache


def transient_notes(results: list[dict], config: BenchConfig) -> list[str]:
    """A note on the cells whose warm-up stopped at ``warmup_max_s`` before the tuples they hold
    turned over ``warmup_turnovers`` times: their window may measure the fill of H_S (or of
    H_R) rather than the steady state the model describes."""
    short = [r for r in results if r.get("warmup_turnovers", math.inf) < config.warmup_turnovers]
    if not short:
        return []
    cells = ", ".join(f"{r['shape']} {r['algorithm']} {r['warmup_turnovers']:g}" for r in short)
    return [f"note: the warm-up stopped at {config.warmup_max_s:g} s before {config.warmup_turnovers:g} turnovers "
            f"of the tuples held for (turnovers reached): {cells}"]


def costs_line(costs: ComponentCosts) -> str:
    c = costs
    return (f"S {c.query_s * 1e3:.3f} ms, T {c.row_s * 1e6:.2f} us/row, IN {c.in_query_s * 1e3:.3f} ms + "
            f"{c.in_key_s * 1e6:.2f} us/key + {c.in_leaf_s * 1e6:.1f} us/leaf ({c.leaf_rows:.0f} rows a leaf), "
            f"per tuple (us) c_S {c.c_S * 1e6:.3f} "
            f"c_A {c.c_A * 1e6:.3f} c_E {c.c_E * 1e6:.3f} c_O {c.c_O * 1e6:.3f} c_cache {c.c_cache * 1e6:.3f}, "
            f"per call (us) step {c.c_step * 1e6:.0f} pop {c.c_pop * 1e6:.0f} round {c.c_round * 1e6:.0f}")
