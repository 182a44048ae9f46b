"""Every field of a progress record the UI reads is one the record has (no browser, no Airflow
stack): the task page's tiles (``r.<field>`` of ``d.latest``), the joins list's columns
(:data:`...readings.SUMMARY_FIELDS`) and the charts' series (the history's, :data:`...progress.HISTORY_SERIES`)."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from airflow_provider_semijoin.core.progress import HISTORY_SERIES, ProgressRecord
from airflow_provider_semijoin.plugins import readings

STATIC = Path(readings.__file__).parent / "static"
RECORD = {f.name for f in fields(ProgressRecord)}
COMPUTED = {"disk_queries_per_s"}  # columns readings.history_columns adds to the history's


def test_every_record_field_the_task_page_reads_is_a_field_of_the_record():
    script = (STATIC / "task.js").read_text()
    assert "const r = d.latest;" in script
    read = set(re.findall(r"\br\.([a-z_0-9]+)", script)) | set(re.findall(r"\bd\.latest\.([a-z_0-9]+)", script))
    assert len(read) > 20 and read <= RECORD, sorted(read - RECORD)


def test_every_series_a_chart_draws_is_kept_in_the_history_and_every_kept_one_is_a_record_field():
    script = (STATIC / "task.js").read_text()
    charted = set(re.findall(r'key: "([a-z_0-9]+)"', script)) | set(re.findall(r'totalOf\("([a-z_0-9]+)"\)', script))
    assert charted and charted <= set(HISTORY_SERIES) | COMPUTED, sorted(charted - set(HISTORY_SERIES) - COMPUTED)
    assert set(HISTORY_SERIES) <= RECORD


def test_every_field_of_the_joins_list_is_a_field_of_the_record():
    assert {field for _, field in readings.SUMMARY_FIELDS} <= RECORD
