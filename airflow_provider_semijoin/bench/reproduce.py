"""``semijoin reproduce``: the papers' experiments run on this machine, as curves in one report.

Each experiment is a grid of cells (an algorithm at one setting of one variable); each cell is
measured ``repeats`` times with :func:`.bench.measure` (the papers' method, HYBRIDJOIN sec. 6.1:
a backlog, a warm-up, a window, the clock running only while the join steps) and reported as
the median with its min-max range. Every cell of a run shares the master table, the stream's
seed, so the ratios within one run are what to read; absolute rates move with the machine. The
unit costs the models predict a cell with are calibrated just before it (:meth:`Reproduction.calibrate`),
so a prediction and its measurement see the machine in one state, and kept with the cell.

The experiments (``EXPERIMENTS``):

* ``skew``: service rate over the Zipf exponent, INLJ, MESHJOIN, HYBRIDJOIN, -L and -PQ
  (HYBRIDJOIN paper Fig. 7(e); the PQ paper Fig. 3(c) for -L and -PQ), SSJ and CMESHJOIN (SSJ
  Fig. 6(c), CMESHJOIN Fig. 3(d)), CACHEJOIN-L and -PQ;
* ``memory``: over the memory budget as a share of R's bytes, the cache front-stage family
  (SSJ, CMESHJOIN, CACHEJOIN, -L, -PQ) and HYBRIDJOIN against MESHJOIN (SSJ Fig. 6(a),
  CMESHJOIN Fig. 3(b), HYBRIDJOIN Fig. 7(d));
* ``pq_vs_l``: -PQ over -L for both families at each skew (from the ``skew`` cells);
* ``ssij``: SSIJ against MESHJOIN and HYBRIDJOIN, both shapes (SSIJ paper sec. VI-B, Fig. 8);
* ``policy``: SSIJ's page-cache policy (utility counters) against LRU (Fig. 11);
* ``max_scan``: SSIJ over maxScan (Fig. 15);
* ``temporal``: the temporal-locality stream (SSIJ sec. VI-A) for SSIJ, HYBRIDJOIN, CACHEJOIN;
* ``dbms``: SSIJ against the DBMS's own index join (SSIJ sec. VI-C, Fig. 9): a uniform stream,
  SSIJ with 10% of R's bytes (the paper's budget), the DBMS one statement over a chunk of the
  stream held in memory, its buffer pool warm (MySQL/MariaDB only; on SQLite the cell says so);
* ``model``: measured over predicted (:func:`.core.prediction.explain`) for every cell that has
  a model; a cache algorithm's model is given the hit ratio measured (the issue's criterion:
  constants calibrated, hit ratio measured), and the table shows its ideal-p_N prediction too.

The report (``<out>/README.md``) has one PNG per experiment (matplotlib), the tables, and one
line per claim of the papers (:mod:`.claims`): reproduced or not, with the factor measured.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .server import dbms_index_join
from .steady import CALIBRATION_RUNS, BenchConfig, measure
from .claims import CLAIMS, judge
from ..core.calibration import calibrate
from ..core.errors import ConfigError
from ..core.stores import DatabaseURL, open_store, redact
from ..core.stores.sql import MYSQL
from ..core.unitcosts import ComponentCosts
from ..workloads import generate_master
from .. import __version__

KEY = "nk"


@dataclass(frozen=True)
class Scale:
    """How big a reproduction is: R's rows, the default budget (the papers' 50 MB at 2M rows,
    scaled with R), the warm-up and window of one measurement, the repeats of each cell, and
    the grids of the swept variables."""

    rows: int
    memory: int
    warmup_s: float
    warmup_turnovers: float  # the warm-up lasts until H_S turned over this often too (:func:`.steady.measure`)
    window_s: float
    repeats: int
    skews: tuple[float, ...]
    memory_shares: tuple[float, ...]  # of R's bytes
    max_scans: tuple[int, ...]
    dbms_chunk: int  # stream tuples the DBMS joins in one statement (the paper: 1M)
    calibrate_per: str  # the unit costs calibrated anew before each "repeat" of a cell, or once an "experiment"


SCALES = {
    "small": Scale(rows=40_000, memory=1 << 20, warmup_s=0.1, warmup_turnovers=0.0, window_s=0.3, repeats=3,
                   skews=(0.0, 0.5, 1.0), memory_shares=(0.01, 0.1), max_scans=(1, 16), dbms_chunk=20_000,
                   calibrate_per="experiment"),
    "standard": Scale(rows=2_000_000, memory=50 << 20, warmup_s=3.0, warmup_turnovers=2.0, window_s=6.0, repeats=3,
                      skews=(0.0, 0.25, 0.5, 0.75, 1.0), memory_shares=(0.01, 0.02, 0.05, 0.1, 0.2),
                      max_scans=(1, 4, 16, 64, 200), dbms_chunk=1_000_000, calibrate_per="repeat"),
}
SKEW_ALGORITHMS = ("inlj", "meshjoin", "hybridjoin", "hybridjoin-l", "hybridjoin-pq", "ssj", "cmeshjoin", "cachejoin-l",
                   "cachejoin-pq")
MEMORY_ALGORITHMS = ("meshjoin", "hybridjoin", "ssj", "cmeshjoin", "cachejoin", "cachejoin-l", "cachejoin-pq")
SSIJ_ALGORITHMS = ("ssij", "meshjoin", "hybridjoin")
TEMPORAL_ALGORITHMS = ("ssij", "hybridjoin", "cachejoin")
DBMS_JOIN = "dbms-index-join"  # the DBMS's own join, a cell's algorithm in the ``dbms`` experiment
DBMS_MEMORY_SHARE = 0.1  # of R's bytes, SSIJ's budget next to the DBMS (SSIJ sec. VI-C)
EXPERIMENTS = ("skew", "memory", "pq_vs_l", "ssij", "policy", "max_scan", "temporal", "dbms", "model")


@dataclass
class Cell:
    """One algorithm at one setting: the repeats' service rates and what the model predicts."""

    experiment: str
    algorithm: str
    setting: dict
    rates: list[float]
    predicted_tps: float | None = None  # the model's rate (a cache algorithm's at the measured hit ratio), median of predictions
    predicted_ideal_tps: float | None = None  # a cache algorithm's model with the ideal p_N (CMESHJOIN eq. 1), median
    predictions: list = dataclasses.field(default_factory=list)  # each repeat's predicted_tps, on its own calibration
    ideal_predictions: list = dataclasses.field(default_factory=list)  # each repeat's predicted_ideal_tps
    refused: str | None = None  # why the algorithm could not run here (a budget too small)
    unavailable: str | None = None  # why it was not run on this master at all
    costs: dict | None = None  # the unit costs the last repeat's prediction used (ComponentCosts.as_dict)
    iterations: list[dict] = dataclasses.field(default_factory=list)  # each repeat's iteration, measured and modelled
    hit_ratios: list[float] = dataclasses.field(default_factory=list)  # each repeat's measured H_R hit ratio (caches)
    # The inputs of a prediction (:func:`.core.prediction.explain`) besides the costs and the hit
    # ratio: the last repeat's (every repeat sizes itself alike).
    memory_split: dict | None = None  # how the algorithm split its budget (h_S, page rows, h_R...)
    settings: dict | None = None  # the algorithm's parameters, defaults included
    stream: dict | None = None  # the stream the model assumes: {"zipf": ..., "shape": ...}

    @classmethod
    def from_dict(cls, values: dict) -> "Cell":
        """A cell as :meth:`as_dict` wrote it into ``results.json`` (its derived fields dropped;
        a field a run of older code did not write has its default)."""
        return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values})

    def iteration(self) -> dict | None:
        """The median over the repeats of each figure of an iteration (:func:`.steady.measure`'s
        ``iteration``: tuples, milliseconds and CPU milliseconds, measured and modelled; a run
        before 2026-11-29 measured no CPU); None without any."""
        if not self.iterations:
            return None
        figures = [k for k in ("tuples", "ms", "cpu_ms", "model_tuples", "model_ms", "model_cpu_ms")
                   if all(k in i for i in self.iterations)]
        return {"per": self.iterations[0]["per"],
                **{k: statistics.median(i[k] for i in self.iterations) for k in figures}}

    @property
    def median(self) -> float | None:
        return statistics.median(self.rates) if self.rates else None

    @property
    def measured_over_predicted(self) -> float | None:
        """The median rate over the model's; None where either is missing."""
        return self.median / self.predicted_tps if self.rates and self.predicted_tps else None

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "median": self.median,
                "min": min(self.rates, default=None), "max": max(self.rates, default=None)}


