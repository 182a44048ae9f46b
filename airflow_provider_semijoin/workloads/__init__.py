"""Workload generators of the papers: master data R, Zipf-skewed key streams, bursty arrivals,
the temporal-locality stream of SSIJ.

Pure numpy + pyarrow (plus the core's SQL helpers to load R into a database): no Airflow, no
Spark imports.
"""

from .bursty import bursty_arrivals
from .master import absent_key, generate_master, master_keys, master_table
from .temporal import temporal_stream, temporal_stream_chunks
from .zipf import zipf_ranks, zipf_stream, zipf_stream_chunks

__all__ = [
    "absent_key",
    "bursty_arrivals",
    "generate_master",
    "master_keys",
    "master_table",
    "temporal_stream",
    "temporal_stream_chunks",
    "zipf_ranks",
    "zipf_stream",
    "zipf_stream_chunks",
]
