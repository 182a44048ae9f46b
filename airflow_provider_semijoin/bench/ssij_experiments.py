"""SSIJ's experiments (SSIJ paper sec. VI), each opt-in in ``semijoin bench``: its page-cache
policy against LRU (Figure 11, :func:`ssij_policies`), a maxScan sweep (Figure 15,
:func:`sweep_max_scan`) and the comparison with the DBMS's own index join (Figure 9,
:func:`dbms_join`). The temporal-locality stream (sec. VI-A) is a shape of :mod:`.steady`."""

from __future__ import annotations

import dataclasses

from ..core.joins.ssij import POLICIES as SSIJ_POLICIES
from ..core.unitcosts import ComponentCosts
from .server import dbms_index_join
from .steady import BenchConfig, measure, ratio_text


def _ssij_row(r: dict) -> str:
    extra = r["extra"]
    return (f"{r['service_rate_tps']:>11,.0f} {r['cache_hit_ratio'] if r['cache_hit_ratio'] is not None else '-':>9} "
            f"{r['disk_queries_per_s']:>9,.1f} {r['rows_per_query']:>10,.0f} {r['disk_time_share']:>10.0%} "
            f"{extra.get('join_phases', 0):>6} {extra.get('pages_read', 0) / max(extra.get('pages_requested', 0), 1):>9.2f}")


SSIJ_HEADER = (f"{'tuples/s':>11} {'hit ratio':>9} {'queries/s':>9} {'rows/query':>10} {'disk share':>10} "
               f"{'phases':>6} {'read/req':>9}")


def _ssij_runs(config: BenchConfig, table: str, costs: ComponentCosts, param: str, values, out) -> list[dict]:
    """SSIJ measured on every shape at each of ``values`` of its parameter ``param`` (tagged on each result)."""
    results = []
    for shape in config.shapes:
        for value in values:
            r = measure(config, table, "ssij", shape, costs=costs, params={param: value})
            r[param] = value
            out(f"  {shape:<8} {param} {value!s:<8} {r['service_rate_tps']:>11,.0f} tuples/s")
            results.append(r)
    return results


def ssij_policies(config: BenchConfig, table: str, costs: ComponentCosts, out=print) -> dict:
    """Figure 11: SSIJ with its ToKeep/ToRemove policy (utility counters) and with LRU, on every
    shape, same data and budget; the ratio is measured in this run."""
    out("")
    out("SSIJ cache policy (Figure 11): utility (ToKeep/ToRemove) vs LRU")
    results = _ssij_runs(config, table, costs, "cache_policy", SSIJ_POLICIES, out)
    out("")
    out(f"SSIJ cache policy, Zipf {config.zipf}, memory {config.memory / 2**20:.4g} MiB, R = {config.rows:,} rows")
    out(f"{'shape':<8} {'policy':<8} " + SSIJ_HEADER + f" {'x LRU':>6}")
    for r in results:
        lru = next(x for x in results if x["shape"] == r["shape"] and x["cache_policy"] == "lru")
        ratio = r["service_rate_tps"] / lru["service_rate_tps"] if lru["service_rate_tps"] else None
        out(f"{r['shape']:<8} {r['cache_policy']:<8} {_ssij_row(r)} {ratio_text(ratio):>6}")
    return {"results": results}


def sweep_max_scan(config: BenchConfig, table: str, costs: ComponentCosts, out=print) -> dict:
    """Figure 15: SSIJ's service rate over maxScan (the most pages one range query reads)."""
    out("")
    out(f"SSIJ maxScan sweep (Figure 15): {', '.join(map(str, config.sweep_max_scan))} pages")
    results = _ssij_runs(config, table, costs, "max_scan", config.sweep_max_scan, out)
    out("")
    out(f"SSIJ maxScan, Zipf {config.zipf}, memory {config.memory / 2**20:.4g} MiB, R = {config.rows:,} rows")
    out(f"{'shape':<8} {'maxScan':>7} {'effective':>9} " + SSIJ_HEADER)
    for r in results:
        out(f"{r['shape']:<8} {r['max_scan']:>7} {r['memory_split']['max_scan']:>9} {_ssij_row(r)}")
    return {"results": results}


def dbms_join(config: BenchConfig, table: str, costs: ComponentCosts, buffer_pool: int, out=print) -> dict:
    """Figure 9 (sec. VI-C): the DBMS's own index join (:func:`dbms_index_join`, one warm run)
    against SSIJ's service rate on the same uniform stream and the configured budget; the DBMS
    holds R in its ``buffer_pool`` bytes (:func:`server_cache`)."""
    uniform = dataclasses.replace(config, zipf=0.0)
    found = dbms_index_join(config.master, table, config.dbms_chunk, config.rows, config.seed, out=out)
    runs, plan = found["runs"], found["plan"]
    ssij = measure(uniform, table, "ssij", "noperm", costs=costs)
    out(f"  SSIJ on the same uniform stream: {ssij['service_rate_tps']:,.0f} tuples/s")
    best = max(r["tuples_per_s"] for r in runs)
    access = "; ".join(f"{p.get('table')}: {p.get('type')} {p.get('key') or ''}".strip() for p in plan)
    out("")
    out(f"DBMS index join vs SSIJ (Figure 9), uniform stream, R = {config.rows:,} rows")
    out(f"{'join':<34} {'memory':>18} {'tuples/s':>11} {'x DBMS':>7}")
    for r in runs:
        out(f"{'DBMS, ' + r['run']:<34} {f'pool {buffer_pool / 2**20:.0f} MiB':>18} "
            f"{r['tuples_per_s']:>11,.0f} {r['tuples_per_s'] / best:>7.2f}")
    out(f"{'SSIJ':<34} {f'{config.memory / 2**20:.4g} MiB':>18} {ssij['service_rate_tps']:>11,.0f} "
        f"{ssij['service_rate_tps'] / best:>7.2f}")
    out(f"plan: {access}")
    return {"dbms": runs, "plan": plan, "buffer_pool_bytes": buffer_pool, "ssij": ssij,
            "ssij_over_best_dbms": round(ssij["service_rate_tps"] / best, 3)}