class Reproduction:
    """Runs the cells of a scale on one master table and keeps them."""

    def __init__(self, master: str, scale: Scale, seed: int = 0, out=print):
        self.master, self.scale, self.seed, self.out = master, scale, seed, out
        self.table = f"reproduce_r{scale.rows}"
        self.cells: list[Cell] = []
        self.calibrations = 0  # calibrations so far: each seeds its samples of R apart from the last's
        self.costs: tuple[str, ComponentCosts] | None = None  # the experiment calibrated for, and its costs
        generate_master(master, self.table, scale.rows, seed=seed)
        with open_store(master, self.table, KEY) as store:
            page_map = store.page_map()
            self.r_bytes = int(store.row_bytes(page_map) * page_map.n_rows)

    def calibrate(self, experiment: str) -> ComponentCosts:
        """The unit costs for the next repeat of a cell of ``experiment``, as ``semijoin bench``
        calibrates them (S, T and the IN cost a leaf from loads and IN queries at random places
        of R, the median of CALIBRATION_RUNS): anew for each repeat at the standard scale, for
        each experiment at the small one. One calibration at the start of a standard run goes
        stale on a shared machine (the steps' CPU costs and T drift within an hour, and every
        cell of the model table fell below its prediction), and one a cell was not enough either:
        back-to-back calibrations of one cell scatter, so its prediction and its measurement
        are uncorrelated. A cell's prediction is therefore the median of its repeats' (the
        figures: ``docs/measurements.md``)."""
        if self.costs and self.costs[0] == experiment and self.scale.calibrate_per == "experiment":
            return self.costs[1]
        with open_store(self.master, self.table, KEY) as store:
            costs = calibrate(store, seed=self.seed + self.calibrations * CALIBRATION_RUNS,
                              io_samples=BenchConfig.io_samples, runs=CALIBRATION_RUNS)
        self.calibrations += 1
        self.costs = (experiment, costs)
        return costs

    def config(self, zipf: float = 1.0, memory: int | None = None, shape: str = "noperm") -> BenchConfig:
        s = self.scale
        return BenchConfig(master=self.master, rows=s.rows, memory=memory or s.memory, zipf=zipf, shapes=[shape],
                           warmup_s=s.warmup_s, warmup_turnovers=s.warmup_turnovers, window_s=s.window_s,
                           seed=self.seed)

    def cell(self, experiment: str, algorithm: str, setting: dict, config: BenchConfig, shape: str = "noperm",
             params: dict | None = None) -> Cell:
        cell = Cell(experiment, algorithm, setting, [], stream={"zipf": config.zipf, "shape": shape})
        for _ in range(self.scale.repeats):
            costs = self.calibrate(experiment)
            cell.costs = costs.as_dict()
            try:
                r = measure(config, self.table, algorithm, shape, costs=costs, params=params)
            except ConfigError as exc:
                if not str(exc).startswith("memory:"):
                    raise
                cell.refused = str(exc)
                break
            cell.rates.append(r["service_rate_tps"])
            cell.memory_split, cell.settings = r["memory_split"], r["settings"]
            if r.get("iteration"):
                cell.iterations.append(r["iteration"])
            if r.get("cache_hit_ratio") is not None:
                cell.hit_ratios.append(r["cache_hit_ratio"])
            cell.predictions.append(r.get("predicted_tps_at_measured_hits") or r.get("predicted_tps"))
            if r.get("predicted_tps_at_measured_hits"):
                cell.ideal_predictions.append(r.get("predicted_tps"))
        cell.predicted_tps = _median_of(cell.predictions)
        cell.predicted_ideal_tps = _median_of(cell.ideal_predictions)
        return self._record(cell)

    def _record(self, cell: Cell) -> Cell:
        """Keep ``cell`` and print its line of progress."""
        self.cells.append(cell)
        if cell.rates:
            shown = f"{cell.median:>11,.0f} tuples/s"
        else:
            shown = f"not run: {cell.unavailable}" if cell.unavailable else "does not fit the budget"
        self.out(f"  {cell.experiment:<9} {cell.algorithm:<14} {json.dumps(cell.setting):<34} {shown}")
        return cell

    # -- the experiments -------------------------------------------------------------------------
    def run(self, experiments=EXPERIMENTS) -> None:
        s = self.scale
        if "skew" in experiments or "pq_vs_l" in experiments:
            for zipf in s.skews:
                for name in SKEW_ALGORITHMS:
                    self.cell("skew", name, {"skew": zipf}, self.config(zipf=zipf))
        if "memory" in experiments:
            for share in s.memory_shares:
                memory = max(int(share * self.r_bytes), 1)
                for name in MEMORY_ALGORITHMS:
                    self.cell("memory", name, {"memory_share": share}, self.config(memory=memory))
        if "ssij" in experiments:
            for shape in ("noperm", "random"):
                for name in SSIJ_ALGORITHMS:
                    self.cell("ssij", name, {"shape": shape}, self.config(shape=shape), shape)
        if "policy" in experiments:
            for shape in ("noperm", "random", "temporal"):
                for policy in ("utility", "lru"):
                    self.cell("policy", "ssij", {"shape": shape, "policy": policy}, self.config(shape=shape), shape,
                              {"cache_policy": policy})
        if "max_scan" in experiments:
            for max_scan in s.max_scans:
                self.cell("max_scan", "ssij", {"max_scan": max_scan}, self.config(), "noperm", {"max_scan": max_scan})
        if "temporal" in experiments:
            for name in TEMPORAL_ALGORITHMS:
                self.cell("temporal", name, {"shape": "temporal"}, self.config(shape="temporal"), "temporal")
        if "dbms" in experiments:
            self.dbms()

    def dbms(self) -> None:
        """SSIJ and the DBMS's own index join on one uniform stream (SSIJ sec. VI-C, Fig. 9): the
        DBMS's cell holds the warm-buffer-pool runs of :func:`.server.dbms_index_join`."""
        setting = {"stream": "uniform"}
        self.cell("dbms", "ssij", setting, self.config(zipf=0.0, memory=max(int(DBMS_MEMORY_SHARE * self.r_bytes), 1)))
        cell = Cell("dbms", DBMS_JOIN, setting, [])
        if DatabaseURL.parse(self.master).dialect is not MYSQL:
            cell.unavailable = f"runs inside MySQL/MariaDB; the master {redact(self.master)} is not one"
        else:
            s = self.scale
            found = dbms_index_join(self.master, self.table, s.dbms_chunk, s.rows, self.seed, warm_runs=s.repeats,
                                    out=lambda _line: None)
            cell.rates = [r["tuples_per_s"] for r in found["runs"] if r["warm"] and r["writes_result"]]
        self._record(cell)


