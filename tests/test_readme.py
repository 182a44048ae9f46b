"""The README tells the truth: every shell command in its fenced blocks is run here (at small
sizes), or is one this file knows another test runs in full, and the DAG and YAML examples load.

* The two Quick-start commands are the two of ``.ci/run`` / CI: here only their programs are
  checked (``semijoin demo --help``, ``pytest --version``); ``tests/test_bench_demo.py`` runs
  the demo, CI runs ``.ci/run``.
* The install commands are those ``tests/test_wheel_install.py`` runs (build, plain pip install).
* Every ``semijoin ...`` command runs in a temporary folder with its sizes made small
  (:data:`SMALL`), and its output files are checked.
* The Python DAG example and the YAML pipeline are loaded by Airflow's own parsing in a
  subprocess (an ``AIRFLOW_HOME`` of their own): DAG ids, task ids, the operator's arguments.
  They name connections and folders that do not exist here, so they are not run.
A command the README gains that none of these covers fails the test.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from airflow_provider_semijoin import __version__
from airflow_provider_semijoin.pipeline.spec import SurrogateKeyStep

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
QUICK_START = (".ci/setup && .venv/bin/semijoin demo", ".ci/setup && .venv/bin/python -m pytest")
INSTALL = ("python -m build --wheel", f"pip install dist/airflow_provider_semijoin-{__version__}-py3-none-any.whl")
SMALL = (  # README size -> the size run here
    ("--rows 100000", "--rows 3000"),
    ("--rows 500000", "--rows 5000"),
    ("--master-rows 100000", "--master-rows 3000"),
    ("--rows 200000", "--rows 4000"),
    ("--warmup 5", "--warmup 0.5"),
    ("--window 10", "--window 1"),
    ("--minutes 30", "--minutes 0.25"),
    ("--update-every 20", "--update-every 5"),
    ("--kill-every 15", "--kill-every 4"),
    ("--scale small --out report", "--scale small --out report --experiments max_scan"),  # all of it: test_reproduce
)


def fenced(*languages: str) -> list[str]:
    """The bodies of the README's fenced blocks in these languages, in order."""
    text = (REPO / "README.md").read_text()
    pattern = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
    return [m.group(2) for m in pattern.finditer(text) if m.group(1) in languages]


def shell_commands() -> list[str]:
    commands = []
    for block in fenced("sh", "shell", "bash", "console"):
        for command in block.replace("\\\n", " ").splitlines():
            command = " ".join(command.split())
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def test_quick_start_is_the_two_commands_and_their_programs_answer():
    commands = shell_commands()
    assert [c for c in commands if c.startswith(".ci/")] == list(QUICK_START)
    assert (REPO / ".ci" / "run").read_text().strip().splitlines()[-1] == QUICK_START[1]
    demo = subprocess.run([BIN / "semijoin", "demo", "--help"], capture_output=True, text=True, timeout=120)
    assert demo.returncode == 0 and "--stream-rows" in demo.stdout, demo.stderr
    pytest_version = subprocess.run([BIN / "python", "-m", "pytest", "--version"], capture_output=True, text=True,
                                    timeout=120)
    assert pytest_version.returncode == 0, pytest_version.stderr


def test_install_commands_are_the_ones_the_wheel_test_runs():
    commands = shell_commands()
    assert [c for c in commands if c.startswith(("python ", "pip "))] == list(INSTALL)
    wheel_test = (REPO / "tests" / "test_wheel_install.py").read_text()
    assert '"-m", "build", "--wheel"' in wheel_test and '"-m", "pip", "install", "--no-compile", wheel]' in wheel_test


