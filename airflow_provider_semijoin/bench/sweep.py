"""``semijoin bench --sweep-cache``: every cache algorithm measured and predicted at several
sizes of H_R (the papers' Figure 2 / 5(b)); the empirical optimum next to the cost model's and
to eq. 4's (``best_cache_size``)."""

from __future__ import annotations

import numpy as np

from ..core.errors import ConfigError
from ..core.joins import create
from ..core.joins.registry import CACHE_ALGORITHMS
from ..core.prediction import explain
from ..core.stores import open_store
from ..core.unitcosts import ComponentCosts
from ..workloads.zipf import RANDOM_SHAPE_SEED
from .steady import MODEL_SHAPES, BenchConfig, measure, ratio_text, registered, store_costs, tps_text

MODEL_GRID = 24  # sizes of H_R the cost model is evaluated at when it looks for its optimum


def _sweep_plan(config: BenchConfig, table: str, name: str, shape: str, costs: ComponentCosts) -> dict:
    """Bytes per cached key, H_R as eq. 4 sizes it (``best_cache_size``: what the algorithm
    chooses by itself), and the cost model's optimum over a grid of sizes of H_R; ``name`` may be
    a variant NAME@LABEL, with its own parameters."""
    params, base = config.params_for(name), registered(name)
    with open_store(config.master, table, "nk") as store:
        costs = store_costs(config, store, costs)
        split = create(base, store, config.memory, params).memory_split()
        eq4_keys = split["cache_keys"]
        per_key = (split["cache_bytes"] / eq4_keys) if eq4_keys else None
        if per_key is None:
            one = create(base, store, config.memory, {**params, "cache_keys": 1}).memory_split()
            per_key = one["cache_bytes"]
        largest = max(config.sweep_cache) * config.memory / per_key
        grid = np.geomspace(1, max(2.0, min(config.rows, 2 * largest)), MODEL_GRID).astype(np.int64)
        sweep = [max(1, int(share * config.memory / per_key)) for share in config.sweep_cache]
        model = {}
        for keys in sorted(set(grid.tolist()) | set(sweep) | {eq4_keys}):
            try:
                algorithm = create(base, store, config.memory, {**params, "cache_keys": keys})
            except ConfigError:  # H_R leaves too little to the disk phase
                continue
            model[int(keys)] = explain(base, algorithm, costs, config.rows, config.zipf, shape,
                                       shape_seed=RANDOM_SHAPE_SEED).service_rate_tps
    best = max(model, key=model.get) if model else None
    return {"bytes_per_key": per_key, "eq4_keys": eq4_keys, "sweep_keys": sweep,
            "model_best_keys": best, "model_best_tps": model.get(best)}


def sweep_cache(config: BenchConfig, table: str, costs: ComponentCosts, out=print) -> dict:
    """Measure and predict each cache algorithm (and each variant of one) at each share of the
    memory for H_R."""
    names = [name for name in config.algorithms if registered(name) in CACHE_ALGORITHMS]
    results, optima = [], []
    out("")
    out(f"cache sweep: H_R at {', '.join(f'{s:.0%}' for s in config.sweep_cache)} of the memory")
    for shape in [shape for shape in config.shapes if shape in MODEL_SHAPES]:
        for name in names:
            plan = _sweep_plan(config, table, name, shape, costs)
            rows = []
            for share, keys in zip(config.sweep_cache, plan["sweep_keys"]):
                try:
                    r = measure(config, table, name, shape, costs=costs, params={"cache_keys": keys})
                except ConfigError as exc:
                    out(f"  {shape:<7} {name:<14} H_R {share:>6.1%}: skipped ({exc})")
                    continue
                r.update(cache_share=share, cache_keys=keys)
                out(f"  {shape:<7} {name:<14} H_R {share:>6.1%} {keys:>10,} keys {r['service_rate_tps']:>11,.0f} tuples/s "
                    f"(predicted {tps_text(r['predicted_tps'])})")
                rows.append(r)
            results += rows
            optima.append(_optimum(name, shape, rows, plan, config))
    out("")
    out(f"cache sweep, Zipf {config.zipf}, memory {config.memory / 2**20:.4g} MiB, R = {config.rows:,} rows, "
        f"window {config.window_s:.0f} s after {config.warmup_s:.0f} s warm-up")
    for line in format_sweep(results, optima):
        out(line)
    return {"shares": list(config.sweep_cache), "results": results, "optima": optima}


def _optimum(name: str, shape: str, rows: list[dict], plan: dict, config: BenchConfig) -> dict:
    def share(keys):
        return round(keys * plan["bytes_per_key"] / config.memory, 4) if keys is not None else None

    measured = max(rows, key=lambda r: r["service_rate_tps"]) if rows else None
    predicted = max(rows, key=lambda r: r["predicted_tps"] or 0) if rows else None
    return {
        "algorithm": name,
        "shape": shape,
        "measured_best_cache_keys": measured and measured["cache_keys"],
        "measured_best_share": measured and measured["cache_share"],
        "measured_best_tps": measured and measured["service_rate_tps"],
        "predicted_best_cache_keys": predicted and predicted["cache_keys"],
        "predicted_best_share": predicted and predicted["cache_share"],
        "model_best_cache_keys": plan["model_best_keys"],
        "model_best_share": share(plan["model_best_keys"]),
        "model_best_tps": plan["model_best_tps"] and round(plan["model_best_tps"], 1),
        "eq4_best_cache_keys": plan["eq4_keys"],
        "eq4_best_share": share(plan["eq4_keys"]),
    }


def format_sweep(results: list[dict], optima: list[dict]) -> list[str]:
    lines = [f"{'shape':<7} {'algorithm':<14} {'H_R share':>9} {'H_R keys':>10} {'tuples/s':>11} {'predicted':>11} "
             f"{'meas/pred':>9} {'hit ratio':>9} {'p_N':>6}"]
    for r in results:
        hits = r.get("cache_hit_ratio")
        lines.append(
            f"{r['shape']:<7} {r['algorithm']:<14} {r['cache_share']:>9.1%} {r['cache_keys']:>10,} "
            f"{r['service_rate_tps']:>11,.0f} {tps_text(r['predicted_tps']):>11} {ratio_text(r['measured_over_predicted']):>9} "
            f"{hits if hits is not None else '-':>9} {r.get('predicted_hit_ratio', '-'):>6}"
        )
    lines.append("")
    lines.append("optimum size of H_R (share of the memory, keys): measured | best predicted of the sweep | "
                 "cost model | eq. 4 (best_cache_size)")

    def cell(share, keys):
        return f"{share:.1%} ({keys:,})" if keys is not None else "-"

    for o in optima:
        lines.append(
            f"{o['shape']:<7} {o['algorithm']:<14} {cell(o['measured_best_share'], o['measured_best_cache_keys']):>18} | "
            f"{cell(o['predicted_best_share'], o['predicted_best_cache_keys']):>18} | "
            f"{cell(o['model_best_share'], o['model_best_cache_keys']):>18} | "
            f"{cell(o['eq4_best_share'], o['eq4_best_cache_keys']):>18}"
        )
    return lines
