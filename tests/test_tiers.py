"""The two tiers of the suite (setup.cfg, README "Quick start"): the README's test command runs the
first and leaves the acceptance tier out; ``pytest -m acceptance`` runs that tier alone; the files
that share something outside their process run on one xdist worker (``WORKER_GROUPS``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from worker_groups import WORKER_GROUPS, worker_group

REPO = Path(__file__).resolve().parents[1]
ACCEPTANCE = ".venv/bin/python -m pytest -m acceptance"


def collected(*arguments: str) -> set[str]:
    """The node ids ``pytest`` (this repository's settings) collects with ``arguments``."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
                           *arguments], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {line for line in proc.stdout.splitlines() if "::" in line}


def test_the_readmes_test_command_leaves_out_the_acceptance_tier_that_its_own_command_runs():
    assert f"`{ACCEPTANCE}`" in (REPO / "README.md").read_text()
    first, acceptance = collected("tests"), collected("-m", "acceptance", "tests")
    assert first and acceptance and not first & acceptance
    files = {node.split("::")[0] for node in acceptance}
    assert {"tests/test_wheel_install.py", "tests/test_reproduce.py", "tests/plugins/test_demo_ui.py",
            "tests/spark/test_recovery.py", "tests/spark/test_soak.py"} <= files
    # every file of the acceptance tier but these keeps tests in the first tier
    assert {f for f in files if not any(node.startswith(f + "::") for node in first)} == {
        "tests/test_wheel_install.py", "tests/plugins/test_demo_ui.py", "tests/spark/test_executor_parts_bench.py",
        "tests/airflow/test_submit.py"}


def test_every_worker_group_names_files_that_exist_and_holds_its_files_together():
    for prefixes in WORKER_GROUPS.values():
        assert all((REPO / prefix).exists() for prefix in prefixes), prefixes
    assert worker_group("tests/faults/test_reconnect.py") == worker_group("tests/faults/harness.py") == "faults"
    assert worker_group("tests/test_readme.py") == worker_group("tests/plugins/test_demo_ui.py") == "bench-tables"
    assert worker_group("tests/core/test_asof.py") == "tests/core/test_asof.py"