def test_every_semijoin_command_runs_at_a_small_size(tmp_path):
    commands = shell_commands()
    others = [c for c in commands if c not in QUICK_START and c not in INSTALL]
    assert others and all(c.startswith("semijoin ") for c in others), f"README commands no test runs: {others}"
    for command in others:
        small = command
        for big, little in SMALL:
            small = small.replace(big, little)
        proc = subprocess.run([BIN / "semijoin", *shlex.split(small, comments=True)[1:]], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, f"{small}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        if command.startswith("semijoin bench"):
            assert re.search(r"noperm\s+hybridjoin\s+[\d,]+", proc.stdout), proc.stdout
        if command.startswith("semijoin soak"):
            assert "exactly once: yes" in proc.stdout and (tmp_path / "soak" / "soak.csv").exists(), proc.stdout
        if command.startswith("semijoin reproduce"):
            assert (tmp_path / "report" / "max_scan.png").exists() and "claims" in proc.stdout, proc.stdout
        if command.startswith("semijoin changes enable"):
            assert "changes to product by any writer are captured (triggers created)" in proc.stdout, proc.stdout
        if command.startswith("semijoin algorithms"):
            assert "cachejoin-pq" in proc.stdout and "ssij" in proc.stdout
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["exactly_once"]["ok"] is True and stats["tuples_in"] == 5000
    matched = pq.read_table(tmp_path / "matched.parquet")
    assert {"sk", "category"} <= set(matched.column_names) and 0 < matched.num_rows <= 5000


_LOAD = textwrap.dedent(
    """
    import json, sys
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=sys.argv[1])
    out = {"import_errors": {k: str(v)[-500:] for k, v in bag.import_errors.items()}}
    for dag_id, dag in bag.dags.items():
        out[dag_id] = {t.task_id: {"type": type(t).__name__, "algorithm": getattr(t, "algorithm", None),
                                   "pipeline_steps": [s["column"] for s in getattr(t, "pipeline", {}).get("steps", [])]}
                       for t in dag.tasks}
    print(json.dumps(out))
    """
)
# a DAG file as the README's YAML section says: every YAML file of pipelines/ becomes a DAG
_PIPELINES_DAG = """\
from pathlib import Path
from airflow_provider_semijoin.pipeline.factory import dags_from_folder

dags_from_folder(Path(__file__).parent / "pipelines", globals())
"""


def test_dag_and_yaml_examples_load_in_airflow(tmp_path):
    (python,) = fenced("python")
    pipeline, *pieces = fenced("yaml")  # the pipeline, then pieces of one: lists of steps
    steps = [SurrogateKeyStep(**step) for piece in pieces for step in yaml.safe_load(piece)]  # or a SpecError
    assert [step.as_of for step in steps] == [  # the type-2 section's steps: columns, system periods
        {"event_time": "sold_at", "valid_from": "valid_from", "valid_to": "valid_to"},
        {"event_time": "sold_at", "system_time": True}]
    assert len(python.strip().splitlines()) <= 16  # "a DAG in 15 lines" (+ one blank line)
    dags_folder = tmp_path / "dags"
    (dags_folder / "pipelines").mkdir(parents=True)
    (dags_folder / "sales_product_keys.py").write_text(python)
    (dags_folder / "surrogate_keys.py").write_text(_PIPELINES_DAG)
    (dags_folder / "pipelines" / "sales_keys.yaml").write_text(pipeline)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(tmp_path / "home"), AIRFLOW__CORE__LOAD_EXAMPLES="False",
               AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{tmp_path / 'airflow.db'}")
    proc = subprocess.run([BIN / "python", "-c", _LOAD, dags_folder], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    dags = json.loads(proc.stdout.strip().splitlines()[-1])
    assert dags.pop("import_errors") == {}
    assert sorted(dags) == ["sales_keys", "sales_product_keys"]
    assert dags["sales_product_keys"] == {
        "product_keys": {"type": "SemiStreamJoinOperator", "algorithm": "cachejoin", "pipeline_steps": []}}
    tasks = dags["sales_keys"]
    surrogate = [t for t in tasks.values() if t["type"] == "SemiJoinPipelineOperator"]
    assert [t["pipeline_steps"] for t in surrogate] == [["product_code", "customer_code"]]
    assert any(t["type"] == "DeadlineMissSensor" for t in tasks.values()), tasks  # from deadline_monitor
