"""``semijoin bench``: every algorithm of the config on every shape, one calibration of the
unit costs for all (:func:`run_bench`), then the opt-in experiments: the cache sweep
(:mod:`.sweep`) and SSIJ's (:mod:`.ssij_experiments`)."""

from __future__ import annotations

import time

from ..core.calibration import calibrate
from ..core.stores import open_store, redact
from .ssij_experiments import dbms_join, ssij_policies, sweep_max_scan
from .steady import (CALIBRATION_RUNS, BenchConfig, bench_master, costs_line, format_table, measure, tps_text,
                     transient_notes)
from .sweep import sweep_cache


def run_bench(config: BenchConfig, out=print) -> dict:
    table, cache = bench_master(config.master, config.rows, out)
    started = time.perf_counter()
    with open_store(config.master, table, "nk") as store:
        costs = calibrate(store, io_samples=config.io_samples, runs=CALIBRATION_RUNS)
    out(f"unit costs measured in {time.perf_counter() - started:.2f} s: {costs_line(costs)}")
    results = []
    for shape in config.shapes:
        for name in config.algorithms:
            r = measure(config, table, name, shape, costs=costs)
            out(f"  {shape:<7} {name:<14} {r['service_rate_tps']:>11,.0f} tuples/s (predicted {tps_text(r['predicted_tps'])})")
            results.append(r)
    out("")
    out(f"service rate, Zipf {config.zipf}, memory {config.memory / 2**20:.4g} MiB, R = {config.rows:,} rows, "
        f"window {config.window_s:.0f} s after {config.warmup_s:.0f} s warm-up")
    for line in format_table(results):
        out(line)
    for line in transient_notes(results, config):
        out(line)
    report = {
        "config": {**config.__dict__, "master": redact(config.master)},
        "costs": costs.as_dict(),
        "server_cache": cache,
        "results": results,
    }
    if config.sweep_cache:
        report["sweep"] = sweep_cache(config, table, costs, out)
    if config.ssij_policies:
        report["ssij_policies"] = ssij_policies(config, table, costs, out)
    if config.sweep_max_scan:
        report["ssij_max_scan"] = sweep_max_scan(config, table, costs, out)
    if config.dbms_join:
        report["dbms_join"] = dbms_join(config, table, costs, cache["buffer_pool_bytes"], out)
    return report