def _median_of(values: list) -> float | None:
    """The median of the repeats' predictions that there are (a shape without a model has none)."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def code_version() -> str:
    """The package's version, and its commit when it runs from a git checkout of this project
    (not from an installed copy that merely sits inside some git tree): a report says which
    code measured it."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return __version__
    try:
        found = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=root, capture_output=True, text=True,
                               timeout=10)
    except OSError:  # no git on this machine
        return __version__
    commit = found.stdout.strip() if found.returncode == 0 else ""
    return f"{__version__} ({commit})" if commit else __version__


def run_reproduce(master: str, scale_name: str, out_dir: str | Path, seed: int = 0, out=print,
                  experiments=EXPERIMENTS) -> dict:
    """Run every experiment at ``scale_name`` on ``master`` and write ``out_dir/README.md``,
    one PNG per experiment and ``results.json``; returns the summary."""
    if scale_name not in SCALES:
        raise ConfigError(f"scale: {scale_name!r} is not one of {list(SCALES)}")
    unknown = sorted(set(experiments or ()) - set(EXPERIMENTS))
    if unknown:
        raise ConfigError(f"experiments: {unknown[0]!r} is not one of {list(EXPERIMENTS)}")
    from .report import write_report

    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    out(f"reproduce --scale {scale_name}: master {redact(master)}, R = {SCALES[scale_name].rows:,} rows")
    run = Reproduction(master, SCALES[scale_name], seed, out)
    run.run(tuple(experiments or EXPERIMENTS))
    verdicts = [judge(claim, run.cells, run.scale.rows) for claim in CLAIMS]
    summary = {
        "scale": scale_name,
        "scale_settings": dataclasses.asdict(run.scale),
        "master": redact(master),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "processor": platform.processor() or platform.machine()},
        "code": code_version(),
        "seconds": round(time.perf_counter() - started, 1),
        "r_bytes": run.r_bytes,
        "calibration_runs": CALIBRATION_RUNS,
        "cells": [c.as_dict() for c in run.cells],
        "claims": verdicts,
    }
    summary["plots"] = write_report(folder, summary, run.cells)
    (folder / "results.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    out(f"wrote {folder / 'README.md'} ({summary['seconds']} s)")
    return summary


def rewrite_report(out_dir: str | Path, out=print) -> dict:
    """Write ``out_dir/README.md`` and its plots again from the ``results.json`` of a run there,
    measuring nothing: the claims judged and the report written by this code, the cells as the
    run measured them (a standard run takes more than an hour); returns the summary."""
    from .report import write_report

    folder = Path(out_dir)
    path = folder / "results.json"
    if not path.is_file():
        raise ConfigError(f"out: {str(folder)!r} holds no results.json of a run to write the report from")
    summary = json.loads(path.read_text())
    cells = [Cell.from_dict(c) for c in summary["cells"]]
    summary["claims"] = [judge(claim, cells, summary["scale_settings"]["rows"]) for claim in CLAIMS]
    summary["report_code"] = code_version()
    summary["plots"] = write_report(folder, summary, cells)
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    out(f"wrote {folder / 'README.md'} again from {path}")
    return summary
