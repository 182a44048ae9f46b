"""``semijoin demo``: the main job on embedded defaults.

Generates a product master table in SQLite and a Zipf-skewed sales stream (2% of its keys
absent from the master), runs HYBRIDJOIN under a memory budget far smaller than the master
table, writes matched and unmatched rows, and checks the output twice: every stream tuple
left exactly once, and the output equals a plain hash join of the stream with all of R.
"""

from __future__ import annotations

from pathlib import Path

from .core.files import write_table
from .core.joins import create
from .core.oracle import engine_pairs, hash_join
from .core.runner import run_join
from .core.stores import open_store
from .workloads import generate_master, zipf_stream

SELECT = ["sk", "name", "category", "price"]


def run_demo(folder: Path, *, rows: int, stream_rows: int, memory: int, out=print) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{folder / 'master.db'}"
    info = generate_master(url, "product", rows, seed=0)
    out(f"master   {info['n_rows']:,} rows in {folder / 'master.db'} (table product, {'reused' if info['reused'] else 'generated'})")
    stream = zipf_stream(stream_rows, rows, exponent=1.0, shape="noperm", missing=0.02, seed=1)
    write_table(folder / "stream.parquet", stream, what="stream")
    out(f"stream   {stream.num_rows:,} sales, Zipf exponent 1 (hot products clustered), 2% unknown products")
    with open_store(url, "product", "nk", SELECT) as store:
        algorithm = create("hybridjoin", store, memory)
        result = run_join(algorithm, stream, "nk")
        expected = hash_join(store, stream, "nk")
    got = engine_pairs(result.matched, result.unmatched, SELECT, "tid")
    write_table(folder / "matched.parquet", result.matched, what="out")
    write_table(folder / "unmatched.parquet", result.unmatched, what="unmatched")
    s = result.stats
    split = s["memory_split"]
    r_bytes = rows * 120
    out(
        f"join     HYBRIDJOIN, memory {memory / 2**20:.1f} MiB (about {memory / r_bytes:.0%} of R): "
        f"H_S holds {split['stream_table_capacity_tuples']:,} tuples, pages of {split['page_rows']} rows"
    )
    out(f"rate     {s['service_rate_tps']:,.0f} tuples/s ({s['wall_s']:.2f} s, {s['disk_queries']:,} disk queries, {s['disk_rows']:,} rows read)")
    out(f"latency  processing time p50 {s['processing_ms_p50']} ms, p99 {s['processing_ms_p99']} ms")
    out(f"output   {s['tuples_matched']:,} matched, {s['tuples_unmatched']:,} unmatched {s['unmatched_by_reason']} -> {folder}/matched.parquet, unmatched.parquet")
    out(f"memory   peak {s['structure_bytes_peak']:,} bytes of a {memory:,}-byte budget")
    once = s["exactly_once"]
    out(f"check    exactly once: {'yes' if once['ok'] else 'NO'} (lost {once['lost']}, duplicated {once['duplicated']})")
    same = got == expected
    out(f"check    equal to a plain hash join of the stream with all of R: {'yes' if same else 'NO'} "
        f"({sum(expected[0].values()):,} matched pairs, {sum(expected[1].values()):,} unmatched)")
    return 0 if once["ok"] and same and s["structure_bytes_peak"] <= memory else 1
