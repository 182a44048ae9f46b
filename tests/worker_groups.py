"""Which xdist worker group each test file belongs to (setup.cfg: ``-n 2``; conftest.py's
``pytest_xdist_make_scheduler`` hands each group to one worker whole)."""

from __future__ import annotations

# The test files that share something outside their process, and what: the files of a group run
# on one xdist worker, one after another; every other file is a
# group of its own, so its module fixtures (a standalone cluster, a master built once) serve it whole.
WORKER_GROUPS = {
    "faults": ("tests/faults/",),  # faults.json, read and rewritten by each fault test
    "hostile": ("tests/hostile/",),  # the hostile-input tally, written once at the session's end
    "bench-tables": (  # tables of fixed names (bench_r<rows>, soak_master) and the README's demo run
        "tests/test_bench_demo.py", "tests/test_bench_changes.py", "tests/test_reproduce.py", "tests/test_readme.py",
        "tests/spark/test_soak.py", "tests/plugins/test_demo_ui.py"),
}


# The groups of the first tier that take longest, longest first (seconds of test time in a CI run on
# two workers): a worker starts on them first, so the run does not end with one worker still busy
# on one of them while the other idles.
LONGEST_FIRST = (
    "tests/spark/test_capture_spark.py", "bench-tables", "faults",
    "tests/spark/test_cluster.py", "tests/joins/test_hybridjoin.py", "tests/joins/test_frontstage.py",
    "tests/airflow/test_credentials.py", "tests/joins/test_ssij.py", "tests/plugins/test_monitor_browser.py",
)


def start_rank(group: str) -> int:
    """Where ``group`` starts in a run: the longest first, then the rest in the order collected."""
    return LONGEST_FIRST.index(group) if group in LONGEST_FIRST else len(LONGEST_FIRST)


def worker_group(path: str) -> str:
    """The xdist group of the test file at ``path`` (relative to the repository)."""
    return next((name for name, prefixes in WORKER_GROUPS.items() if path.startswith(prefixes)), path)
