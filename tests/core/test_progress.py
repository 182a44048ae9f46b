import json

import pytest

from airflow_provider_semijoin.core.progress import (
    HISTORY_SERIES,
    LINE_PREFIX,
    ProgressHistory,
    ProgressRecord,
    json_after,
    parse_line,
)


def record(batch_id: int, time: float, **extra) -> ProgressRecord:
    return ProgressRecord(
        algorithm="hybridjoin", batch_id=batch_id, time=time, input_rows=10 * batch_id, matched=9,
        unmatched=1, output_rows=9, service_rate_tps=100.0, batch_duration_s=0.1, **extra,
    )


def test_line_round_trip_inside_a_log_line():
    r = record(3, 1000.5, latency_ms_p99=12.5, unmatched_by_reason={"not_in_master": 1})
    line = "[2026-11-21 10:00:00] INFO - " + r.to_line()
    assert parse_line(line) == r.to_dict()
    assert ProgressRecord.from_dict(parse_line(line)) == r


@pytest.mark.parametrize("line", ["no record here", LINE_PREFIX + "{not json", LINE_PREFIX + "[1, 2]"])
def test_parse_line_ignores_other_lines(line):
    assert parse_line(line) is None


def test_to_line_rejects_nan():
    with pytest.raises(ValueError):
        record(1, 1.0, cache_hit_ratio=float("nan")).to_line()


def test_history_is_bounded_and_keeps_the_newest_points():
    history = ProgressHistory(max_points=10, max_age_s=1e9)
    for i in range(1000):
        history.append(record(i, float(i)).to_dict())
    assert len(history) <= 10
    points = history.to_dict()["points"]
    batch = HISTORY_SERIES.index("batch_id")
    ids = [p[batch] for p in points]
    assert ids == sorted(ids) and ids[-1] == 999 and ids[-2] == 998
    assert ids[0] < 900  # the past is thinned, not dropped


def test_history_drops_points_older_than_max_age():
    history = ProgressHistory(max_points=100, max_age_s=10.0)
    for i in range(30):
        history.append(record(i, float(i)).to_dict())
    times = [p[0] for p in history.to_dict()["points"]]
    assert times[0] == 19.0 and times[-1] == 29.0


def test_history_survives_a_json_round_trip():
    history = ProgressHistory(max_points=50)
    for i in range(20):
        history.append(record(i, float(i), cache_hit_ratio=float("inf")).to_dict())
    data = json.loads(json.dumps(history.to_dict(), allow_nan=False))
    again = ProgressHistory.from_dict(data, max_points=50)
    assert again.to_dict() == history.to_dict()


def test_a_json_line_is_read_when_a_jvm_log_line_runs_on_after_it():
    """spark-submit merges the driver's stdout with the JVM's log: a log line may follow a
    progress or summary object on the same line (CI saw "Extra data" after a summary); the
    object is read, and a line whose object is cut short is no record."""
    summary = {"tuples_in": 2000, "settings": {"eviction": "lfu"}}
    line = "SEMIJOIN_SUMMARY " + json.dumps(summary) + "26/11/29 16:38:20 WARN DAGScheduler: Failed to cancel job group"
    assert json_after(line, "SEMIJOIN_SUMMARY ") == summary
    progress = record(3, 1000.5).to_dict()
    assert parse_line(LINE_PREFIX + json.dumps(progress) + "26/11/29 INFO SparkContext: ...") == progress
    assert json_after("SEMIJOIN_SUMMARY " + json.dumps(summary)[:-5], "SEMIJOIN_SUMMARY ") is None
    assert json_after("26/11/29 INFO nothing here", "SEMIJOIN_SUMMARY ") is None
