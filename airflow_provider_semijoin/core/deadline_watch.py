"""The deadline-miss ratio over a sliding window of a join's progress history.

A join with per-tuple deadlines (SSIJ paper sec. IV-F: a deadline column, or arrival plus a
maximum latency) counts the tuples that left after their deadline in every progress record.
The window ratio is read from the history (:class:`.progress.ProgressHistory`): its cumulative
series (``total_deadline_misses``, ``total_input_rows``) make the count over the last
``window_s`` seconds exact even where the history has thinned its older points. The join
operators' ``deadline_miss_threshold`` and the ``DeadlineMissSensor`` both judge with it.
"""

from __future__ import annotations

from .checks import check_number, check_positive


def window_misses(history: dict | None, window_s: float) -> tuple[int, int]:
    """``(misses, tuples)`` over the ``window_s`` seconds before the newest point of ``history``."""
    if not history or not history.get("points"):
        return 0, 0
    index = {name: i for i, name in enumerate(history["series"])}
    t, misses, rows = index["time"], index["total_deadline_misses"], index["total_input_rows"]
    points = [p for p in history["points"] if p[t] is not None]
    if not points:
        return 0, 0
    newest = points[-1]
    before = [p for p in points if p[t] < newest[t] - window_s]
    base_misses, base_rows = (before[-1][misses] or 0, before[-1][rows] or 0) if before else (0, 0)
    return int((newest[misses] or 0) - base_misses), int((newest[rows] or 0) - base_rows)


def check_miss_ratio(history: dict | None, threshold: float, window_s: float, min_tuples: int) -> str | None:
    """A sentence describing the breach when more than ``threshold`` of the tuples of the window
    (at least ``min_tuples`` of them) missed their deadline; None otherwise."""
    misses, tuples = window_misses(history, window_s)
    if tuples < max(min_tuples, 1) or misses / tuples <= threshold:
        return None
    return (
        f"{misses} of {tuples} tuples ({misses / tuples:.1%}) missed their deadline in the last "
        f"{window_s:g} s, above the threshold of {threshold:.1%}"
    )


def check_threshold(threshold, window_s, min_tuples, names=("threshold", "window_s", "min_tuples")) -> None:
    """Validate the three settings of a deadline watch; ``names`` are the arguments as the user wrote them."""
    check_number(names[0], threshold, "a ratio in [0, 1)", minimum=0, below=1)
    check_positive(names[1], window_s, "a positive number of seconds")
    check_positive(names[2], min_tuples, integer=True)
