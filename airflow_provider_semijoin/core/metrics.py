"""Measurements of a join: latency percentiles.

The papers measure the service rate (stream tuples processed per second) over a window after
a warm-up (HYBRIDJOIN sec. 6.1), and processing time (from entering the join to leaving it)
and waiting time (arrival to entering, sec. 3).
"""

from __future__ import annotations

import numpy as np


def latency_ms(seconds: np.ndarray) -> dict:
    """p50 / p99 / max of durations given in seconds, in milliseconds (None when empty)."""
    if len(seconds) == 0:
        return {"p50": None, "p99": None, "max": None}
    p50, p99 = np.percentile(seconds, [50, 99]) * 1000.0
    return {"p50": round(float(p50), 3), "p99": round(float(p99), 3), "max": round(float(seconds.max()) * 1000.0, 3)}

