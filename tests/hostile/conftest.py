"""Hostile input (issue 13): a tally of the fuzzed inputs per surface and the distinct errors they
produced, written to ``$SEMIJOIN_ARTIFACTS/hostile/tally.json`` (default ``tests/artifacts``) and
printed at the end of the session (the closing note's table); ``tally.md`` is the same as Markdown
tables (docs/reliability/)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


from .tally import TALLY, tally_markdown


def pytest_terminal_summary(terminalreporter):
    if not TALLY:
        return
    folder = Path(os.environ.get("SEMIJOIN_ARTIFACTS", Path(__file__).parents[1] / "artifacts")) / "hostile"
    folder.mkdir(parents=True, exist_ok=True)
    table = {surface: {"inputs": t["inputs"], "accepted": t["accepted"], "distinct_errors": len(t["errors"]),
                       "errors": dict(sorted(t["errors"].items(), key=lambda kv: -kv[1]))}
             for surface, t in sorted(TALLY.items())}
    (folder / "tally.json").write_text(json.dumps(table, indent=2) + "\n")
    (folder / "tally.md").write_text(tally_markdown(table))
    terminalreporter.write_sep("-", "hostile input: fuzzed inputs per surface")
    for surface, t in table.items():
        terminalreporter.write_line(
            f"{surface:<28} {t['inputs']:>6} inputs {t['accepted']:>6} accepted {t['distinct_errors']:>4} distinct errors")


@pytest.fixture(scope="session")
def spark():
    """The local Spark session of the landing-folder test (the active one if another suite made it)."""
    from airflow_provider_semijoin.spark.session import get_spark

    session = get_spark("local[2]", app_name="semijoin-hostile-tests")
    yield session
    session.stop()
