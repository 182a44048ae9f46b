"""Which xdist worker group each test file belongs to (setup.cfg: ``-n 2 --dist loadgroup``; the
hook that marks the tests is in conftest.py)."""

from __future__ import annotations

# The test files that share something outside their process, and what: the files of a group run
# on one xdist worker, one after another (setup.cfg: ``--dist loadgroup``); every other file is a
# group of its own, so its module fixtures (a standalone cluster, a master built once) serve it whole.
WORKER_GROUPS = {
    "faults": ("tests/faults/",),  # faults.json, read and rewritten by each fault test
    "hostile": ("tests/hostile/",),  # the hostile-input tally, written once at the session's end
    "bench-tables": (  # tables of fixed names (bench_r<rows>, soak_master) and the README's demo run
        "tests/test_bench_demo.py", "tests/test_bench_changes.py", "tests/test_reproduce.py", "tests/test_readme.py",
        "tests/spark/test_soak.py", "tests/plugins/test_demo_ui.py"),
}


def worker_group(path: str) -> str:
    """The xdist group of the test file at ``path`` (relative to the repository)."""
    return next((name for name, prefixes in WORKER_GROUPS.items() if path.startswith(prefixes)), path)
