"""The job's counts and summary (:mod:`...spark.jobstats`) serialise to the keys and value types
a real job's summary had before they were declared (captured from a run of the Spark runner),
and the totals are the micro-batches' counts added up."""

from __future__ import annotations

from airflow_provider_semijoin.spark.jobstats import BatchCounts, JobCounts, JobSummary

# a real summary's keys (in order) and value types: a generator job of 3,000 tuples through HYBRIDJOIN
SUMMARY_TYPES = {
    "job": str, "stopped_by": str, "drained": str, "batches": int, "input_rows": int, "matched": int, "unmatched": int,
    "output_rows": int, "deadline_misses": int, "reconnects": int, "reconnect_wait_s": float, "held_for_retry": int,
    "queue_tuples": int, "duration_s": float, "last_progress": dict,
}


def test_the_totals_add_up_the_batches_and_the_summary_has_the_keys_and_types_it_had():
    counts = JobCounts()
    counts.add(BatchCounts(input_rows=10, matched=7, unmatched=3, output_rows=9, deadline_misses=1, reconnects=0,
                           reconnect_wait_s=0.0))
    counts.add(BatchCounts(input_rows=5, matched=5, output_rows=5, reconnects=1, reconnect_wait_s=0.25041))
    counts.last_record = {"batch_id": 1}
    summary = JobSummary(job="j", stopped_by="end_of_input", drained="end_of_input", counts=counts, held_for_retry=0,
                         queue_tuples=2, duration_s=3.14159).to_dict()
    assert list(summary) == list(SUMMARY_TYPES)
    assert {k: type(v) for k, v in summary.items()} == SUMMARY_TYPES
    assert (summary["batches"], summary["input_rows"], summary["matched"], summary["unmatched"], summary["output_rows"],
            summary["deadline_misses"], summary["reconnects"]) == (2, 15, 12, 3, 14, 1, 1)
    assert summary["reconnect_wait_s"] == 0.25 and summary["duration_s"] == 3.142
    assert summary["last_progress"] == {"batch_id": 1}
